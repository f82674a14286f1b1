#!/usr/bin/env bash
# Put the pinned NCCL where torch AND deep_ep load it: the pip nvidia-nccl wheel's libnccl.so.2 and
# headers (DeepEP's check_nccl_so() wants the loaded library byte-identical to the one under its NCCL
# root, which it finds through that wheel). For a bare GPU host without network:
#   --wheel: the pinned wheel itself (ferried in: benchmarks/serve/ferry-pack.sh), installed over the
#            host's older one with pip (its metadata then says the version too); no build
#   else:    NCCL built from source at the pinned tag and put over the wheel's library and headers.
#
# Usage: install-nccl.sh --wheel nvidia_nccl_cuNN-VERSION-*.whl [--pins FILE]
#        install-nccl.sh --arch SM [--pins FILE] [--src ARCHIVE.tar.gz|DIR] [--prefix /opt/nccl] [--jobs N]
#   --arch   the GPUs' SM without the dot, e.g. 90 for Hopper
#   --pins   the pins file whose NCCL_VERSION is installed (default $EPSTACK_PINS or ./pins.env)
# Without --src it clones https://github.com/NVIDIA/nccl at tag v<NCCL_VERSION>-1. The versions are read
# and checked by epstack (`epstack pins get`, `epstack image nccl-check`), run from this checkout.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
pins=${EPSTACK_PINS:-pins.env}
arch=""
prefix=/opt/nccl
src=""
wheel=""
jobs=$(nproc)
py=${PYTHON:-python3}
while (($#)); do
    case $1 in
        --wheel) wheel=$2; shift 2 ;;
        --src) src=$2; shift 2 ;;
        --pins) pins=$2; shift 2 ;;
        --arch) arch=$2; shift 2 ;;
        --prefix) prefix=$2; shift 2 ;;
        --jobs) jobs=$2; shift 2 ;;
        *) echo "install-nccl.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
epstack() { PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" "$py" -m epstack "$@"; }
# Where the pip wheel keeps libnccl.so.2 (nvidia/nccl/lib or nvidia/cu13/lib, by wheel).
wheel_root() {
    "$py" - <<'PY'
from importlib.metadata import distributions
import os
for dist in distributions():
    name = (dist.metadata["Name"] or "").lower()
    if not name.startswith(("nvidia-nccl", "nvidia_nccl")):
        continue
    for f in dist.files or []:
        if os.path.basename(str(f)).startswith("libnccl.so"):
            print(os.path.dirname(os.path.dirname(str(f.locate()))))
            raise SystemExit
PY
}
if [[ -n $wheel ]]; then
    if [[ ! -f $wheel ]]; then
        echo "install-nccl.sh: --wheel $wheel: no such file; fix: pass the ferried nvidia-nccl wheel" >&2
        exit 2
    fi
    echo "+ installing $(basename "$wheel") over $("$py" -c 'import sys; print(sys.prefix)')'s NCCL"
    "$py" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --force-reinstall "$wheel"
    epstack image nccl-check --pins "$pins" --library "$(wheel_root)/lib/libnccl.so.2"
    exit
fi
if [[ ! $arch =~ ^[0-9]+[af]?$ ]]; then
    echo "install-nccl.sh: --arch SM is required, e.g. --arch 90 for Hopper (or --wheel WHEEL)" >&2
    exit 2
fi
version=$(epstack pins get NCCL_VERSION --pins "$pins")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [[ -z $src ]]; then
    git clone --depth 1 --branch "v${version}-1" https://github.com/NVIDIA/nccl.git "$work/nccl"
elif [[ -f $src ]]; then
    tar -xzf "$src" -C "$work"
else
    cp -a "$src" "$work/nccl"
fi
tree=$(dirname "$(find "$work" -maxdepth 3 -path '*/makefiles/version.mk' | head -n1)")/..
tree=$(cd "$tree" && pwd)
epstack image nccl-check --pins "$pins" --source "$tree"

# One toolchain: the system gcc, whatever wrappers the environment points CC/CXX at.
export CC=/usr/bin/gcc CXX=/usr/bin/g++
unset CUDAHOSTCXX
cuda_home=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
echo "+ building NCCL $version for sm_$arch with $jobs jobs into $prefix (CUDA $cuda_home)"
make -C "$tree" -j"$jobs" src.build BUILDDIR="$prefix" CUDA_HOME="$cuda_home" \
    NVCC_GENCODE="-gencode=arch=compute_${arch},code=sm_${arch}" >"$work/build.log" 2>&1 || {
    tail -n 40 "$work/build.log" >&2
    exit 1
}

root=$(wheel_root)
if [[ -n $root ]]; then
    mkdir -p "$prefix/pip-original"
    cp -n "$root/lib/libnccl.so.2" "$prefix/pip-original/" 2>/dev/null || true
    cp -L "$prefix/lib/libnccl.so.$version" "$root/lib/libnccl.so.2"
    mkdir -p "$root/include"
    cp -r "$prefix/include/." "$root/include/"
    echo "+ placed NCCL $version over the pip wheel at $root (original kept in $prefix/pip-original)"
    lib=$root/lib/libnccl.so.2
else
    echo "+ no pip nvidia-nccl wheel found: NCCL $version stays in $prefix (set EP_NCCL_ROOT_DIR)"
    lib=$prefix/lib/libnccl.so.2
fi

epstack image nccl-check --pins "$pins" --library "$lib"
