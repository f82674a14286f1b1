#!/usr/bin/env bash
# Build a DeepEP V2 wheel at a pinned commit (with its fmt submodule) and record where it came from.
# Usage: build-deepep.sh REPO COMMIT "ARCH_LIST" BUILD_REQUIREMENTS WHEEL_DIR
#
# The compiler is the system gcc/g++ that built torch's ABI, never a CC/CXX/CUDAHOSTCXX wrapper
# from the environment: a _C.so linked against another libstdc++ exports libstdc++ symbols and
# the first dispatch SEGFAULTs inside DeepEP's JIT (std::regex -> locale -> codecvt).
set -euo pipefail

repo=$1 commit=$2 archs=$3 build_requirements=$4 wheels=$5
src=$(mktemp -d)
git init --quiet "${src}"
git -C "${src}" remote add origin "${repo}"
git -C "${src}" fetch --quiet --depth 1 origin "${commit}"
git -C "${src}" checkout --quiet FETCH_HEAD
git -C "${src}" submodule update --quiet --init --recursive --depth 1
found=$(git -C "${src}" rev-parse HEAD)
if [ "${found}" != "${commit}" ]; then
  echo "epstack: DeepEP checkout is ${found}, pins.env says ${commit}" >&2
  exit 1
fi

unset CUDAHOSTCXX
export CC=/usr/bin/gcc CXX=/usr/bin/g++
export TORCH_CUDA_ARCH_LIST="${archs}"
site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# DeepEP finds NCCL and NVSHMEM through these (deep_ep/utils/find_pkgs.py); the pip wheels are pinned.
export EP_NCCL_ROOT_DIR="${site}/nvidia/nccl" EP_NVSHMEM_ROOT_DIR="${site}/nvidia/nvshmem"
export MAX_JOBS="${MAX_JOBS:-$(nproc)}"

mkdir -p "${wheels}"
uv pip install --quiet --requirement "${build_requirements}"
python -m pip wheel --no-build-isolation --no-deps --wheel-dir "${wheels}" "${src}"
printf '{"repo": "%s", "commit": "%s", "torch_cuda_arch_list": "%s"}\n' \
  "${repo}" "${found}" "${archs}" > "${wheels}/deepep-source.json"
rm -rf "${src}"
echo "epstack: DeepEP ${found} built for ${archs}"
