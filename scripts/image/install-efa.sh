#!/usr/bin/env bash
# Install the AWS EFA user-space stack (libfabric, rdma-core, aws-ofi-nccl) from the pinned,
# checksummed EFA installer, then check it brought the pinned aws-ofi-nccl.
# Usage: install-efa.sh INSTALLER_VERSION INSTALLER_SHA256 AWS_OFI_NCCL_VERSION SOURCES
#   SOURCES/aws-efa-installer-VERSION.tar.gz is used when there (a sources folder), else downloaded.
set -euo pipefail

version=$1 sha256=$2 ofi_version=$3 sources=$4
work=$(mktemp -d)
tarball="aws-efa-installer-${version}.tar.gz"
if [ -f "${sources}/${tarball}" ]; then
  cp "${sources}/${tarball}" "${work}/${tarball}"
else
  curl -fsSL --retry 3 -o "${work}/${tarball}" "https://efa-installer.amazonaws.com/${tarball}"
fi
echo "${sha256}  ${work}/${tarball}" | sha256sum --check --strict
tar -xzf "${work}/${tarball}" -C "${work}"
# The installer's README: --yes (no prompts); --skip-kmod and --skip-limit-conf (a container neither
# loads kernel modules nor sets host limits); --no-verify (no EFA device at build time). Not
# --debug-packages (-d) nor --enable-gdr (-g, which only concerns the skipped kernel module).
(cd "${work}/aws-efa-installer" && ./efa_installer.sh --yes --skip-kmod --skip-limit-conf --no-verify)
rm -rf "${work}" /var/lib/apt/lists/*

plugin=$(find /opt/amazon/ofi-nccl -name libnccl-net-ofi.so | head -n 1)
if [ -z "${plugin}" ] || ! grep -aq "${ofi_version}" "${plugin}"; then
  echo "epstack: no aws-ofi-nccl ${ofi_version} plugin (${plugin:-none}); pick the EFA installer that bundles it" >&2
  exit 1
fi
# NCCL finds the plugin, and the plugin libfabric, on the loader's path: extend it, never replace it.
printf '%s\n/opt/amazon/efa/lib\n' "$(dirname "${plugin}")" > /etc/ld.so.conf.d/000-epstack-efa.conf
ldconfig
echo "epstack: EFA installer ${version} with aws-ofi-nccl ${ofi_version}"
