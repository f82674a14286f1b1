#!/usr/bin/env bash
# Install pinned Python packages into the image's venv with uv, never letting a dependency
# move what a lower layer pinned.
# Usage: install-python-packages.sh REQUIREMENTS OVERRIDES [uv pip install args...]
#   REQUIREMENTS  exact pins rendered from pins.env for this layer
#   OVERRIDES     pins that win over any package's own requirement (e.g. NCCL newer than torch's)
# Expects VIRTUAL_ENV and UV_VERSION in the environment; creates the venv if missing.
set -euo pipefail

requirements=$1
overrides=$2
shift 2

if [ ! -x "${VIRTUAL_ENV}/bin/python" ]; then
  python_bin=$(command -v "python${PYTHON_VERSION:-3}" || command -v python3)
  "${python_bin}" -m venv "${VIRTUAL_ENV}"
  "${VIRTUAL_ENV}/bin/python" -m pip install --no-cache-dir --disable-pip-version-check -q "uv==${UV_VERSION}"
fi

"${VIRTUAL_ENV}/bin/uv" pip install --python "${VIRTUAL_ENV}/bin/python" \
  --requirement "${requirements}" --override "${overrides}" "$@"
