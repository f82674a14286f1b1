#!/usr/bin/env bash
# Install the AWS EFA user-space stack (libfabric, rdma-core, aws-ofi-nccl) from the pinned,
# checksummed EFA installer, then check it brought the pinned aws-ofi-nccl.
# Usage: install-efa.sh INSTALLER_VERSION INSTALLER_SHA256 AWS_OFI_NCCL_VERSION
set -euo pipefail

version=$1 sha256=$2 ofi_version=$3
work=$(mktemp -d)
tarball="aws-efa-installer-${version}.tar.gz"
curl -fsSL --retry 3 -o "${work}/${tarball}" "https://efa-installer.amazonaws.com/${tarball}"
echo "${sha256}  ${work}/${tarball}" | sha256sum --check --strict
tar -xzf "${work}/${tarball}" -C "${work}"
# -y: no prompts; -g: GPUDirect; -d: no debug packages; no kernel module in a container.
(cd "${work}/aws-efa-installer" && ./efa_installer.sh -y -g -d --skip-kmod --skip-limit-conf --no-verify)
rm -rf "${work}" /var/lib/apt/lists/*

plugin=/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so
if ! grep -aq "${ofi_version}" "${plugin}"; then
  echo "epstack: ${plugin} is not aws-ofi-nccl ${ofi_version}; pick the EFA installer that bundles it" >&2
  exit 1
fi
echo "epstack: EFA installer ${version} with aws-ofi-nccl ${ofi_version}"
