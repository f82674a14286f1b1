#!/usr/bin/env bash
# Container entrypoint: check the stack against this image's pins, then run the command.
#   EPSTACK_GUARD=strict (default): refuse to start on drift; warn: report and start; off: skip.
#   The JSON report lands in ${EPSTACK_GUARD_REPORT:-/tmp/epstack-guard.json}.
# Without a mounted NVIDIA driver the CUDA driver stub stands in (cuda-stub.sh), and this says so.
set -euo pipefail

# shellcheck source=scripts/image/cuda-stub.sh
. "$(dirname "$0")/cuda-stub.sh"
if [ -n "${EPSTACK_CUDA_STUB:-}" ]; then
  echo "epstack: no NVIDIA driver in this container: CUDA calls fail (driver stub ${EPSTACK_CUDA_STUB})" >&2
fi

mode=${EPSTACK_GUARD:-strict}
report=${EPSTACK_GUARD_REPORT:-/tmp/epstack-guard.json}
case "${mode}" in
  off) ;;
  warn | strict)
    if ! epstack guard --layer "${EPSTACK_GUARD_LAYER}" --json "${report}"; then
      if [ "${mode}" = strict ]; then
        echo "epstack: the stack differs from its pins (table above, ${report}); EPSTACK_GUARD=warn starts anyway" >&2
        exit 1
      fi
      echo "epstack: starting despite the differences above (EPSTACK_GUARD=warn)" >&2
    fi
    ;;
  *)
    echo "epstack: EPSTACK_GUARD=${mode}; use strict, warn or off" >&2
    exit 2
    ;;
esac
exec "$@"
