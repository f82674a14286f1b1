"""Benchmark: `epstack pins predict` against the package index (network), as a user runs it.

Runs the command RUNS times on pins.env with TORCH_VERSION=2.11.0 (the drift the issue names) and
writes benchmarks/results/pins_predict.json with each wall time and what the prediction said.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "pins_predict.json"
RUNS = 3


def main() -> int:
    epstack = str(Path(sys.executable).parent / "epstack")
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    with tempfile.TemporaryDirectory() as tmp:
        pins = Path(tmp) / "pins.env"
        text = (REPO / "pins.env").read_text()
        pins.write_text(text.replace("TORCH_VERSION=2.14.1", "TORCH_VERSION=2.11.0"))
        seconds, output = [], ""
        for _ in range(RUNS):
            start = time.perf_counter()
            result = subprocess.run(
                [epstack, "pins", "predict", str(pins)], capture_output=True, text=True, check=False
            )
            seconds.append(round(time.perf_counter() - start, 2))
            output = result.stderr
    moves = [line for line in output.splitlines() if " -> " in line or line.startswith("deep_ep:")]
    results = {
        "command": "epstack pins predict PINS (TORCH_VERSION=2.11.0), via benchmarks/pins_predict.py",
        "pip": pip,
        "seconds": seconds,
        "median_s": statistics.median(seconds),
        "exit_code": result.returncode,
        "prediction": moves,
    }
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
