#!/usr/bin/env bash
# Build GDRCopy's user-space library (libgdrapi) at a pinned commit into PREFIX.
# Usage: build-gdrcopy.sh VERSION COMMIT PREFIX   (the kernel module comes from the host)
set -euo pipefail

version=$1 commit=$2 prefix=$3
src=$(mktemp -d)
git clone --quiet --branch "v${version}" --depth 1 https://github.com/NVIDIA/gdrcopy.git "${src}"
found=$(git -C "${src}" rev-parse HEAD)
if [ "${found}" != "${commit}" ]; then
  echo "epstack: gdrcopy v${version} is ${found}, pins.env says ${commit}" >&2
  exit 1
fi
make -C "${src}" prefix="${prefix}" CUDA=/usr/local/cuda lib lib_install -j"$(nproc)"
rm -rf "${src}"
echo "epstack: gdrcopy ${version} (${commit}) in ${prefix}"
