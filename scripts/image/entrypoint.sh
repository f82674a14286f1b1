#!/usr/bin/env bash
# Container entrypoint: the shipped JIT caches into the writable ones, check the stack against this image's
# pins, then run the command.
#   EPSTACK_GUARD=strict (default): refuse to start on drift; warn: report and start; off: skip.
#   EPSTACK_GUARD_WALK=full: list every folder the build recorded (default `changed`: on overlayfs, only
#   those unpacked after the build's record or changed in this container; epstack.guard.fingerprint).
#   The JSON report lands in ${EPSTACK_GUARD_REPORT:-/tmp/epstack-guard.json}. The guard trusts what the
#   image's build proved while nothing that decides it changed, refuses a file or a variable that
#   changes what runs, and checks the driver now (--at-start).
# The image runs this through hold-env (its ENTRYPOINT): the variables the guard refuses arrive here with
# the build's values, and `hold-env --restore` gives the command the ones it was given (warn and off).
# The JIT install and the guard run as epstack-start (install-epstack.sh): no .pth, sitecustomize or
# module of the venv runs in them.
# Without a mounted NVIDIA driver the CUDA driver stub stands in (cuda-stub.sh), and this says so.
set -euo pipefail

mode=${EPSTACK_GUARD:-strict}

# shellcheck source=scripts/image/cuda-stub.sh
. "$(dirname "$0")/cuda-stub.sh"
if [ -n "${EPSTACK_CUDA_STUB:-}" ]; then
  echo "epstack: no NVIDIA driver in this container: CUDA calls fail (driver stub ${EPSTACK_CUDA_STUB})" >&2
fi
# The JIT caches the image ships (DeepEP's kernels, FlashInfer's modules), into the writable caches.
# shellcheck source=scripts/image/jit-caches.sh
. "$(dirname "$0")/jit-caches.sh"

report=${EPSTACK_GUARD_REPORT:-/tmp/epstack-guard.json}
case "${mode}" in
  off) ;;
  warn | strict)
    # The guard's table on stderr: the container's stdout is the command's alone. Its exit 2 is a bad
    # setting (its line above): nothing was judged, in either mode.
    judged=0
    epstack-start image guard --layer "${EPSTACK_GUARD_LAYER}" --json "${report}" --at-start >&2 || judged=$?
    if [ "${judged}" = 2 ]; then
      exit 2
    fi
    if [ "${judged}" != 0 ]; then
      if [ "${mode}" = strict ]; then
        echo "epstack: the guard refused this start (above, ${report}); EPSTACK_GUARD=warn starts anyway" >&2
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
hold_env="${0%/*}/../bin/hold-env"
if [ -x "${hold_env}" ]; then
  exec "${hold_env}" --restore "$@"
fi
exec "$@"
