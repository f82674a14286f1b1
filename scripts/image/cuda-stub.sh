#!/usr/bin/env bash
# Sourced by guard-layer.sh and entrypoint.sh. Where no NVIDIA driver is mounted (an image build, a
# container on a machine without GPUs) libcuda.so.1 is missing and `import deep_ep` fails, since its
# _C.so links it. Then the CUDA driver stub stands in: every call returns CUDA_ERROR_STUB_LIBRARY, so
# imports and CPU work go on and nothing can pretend to run on a GPU. With a driver, nothing changes:
# one ldconfig lists (the NVIDIA Container Toolkit's) or one in an LD_LIBRARY_PATH folder (GKE's).
epstack_stub=/usr/local/cuda/lib64/stubs/libcuda.so
epstack_driver=$(ldconfig -p | grep -c 'libcuda.so.1 ' || true)
for epstack_folder in ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }}; do
  if [ -e "${epstack_folder}/libcuda.so.1" ]; then epstack_driver=1; fi
done
if [ -e "${epstack_stub}" ] && [ "${epstack_driver}" = 0 ]; then
  if ! epstack_shim=$(mktemp -d 2>/dev/null); then
    echo "epstack: TMPDIR=${TMPDIR:-/tmp} cannot be written, and the CUDA driver stub is linked from a" \
      "folder there (no NVIDIA driver here); fix: set TMPDIR to a writable folder" >&2
    exit 3
  fi
  ln -s "${epstack_stub}" "${epstack_shim}/libcuda.so.1"
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH}:}${epstack_shim}"
  export EPSTACK_CUDA_STUB="${epstack_stub}"
fi
unset epstack_stub epstack_shim epstack_driver epstack_folder
