#!/usr/bin/env bash
# Build-time guard: fail the image build, with the table in the log, if what this layer installed
# differs from its pins. Usage: guard-layer.sh LAYER   (pins: $EPSTACK_PINS)
# A build has no GPU driver: deep_ep's _C.so links libcuda.so.1, so the import check loads the CUDA
# stub library instead (the real driver is mounted at run time).
set -euo pipefail

layer=$1
stubs=/usr/local/cuda/lib64/stubs
if [ -e "${stubs}/libcuda.so" ] && ! ldconfig -p | grep -q 'libcuda.so.1 '; then
  shim=$(mktemp -d)
  ln -s "${stubs}/libcuda.so" "${shim}/libcuda.so.1"
  export LD_LIBRARY_PATH="${shim}${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
fi
mkdir -p /opt/epstack/reports
epstack guard --layer "${layer}" --json "/opt/epstack/reports/${layer}.json"
