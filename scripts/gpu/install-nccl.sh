#!/usr/bin/env bash
# Build NCCL from source at a pinned tag and put it where torch AND deep_ep load it: over the
# pip nvidia-nccl wheel's libnccl.so.2 and headers (DeepEP's check_nccl_so() wants the loaded
# library byte-identical to the one under its NCCL root, which it finds through that wheel).
# For a bare GPU host, and for image steps that cannot pip-install a new enough NCCL wheel.
#
# Usage: install-nccl.sh [--src ARCHIVE.tar.gz|DIR] [--version 2.30.7] [--arch 90]
#                        [--prefix /opt/nccl] [--jobs N]
# Without --src it clones https://github.com/NVIDIA/nccl at tag v<version>-1.
set -euo pipefail

version=2.30.7
arch=90
prefix=/opt/nccl
src=""
jobs=$(nproc)
py=${PYTHON:-python3}
while (($#)); do
    case $1 in
        --src) src=$2; shift 2 ;;
        --version) version=$2; shift 2 ;;
        --arch) arch=$2; shift 2 ;;
        --prefix) prefix=$2; shift 2 ;;
        --jobs) jobs=$2; shift 2 ;;
        *) echo "install-nccl.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

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
got=$(awk -F' *:= *' '/^NCCL_(MAJOR|MINOR|PATCH)/ {v = v (v ? "." : "") $2} END {print v}' \
    "$tree/makefiles/version.mk")
if [[ $got != "$version" ]]; then
    echo "install-nccl.sh: source is NCCL $got, expected $version" >&2
    exit 1
fi

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

# Where the pip wheel keeps libnccl.so.2 (nvidia/nccl/lib or nvidia/cu13/lib, by wheel).
root=$("$py" - <<'PY'
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
)
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

"$py" - "$lib" "$version" <<'PY'
import ctypes, sys
code = ctypes.c_int(0)
ctypes.CDLL(sys.argv[1]).ncclGetVersion(ctypes.byref(code))
want = [int(p) for p in sys.argv[2].split(".")]
want_code = want[0] * 10000 + want[1] * 100 + want[2]
print(f"+ {sys.argv[1]}: ncclGetVersion = {code.value}")
sys.exit(0 if code.value == want_code else 1)
PY
