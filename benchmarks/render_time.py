"""Benchmark: `epstack pins check` + `epstack render` (all targets) as a user runs them.

Each run starts two new processes, so import time counts. Writes benchmarks/results/render_time.json.
The images themselves (sizes, build times, an SGLang bump's rebuild and pull): benchmarks/images.py.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "render_time.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    epstack = str(Path(sys.executable).parent / "epstack")
    pins = REPO / "pins.env"
    samples = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.runs):
            start = time.perf_counter()
            subprocess.run([epstack, "pins", "check", "--pins", str(pins)], check=True, capture_output=True)
            out = str(Path(tmp) / "render")
            subprocess.run(
                [epstack, "render", "--pins", str(pins), "--out", out], check=True, capture_output=True
            )
            samples.append(round(time.perf_counter() - start, 3))
    results = {
        "command": "make bench (python benchmarks/render_time.py)",
        "machine": f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}",
        "seconds": samples,
        "median_s": statistics.median(samples),
        "max_s": max(samples),
    }
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
