#!/usr/bin/env bash
# Build GDRCopy's user-space library (libgdrapi) at a pinned commit into PREFIX; the kernel module
# (gdrdrv) comes from the host. The source is SOURCES/gdrcopy-COMMIT.tar.gz when anything has that name
# (verified whole and its commit checked by `epstack image sources-verify` before it is unpacked: a directory,
# a FIFO or a wrong archive is refused, not cloned around), else a clone of tag vVERSION whose HEAD must
# be COMMIT.
# Usage: build-gdrcopy.sh VERSION COMMIT PREFIX SOURCES
set -euo pipefail

version=$1 commit=$2 prefix=$3 sources=$4
src=$(mktemp -d)
archive=${sources}/gdrcopy-${commit}.tar.gz
if [ -e "${archive}" ] || [ -L "${archive}" ]; then
  epstack image sources-verify "${archive}" "${commit}"
  tar -xzf "${archive}" -C "${src}"
  if [ ! -f "${src}/Makefile" ]; then src=$(find "${src}" -mindepth 1 -maxdepth 1 -type d); fi
else
  git clone --quiet --branch "v${version}" --depth 1 https://github.com/NVIDIA/gdrcopy.git "${src}"
  found=$(git -C "${src}" rev-parse HEAD)
  if [ "${found}" != "${commit}" ]; then
    echo "epstack: gdrcopy v${version} is ${found}, pins.env says ${commit}" >&2
    exit 1
  fi
fi
make -C "${src}" prefix="${prefix}" CUDA=/usr/local/cuda lib lib_install -j"$(nproc)"
rm -rf "${src}"
echo "epstack: gdrcopy ${version} (${commit}) in ${prefix}"
