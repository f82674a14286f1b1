#!/usr/bin/env bash
# Build-time guard: fail the image build, with the table in the log, if what this layer installed
# differs from its pins. Usage: guard-layer.sh LAYER   (pins: $EPSTACK_PINS)
# A build has no GPU driver: the CUDA driver stub stands in for libcuda.so.1 (cuda-stub.sh).
set -euo pipefail

layer=$1
# shellcheck source=scripts/image/cuda-stub.sh
. "$(dirname "$0")/cuda-stub.sh"
mkdir -p /opt/epstack/reports
epstack guard --layer "${layer}" --json "/opt/epstack/reports/${layer}.json"
