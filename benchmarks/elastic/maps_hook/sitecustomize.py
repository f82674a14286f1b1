"""Put on PYTHONPATH by run_h200's first-request phase (h200/jit.py): every Python process it starts
(the smoke's ranks, the JIT probes) writes the libraries it mapped to $EPSTACK_MAPS_DIR/<pid>.maps as
it exits."""

import atexit
import os
import sys
from pathlib import Path

_folder = os.environ.get("EPSTACK_MAPS_DIR")


def _record() -> None:
    if _folder:
        text = Path("/proc/self/maps").read_text()
        header = f"# argv: {' '.join(sys.argv)[:300]}\n"
        Path(_folder, f"{os.getpid()}.maps").write_text(header + text)


atexit.register(_record)
