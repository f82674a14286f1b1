#!/usr/bin/env bash
# The links NVIDIA's -dev packages make, which the JITs look for, where the base image lacks them:
#   /usr/local/cuda -> CUDA_HOME              the images' CUDA_HOME
#   include -> targets/x86_64-linux/include   DeepEP's JIT: -I$CUDA_HOME/include
#   lib64   -> targets/x86_64-linux/lib       FlashInfer's link: -L$CUDA_HOME/lib64{,/stubs}
#   targets/x86_64-linux/lib/libcudart.so -> libcudart.so.MAJOR   FlashInfer's link: -lcudart
# Usage: link-cuda-dev.sh CUDA_HOME CUDA_MAJOR   (CUDA_HOME: /usr/local/cuda-13.0)
set -euo pipefail

home=$1 major=$2
lib=targets/x86_64-linux/lib
cd "${home}"
if [ ! -e "${lib}/libcudart.so.${major}" ]; then
  echo "epstack: ${home}/${lib}/libcudart.so.${major} is missing: not a CUDA ${major} base image" >&2
  exit 1
fi
[ -e /usr/local/cuda ] || ln -s "$(basename "${home}")" /usr/local/cuda
[ -e include ] || ln -s targets/x86_64-linux/include include
[ -e lib64 ] || ln -s "${lib}" lib64
[ -e "${lib}/libcudart.so" ] || ln -s "libcudart.so.${major}" "${lib}/libcudart.so"
