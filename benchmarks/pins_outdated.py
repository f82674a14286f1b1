"""Benchmark: `epstack pins outdated` for the shipped pins.env against the package index uv uses (PyPI;
network), Docker Hub and GitHub (unreachable from the machine it last ran on: those rows say so), with
the uv cache the machine has (a developer's).

Writes benchmarks/results/pins_outdated.json: the wall time, the exit code, and the report itself
(pins-outdated/1: each pin, the newest release, the newest that resolves with the other pins held).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "pins_outdated.json"


def main(argv: list[str]) -> int:
    epstack = str(Path(sys.executable).parent / "epstack")
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "outdated.json"
        command = ["pins", "outdated", *argv]
        start = time.perf_counter()
        result = subprocess.run(
            [epstack, *command, "--pins", str(REPO / "pins.env"), "--json", str(report)],
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = round(time.perf_counter() - start, 2)
        document = json.loads(report.read_text()) if report.exists() else None
    results = {
        "command": f"epstack {' '.join(command)} --json FILE, via benchmarks/pins_outdated.py",
        "seconds": seconds,
        "exit_code": result.returncode,
        "errors": [line for line in result.stderr.splitlines() if line.startswith("error:")],
        "report": document,
    }
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps({k: v for k, v in results.items() if k != "report"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
