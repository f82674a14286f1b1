#!/usr/bin/env bash
# Install epstack itself (the guard) into /opt/epstack/tool, outside the application venv, and put
# an `epstack` command on PATH. The command runs the application's Python with the tool appended to
# sys.path: it inspects the application's packages and libraries, and never replaces one of them.
# Usage: install-epstack.sh SOURCE_DIR
set -euo pipefail

src=$1
"${VIRTUAL_ENV}/bin/uv" pip install --quiet --python "${VIRTUAL_ENV}/bin/python" \
  --constraint "${src}/constraints.txt" --target /opt/epstack/tool "${src}"
rm -rf "${src}"
mkdir -p /opt/epstack/bin
cat > /opt/epstack/bin/epstack <<'WRAPPER'
#!/bin/sh
exec "${VIRTUAL_ENV:-/opt/epstack/venv}/bin/python" -c 'import sys; sys.path.append("/opt/epstack/tool"); from epstack.cli import main; sys.exit(main())' "$@"
WRAPPER
chmod 755 /opt/epstack/bin/epstack
echo "epstack: $(/opt/epstack/bin/epstack --version) in /opt/epstack/tool"
