#!/usr/bin/env bash
# Install epstack itself (the guard) into $EPSTACK_HOME/tool, outside the application venv, and put
# an `epstack` command on PATH. The command runs the application's Python with the tool appended to
# sys.path: it inspects the application's packages and libraries, and never replaces one of them.
# `epstack-start` runs the entrypoint's own steps (the JIT install, the guard at start) in an isolated
# interpreter: no PYTHON* variable (-I), no site (-S: no .pth, sitecustomize or usercustomize runs), no
# bytecode written (-B), the tool alone beside the standard library: what the guard is about to judge
# does not run in it.
# Usage: install-epstack.sh SOURCE_DIR
set -euo pipefail

src=$1
tool=${EPSTACK_HOME}/tool
"${VIRTUAL_ENV}/bin/uv" pip install --quiet --python "${VIRTUAL_ENV}/bin/python" \
  --constraint "${src}/constraints.txt" --target "${tool}" "${src}"
rm -rf "${src}"
mkdir -p "${EPSTACK_HOME}/bin"
cat > "${EPSTACK_HOME}/bin/epstack" <<WRAPPER
#!/bin/sh
exec "\${VIRTUAL_ENV:-${VIRTUAL_ENV}}/bin/python" -c 'import sys; sys.path.append("${tool}"); from epstack.commands.main import main; sys.exit(main())' "\$@"
WRAPPER
cat > "${EPSTACK_HOME}/bin/epstack-start" <<WRAPPER
#!/bin/sh
exec "${VIRTUAL_ENV}/bin/python" -I -S -B -c 'import sys; sys.path.insert(0, "${tool}"); from epstack.commands.main import main; sys.exit(main())' "\$@"
WRAPPER
chmod 755 "${EPSTACK_HOME}/bin/epstack" "${EPSTACK_HOME}/bin/epstack-start"
# hold-env, the images' entrypoint: static, so no loader reads the start's environment before it holds
# the variables the guard refuses (scripts/image/hold-env.c; the file it reads: epstack.guard.environment).
held=$("${VIRTUAL_ENV}/bin/python" -c "import sys; sys.path.append('${tool}'); \
from epstack.guard.environment import held_file; from epstack.jit.probereport import reports_folder; \
print(held_file(reports_folder()))")
gcc -static -O2 -Wall -Wextra -Werror -DHELD_FILE="\"${held}\"" \
  -o "${EPSTACK_HOME}/bin/hold-env" "$(dirname "$0")/hold-env.c"
echo "epstack: $("${EPSTACK_HOME}/bin/epstack" --version) in ${tool}"
