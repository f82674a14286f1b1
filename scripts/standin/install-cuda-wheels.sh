#!/usr/bin/env bash
# Lay NVIDIA's CUDA wheels out the way NVIDIA's images do, for epstack's stand-in base (never a product).
# Usage: install-cuda-wheels.sh UV_VERSION CUDA_HOME WHEEL_DIR WORK FLAVOUR
#   WORK holds cuda-requirements.txt, cuda-constraints.txt, system-nccl-requirements.txt and
#   libcuda-stub.py; the trees the stand-in stages copy to / are written to WORK/<stage>/:
#   devel           CUDA_HOME with bin/, nvvm/, targets/x86_64-linux/{include,lib}, the include and lib64
#                   links, lib64/stubs/libcuda.so, the dev .so links, /usr/local/cuda, ld.so.conf.d
#   FLAVOUR         the runtime image stood in for: runtime (CUDA_HOME with the shared libraries only and
#                   the lib64 link) or base (cudart only), each with /usr/local/cuda and ld.so.conf.d
#   system-nccl     libnccl.so.2 where NVIDIA's libnccl2 package puts it; system-nccl-dev: its header
#                   and libnccl.so link (libnccl-dev)
#   WHEEL_DIR is the wheels' directory under nvidia/ (cu13 for CUDA 13).
set -euo pipefail

uv_version=$1 cuda_home=$2 wheel_dir=$3 work=$4 flavour=$5
python3 -m venv /tmp/uv
/tmp/uv/bin/pip install --quiet --disable-pip-version-check "uv==${uv_version}"
# lowest-direct: the oldest cuobjdump the requirements allow; cuda-toolkit itself is pinned exactly.
/tmp/uv/bin/uv pip install --quiet --target /tmp/toolkit --resolution lowest-direct \
  --requirement "${work}/cuda-requirements.txt" --constraint "${work}/cuda-constraints.txt"
/tmp/uv/bin/uv pip install --quiet --target /tmp/system-nccl --no-deps \
  --requirement "${work}/system-nccl-requirements.txt"

wheels=/tmp/toolkit/nvidia/${wheel_dir}
devel=${work}/devel${cuda_home}
target=${devel}/targets/x86_64-linux
mkdir -p "${target}" "${devel}/nvvm/lib64"
cp -a "${wheels}/bin" "${devel}/bin"
cp -a "${wheels}/nvvm/." "${devel}/nvvm/"
mv "${wheels}"/lib/libnvvm.so* "${devel}/nvvm/lib64/"
cp -a "${wheels}/include" "${target}/include"
cp -a "${wheels}/lib" "${target}/lib"
ln -s targets/x86_64-linux/include "${devel}/include"
ln -s targets/x86_64-linux/lib "${devel}/lib64"
# The unversioned links NVIDIA's -dev packages add, so `-lcudart` and friends link.
for library in "${target}"/lib/lib*.so.* "${devel}"/nvvm/lib64/lib*.so.*; do
  link=${library%%.so.*}.so
  [ -e "${link}" ] || ln -s "$(basename "${library}")" "${link}"
done
# No wheel ships the driver stub: generate it from cuda.h (every function, returning
# CUDA_ERROR_STUB_LIBRARY), with the soname of NVIDIA's stub.
mkdir -p "${target}/lib/stubs"
python3 "${work}/libcuda-stub.py" "${target}/include/cuda.h" > /tmp/libcuda-stub.c
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "${target}/lib/stubs/libcuda.so" /tmp/libcuda-stub.c

runtime=${work}/${flavour}${cuda_home}
mkdir -p "${runtime}/targets/x86_64-linux/lib"
if [ "${flavour}" = base ]; then
  cp -a "${target}"/lib/libcudart.so.* "${runtime}/targets/x86_64-linux/lib/"
else
  cp -a "${target}"/lib/lib*.so.* "${runtime}/targets/x86_64-linux/lib/"
  ln -s targets/x86_64-linux/lib "${runtime}/lib64"
fi

for stage in devel "${flavour}"; do
  ln -s "$(basename "${cuda_home}")" "${work}/${stage}/usr/local/cuda"
  mkdir -p "${work}/${stage}/etc/ld.so.conf.d"
  echo /usr/local/cuda/targets/x86_64-linux/lib > "${work}/${stage}/etc/ld.so.conf.d/000_cuda.conf"
  printf '/usr/local/nvidia/lib\n/usr/local/nvidia/lib64\n' > "${work}/${stage}/etc/ld.so.conf.d/nvidia.conf"
done

nccl=$(find /tmp/system-nccl -name libnccl.so.2 | head -n 1)
mkdir -p "${work}/system-nccl/usr/lib/x86_64-linux-gnu" "${work}/system-nccl-dev/usr/include" \
  "${work}/system-nccl-dev/usr/lib/x86_64-linux-gnu"
cp -L "${nccl}" "${work}/system-nccl/usr/lib/x86_64-linux-gnu/libnccl.so.2"
ln -s libnccl.so.2 "${work}/system-nccl-dev/usr/lib/x86_64-linux-gnu/libnccl.so"
cp "$(dirname "${nccl}")"/../include/nccl*.h "${work}/system-nccl-dev/usr/include/"

echo "epstack stand-in: CUDA in ${cuda_home}: $("${devel}/bin/nvcc" --version | tail -n 2 | head -n 1)"
