#!/usr/bin/env bash
# Build and install DeepEP (deep_ep.ElasticBuffer) at a pinned commit with ONE toolchain, then
# prove _C.so does not interpose on libstdc++.
#
# Why the toolchain matters: environments that point CC/CXX/CUDAHOSTCXX at a second g++ produce
# a deep_ep/_C.so that defines and exports libstdc++ codecvt symbols; ElasticBuffer constructs,
# then the first dispatch SEGFAULTs inside DeepEP's JIT (std::regex -> locale). Built with the
# system gcc/g++ and CUDAHOSTCXX unset, _C.so exports none. No LD_PRELOAD needed.
#
# Usage: install-deepep.sh [--src ARCHIVE.tar.gz|DIR] [--fmt ARCHIVE.tar.gz|DIR] [--ref SHA]
#                          [--repo URL] [--arch 9.0] [--keep DIR] [--manifest FILE]
# Without --src it clones --repo at --ref with its fmt submodule. An archive must come from
# `git archive` (its header names the commit); a directory must be a git checkout. The commit is
# checked against --ref and recorded in --manifest (default: where `epstack guard` looks, as in
# the images) for the guard's "deep_ep source" row.
# Needs torch, an NCCL >= 2.30.4 wheel or root (install-nccl.sh) and nvidia-nvshmem.
set -euo pipefail

ref=${DEEPEP_REF:-d4f41e4e93602a15e95f55f6ee8df8f1aaa0e4bb}
repo=https://github.com/deepseek-ai/DeepEP.git
manifest=/opt/epstack/wheels/deepep-source.json
arch=9.0
src=""
fmt=""
keep=""
py=${PYTHON:-python3}
while (($#)); do
    case $1 in
        --src) src=$2; shift 2 ;;
        --fmt) fmt=$2; shift 2 ;;
        --ref) ref=$2; shift 2 ;;
        --repo) repo=$2; shift 2 ;;
        --manifest) manifest=$2; shift 2 ;;
        --arch) arch=$2; shift 2 ;;
        --keep) keep=$2; shift 2 ;;
        *) echo "install-deepep.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

work=${keep:-$(mktemp -d)}
mkdir -p "$work"
# The commit is checked before anything is unpacked or built.
if [[ -z $src ]]; then
    git clone "$repo" "$work/DeepEP"
    git -C "$work/DeepEP" checkout --quiet "$ref"
    git -C "$work/DeepEP" submodule update --init --depth 1 third-party/fmt
    found=$(git -C "$work/DeepEP" rev-parse HEAD)
elif [[ -f $src ]]; then
    found=$("$py" -c 'import sys, tarfile; print(tarfile.open(sys.argv[1]).pax_headers.get("comment", ""))' "$src")
else
    found=$(git -C "$src" rev-parse HEAD 2>/dev/null || true)
fi
if [[ $found != "$ref" ]]; then
    echo "install-deepep.sh: the source is commit '${found:-unknown}', expected $ref; pass a git checkout or a \`git archive\` of $ref" >&2
    exit 1
fi
tree=$work/DeepEP
if [[ -f $src ]]; then
    rm -rf "$tree"
    tar -xzf "$src" -C "$work"
elif [[ -n $src ]]; then
    rm -rf "$tree"
    cp -a "$src" "$tree"
fi
if [[ -n $fmt ]]; then
    rm -rf "$tree/third-party/fmt"
    mkdir -p "$tree/third-party/fmt"
    if [[ -f $fmt ]]; then
        tar -xzf "$fmt" -C "$tree/third-party/fmt" --strip-components=1
    else
        cp -a "$fmt/." "$tree/third-party/fmt/"
    fi
fi
if [[ ! -f $tree/third-party/fmt/include/fmt/format.h ]]; then
    echo "install-deepep.sh: third-party/fmt is empty; pass --fmt or clone with submodules" >&2
    exit 1
fi

export CC=/usr/bin/gcc CXX=/usr/bin/g++
unset CUDAHOSTCXX
export TORCH_CUDA_ARCH_LIST=$arch
echo "+ building DeepEP $ref for $arch with $CXX (CUDAHOSTCXX unset)"
(cd "$tree" && "$py" -m pip install --no-build-isolation --no-deps --no-cache-dir . \
    >"$work/deepep-build.log" 2>&1) || {
    tail -n 40 "$work/deepep-build.log" >&2
    exit 1
}

so=$("$py" - <<'PY'
import importlib.util, pathlib
spec = importlib.util.find_spec("deep_ep")
print(sorted(pathlib.Path(list(spec.submodule_search_locations)[0]).glob("_C*.so"))[0])
PY
)
libstdcxx=$(ldd "$so" | awk '/libstdc\+\+/ {print $3}')
# Strong definitions (or any codecvt) that libstdc++ also exports: the interposition.
interposed=$(comm -12 \
    <(nm -D --defined-only "$so" | awk '$2 ~ /^[TDBRGSi]$/ || $3 ~ /codecvt/ {print $3}' | sort -u) \
    <(nm -D --defined-only "$libstdcxx" | awk '{print $3}' | sed 's/@.*//' | sort -u) | wc -l)
echo "+ $so: $interposed symbol(s) interposed on $libstdcxx"
if ((interposed > 0)); then
    echo "install-deepep.sh: deep_ep/_C.so exports libstdc++ symbols; rebuild with one toolchain" >&2
    exit 1
fi
mkdir -p "$(dirname "$manifest")"
"$py" -c 'import json, sys; print(json.dumps(dict(zip(("repo", "commit", "torch_cuda_arch_list"), sys.argv[1:]))))' \
    "$repo" "$found" "$arch" >"$manifest"
echo "+ deep_ep $ref installed; source recorded in $manifest"
