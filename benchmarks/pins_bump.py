"""Benchmark: `epstack pins bump --dry-run` against the package index (network), on a copy of the
shipped pins.env and locks, with the uv cache the machine has (a developer's).

Bumps KEY=VALUE (default NCCL_VERSION=2.32.3: no SGLang newer than the pinned one was on PyPI on
2026-12-02, so a lower pin) and writes benchmarks/results/pins_bump.json: the wall time, the exit
code, and the Markdown summary (the pins, every image's tag before and after, each lock's moves).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "pins_bump.json"


def main(argv: list[str]) -> int:
    assignments = argv or ["NCCL_VERSION=2.32.3"]
    epstack = str(Path(sys.executable).parent / "epstack")
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(REPO / "pins.env", Path(tmp) / "pins.env")
        shutil.copytree(REPO / "locks", Path(tmp) / "locks")
        summary = Path(tmp) / "summary.md"
        command = ["pins", "bump", *assignments, "--dry-run", "--summary", str(summary)]
        start = time.perf_counter()
        result = subprocess.run(
            [epstack, *command, "--pins", str(Path(tmp) / "pins.env"), "--locks", str(Path(tmp) / "locks")],
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = round(time.perf_counter() - start, 2)
        text = summary.read_text() if summary.exists() else ""
    results = {
        "command": f"epstack {' '.join(command)}, via benchmarks/pins_bump.py",
        "seconds": seconds,
        "exit_code": result.returncode,
        "errors": [line for line in result.stderr.splitlines() if line.startswith("error:")],
        "summary_markdown": text.splitlines(),
    }
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
