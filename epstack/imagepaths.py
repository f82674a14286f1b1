"""Where epstack lives inside every image: one home, each folder under it.

The templates receive this module as `paths`; the image scripts read $EPSTACK_HOME (the Dockerfiles'
ENV) and derive the same folders from it; Python imports the names here.
"""

from __future__ import annotations

from pathlib import PurePosixPath

EPSTACK_HOME = PurePosixPath("/opt/epstack")
VENV = EPSTACK_HOME / "venv"  # the application's venv ($VIRTUAL_ENV)
TOOL = EPSTACK_HOME / "tool"  # epstack itself, apart from the venv (install-epstack.sh)
BIN = EPSTACK_HOME / "bin"
COMMAND = BIN / "epstack"  # the `epstack` command
SCRIPTS = EPSTACK_HOME / "scripts"  # scripts/image/
SRC = EPSTACK_HOME / "src"  # the project the tool is installed from, removed once installed
PINS = EPSTACK_HOME / "pins"  # <layer>.pins.env ($EPSTACK_PINS)
LOCKS = EPSTACK_HOME / "locks"  # the lock files the layers install ($EPSTACK_LOCKS)
REPORTS = EPSTACK_HOME / "reports"  # the guard's and the JIT probe's reports, per layer
SBOM = EPSTACK_HOME / "sbom"  # <layer>.cdx.json
WHEELS = EPSTACK_HOME / "wheels"  # the deep_ep wheel and its manifest
JIT = EPSTACK_HOME / "jit"  # kernel caches the image ships, read-only; copied into the writable ones at start
# The writable JIT caches, one folder per toolchain (the cluster jobs mount node storage here).
JIT_CACHES = PurePosixPath("/var/cache/epstack-jit")
SOURCES = EPSTACK_HOME / "sources"  # the `git archive` tarballs and installers of a layer's build
