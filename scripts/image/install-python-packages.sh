#!/usr/bin/env bash
# Install one lock file into the image's venv with uv: exactly the distributions it pins, checked
# against its hashes, none of their requirements resolved again (the lock is the whole closure).
# Usage: install-python-packages.sh LOCK UV_INSTALL_FLAGS...
#   LOCK              a lock from locks/ (epstack pins lock), copied into the image by its Dockerfile
#   UV_INSTALL_FLAGS  rendered from epstack.python.resolve.INSTALL_FLAGS (--require-hashes --no-deps ...)
# Expects VIRTUAL_ENV in the environment. A new venv gets uv first: pip installs the base lock's uv
# entry (uv-bootstrap.txt beside LOCK) with its hashes, wheel only; pip and uv are in the base lock.
set -euo pipefail

lock=$1
shift

if [ ! -x "${VIRTUAL_ENV}/bin/python" ]; then
  python_bin=$(command -v "python${PYTHON_VERSION:-3}" || command -v python3)
  "${python_bin}" -m venv "${VIRTUAL_ENV}"
  "${VIRTUAL_ENV}/bin/python" -m pip install --no-cache-dir --disable-pip-version-check -q \
    --require-hashes --no-deps --only-binary :all: --requirement "$(dirname "${lock}")/uv-bootstrap.txt"
fi

"${VIRTUAL_ENV}/bin/uv" pip install --python "${VIRTUAL_ENV}/bin/python" "$@" --requirement "${lock}"
