"""Benchmark: `epstack pins predict` against the package index (network), as a user runs it.

Runs the command on pins.env with TORCH_VERSION=2.11.0 (the drift the issue names): RUNS times with an
empty uv cache (a new machine), then RUNS times with the cache the first run left (a developer's
machine); then RUNS times on the unchanged pins.env, whose committed locks are fresh (answered from
them, offline, with that cache). Writes benchmarks/results/pins_predict.json with each wall time and
what it predicted, keeping the figures of the run before (`before`) for the ratio.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from epstack.python.resolve import uv_bin

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "pins_predict.json"
RUNS = 3


def timed(epstack: str, pins: Path, cache: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    result = subprocess.run(
        [epstack, "pins", "predict", "--pins", str(pins), "--locks", str(REPO / "locks")],
        env={**os.environ, "UV_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        check=False,
    )
    return round(time.perf_counter() - start, 2), result


def main() -> int:
    epstack = str(Path(sys.executable).parent / "epstack")
    uv = subprocess.run([uv_bin(), "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
    with tempfile.TemporaryDirectory() as tmp:
        pins = Path(tmp) / "pins.env"
        text = (REPO / "pins.env").read_text()
        pins.write_text(text.replace("TORCH_VERSION=2.14.1", "TORCH_VERSION=2.11.0"))
        cold = [timed(epstack, pins, Path(tmp) / f"cold-{run}")[0] for run in range(RUNS)]
        warm_runs = [timed(epstack, pins, Path(tmp) / "cold-0") for _ in range(RUNS)]
        unchanged_runs = [timed(epstack, REPO / "pins.env", Path(tmp) / "cold-0") for _ in range(RUNS)]
    result, fresh = warm_runs[-1][1], unchanged_runs[-1][1]
    warm = [seconds for seconds, _ in warm_runs]
    unchanged = [seconds for seconds, _ in unchanged_runs]
    moves = [line for line in result.stderr.splitlines() if " -> " in line or line.startswith("deep_ep:")]
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results = {
        "command": "epstack pins predict PINS (TORCH_VERSION=2.11.0), via benchmarks/pins_predict.py",
        "uv": uv,
        "cold_cache_s": cold,
        "warm_cache_s": warm,
        "median_cold_s": statistics.median(cold),
        "median_warm_s": statistics.median(warm),
        "exit_code": result.returncode,
        "prediction": moves,
        "unchanged_pins_warm_cache_s": unchanged,
        "median_unchanged_s": statistics.median(unchanged),
        "unchanged_exit_code": fresh.returncode,
        "unchanged_answer": [line for line in fresh.stderr.splitlines() if "uv would install" in line],
        "before": previous.get("before") or {k: v for k, v in previous.items() if k.startswith("median")},
    }
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
