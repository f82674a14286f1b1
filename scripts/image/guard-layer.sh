#!/usr/bin/env bash
# Build-time proof of a layer: its JIT toolchains compile a real module each (epstack jit probe, for
# the archs of $EPSTACK_PINS; FlashInfer's modules stay in the image, --ship), then the guard; either
# failing fails the image build, with the compiler's error or the table in the log, reports in
# $EPSTACK_HOME/reports. A passing guard also records what decided it there (<layer>.record.json): the
# entrypoint's guard trusts it while that holds.
# Usage: guard-layer.sh LAYER   (pins: $EPSTACK_PINS)
# A build has no GPU driver: the CUDA driver stub stands in for libcuda.so.1 (cuda-stub.sh).
set -euo pipefail

layer=$1
# shellcheck source=scripts/image/cuda-stub.sh
. "$(dirname "$0")/cuda-stub.sh"
mkdir -p "${EPSTACK_HOME}/reports"
epstack jit probe --layer "${layer}" --ship
epstack image guard --layer "${layer}" --json "${EPSTACK_HOME}/reports/${layer}.json" --record
