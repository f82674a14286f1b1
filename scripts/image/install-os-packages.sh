#!/usr/bin/env bash
# Install the OS packages of an epstack layer from an apt archive pinned by date.
# Usage: install-os-packages.sh SNAPSHOT PACKAGE...
#   SNAPSHOT  UBUNTU_SNAPSHOT from pins.env (e.g. 20261115T000000Z): every Ubuntu apt source is
#             rewritten to snapshot.ubuntu.com at that instant, so a rebuild gets the same packages.
# On epstack's CUDA stand-in (EPSTACK_STANDIN is set) the live archive is used, and this says so:
# such an image proves the steps, not the pinned OS packages.
set -euo pipefail

snapshot=$1
shift
# shellcheck source=/dev/null
. /etc/os-release
if [ -n "${EPSTACK_STANDIN:-}" ]; then
  echo "epstack: stand-in base (${EPSTACK_STANDIN}): the live ${PRETTY_NAME} archive, NOT snapshot ${snapshot}"
elif [ "${ID}" = ubuntu ]; then
  for list in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$list" ] || continue
    sed -i -E \
      -e "s#https?://(archive|security)\.ubuntu\.com/ubuntu/?#http://snapshot.ubuntu.com/ubuntu/${snapshot}/#g" \
      -e "s#https?://[a-z.]*archive\.ubuntu\.com/ubuntu/?#http://snapshot.ubuntu.com/ubuntu/${snapshot}/#g" \
      "$list"
  done
  echo "epstack: apt archive pinned to snapshot ${snapshot}"
else
  echo "epstack: ${PRETTY_NAME} is not Ubuntu; cannot pin its archive to snapshot ${snapshot}" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -q --error-on=any
apt-get install -y -q --no-install-recommends "$@"
apt-get clean
rm -rf /var/lib/apt/lists/*
