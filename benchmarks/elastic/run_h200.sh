#!/usr/bin/env bash
# The GPU run behind benchmarks/elastic/results/, on a bare GPU host (no network, no Docker):
#   bash benchmarks/elastic/run_h200.sh PHASE...     (from the repository root; --help lists the phases)
# The phases are benchmarks/elastic/run_h200.py's table. Only this stays in bash: epstack's own
# dependencies, which the install phase puts in /opt/epstack-deps from $GPU_SRC/wheels, on PYTHONPATH
# beside this checkout, before the host's python (PYTHON, default python3) has them.
set -euo pipefail
export PYTHONPATH="$PWD:/opt/epstack-deps${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" -m benchmarks.elastic.run_h200 "$@"
