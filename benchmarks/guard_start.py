"""Benchmark: what the entrypoint's guard adds to a container start, in built images.

For each image: `docker run --rm IMAGE true` with EPSTACK_GUARD=strict and with off, --runs times each,
interleaved (strict, off, strict, ...) so both see the same machine load; the medians and their
difference, on a start where nothing changed, the goal being under 1 s. Where the start says how many
folders it listed, strict with EPSTACK_GUARD_WALK=full (every folder) joins the interleaving. Then,
for comparison, what the start skips while the build's record holds: the same start made to run the
full guard (NCCL_NET_PLUGIN set: a variable the full guard judges, which the record cannot), and
`docker run` of `epstack guard --layer $EPSTACK_GUARD_LAYER` with the entrypoint's guard off (in the
sglang image: --layer all).
Images before and after a change are compared in one run (both on the command line).
Writes benchmarks/results/guard_start.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "guard_start.json"
DOCKER = os.environ.get("EPSTACK_DOCKER", "docker")
# A variable the record cannot vouch for and no file changed: the start runs the full guard.
FULL = ("-e", "NCCL_NET_PLUGIN=none")
# The strict start listing every folder its record holds (what it did before it kept those unpacked
# before the record), in images whose start says how many it listed.
EVERY_FOLDER = ("-e", "EPSTACK_GUARD_WALK=full")
# The image's own full guard as a command (in the sglang image, the top layer, the same as --layer all).
GUARD_LAYER = 'epstack guard --layer "$EPSTACK_GUARD_LAYER" > /dev/null 2>&1'


def docker(*args: str) -> tuple[float, str]:
    """Seconds `docker ARGS` took, and its stderr."""
    start = time.perf_counter()
    result = subprocess.run([DOCKER, *args], capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"`docker {' '.join(args)}` exited {result.returncode}: {result.stderr[-2000:]}")
    return elapsed, result.stderr


def timed(*args: str) -> float:
    return docker(*args)[0]


def start(image: str, *env: str) -> float:
    return timed("run", "--rm", *env, image, "true")


def folders_listed(image: str) -> dict[str, int] | None:
    """How many folders a strict start listed, of those its record holds (None: the image does not say)."""
    stderr = docker("run", "--rm", "-e", "EPSTACK_GUARD=strict", image, "true")[1]
    found = re.search(r"; ([\d,]+) of ([\d,]+) folders listed", stderr)
    if not found:
        return None
    listed, folders = (int(group.replace(",", "")) for group in found.groups())
    return {"listed": listed, "folders": folders}


def summary(samples: list[float]) -> dict[str, float]:
    return {"median_s": round(statistics.median(samples), 2), "min_s": round(min(samples), 2)}


def measure(image: str, runs: int) -> dict[str, object]:
    listed = folders_listed(image)
    strict: list[float] = []
    every_folder: list[float] = []
    off: list[float] = []
    for _ in range(runs):
        strict.append(start(image, "-e", "EPSTACK_GUARD=strict"))
        if listed is not None:
            every_folder.append(start(image, "-e", "EPSTACK_GUARD=strict", *EVERY_FOLDER))
        off.append(start(image, "-e", "EPSTACK_GUARD=off"))
    full_start = [start(image, "-e", "EPSTACK_GUARD=strict", *FULL) for _ in range(max(1, runs // 4))]
    guard_layer = [
        timed("run", "--rm", "-e", "EPSTACK_GUARD=off", image, "sh", "-c", GUARD_LAYER)
        for _ in range(max(1, runs // 4))
    ]
    median = {name: statistics.median(s) for name, s in (("strict", strict), ("off", off))}
    return {
        "image": image,
        "strict": summary(strict),
        "off": summary(off),
        "strict_minus_off_s": round(median["strict"] - median["off"], 2),
        "folders_listed": listed,
        **(
            {
                "strict_every_folder": summary(every_folder),
                "strict_every_folder_minus_off_s": round(statistics.median(every_folder) - median["off"], 2),
            }
            if every_folder
            else {}
        ),
        "full_guard_start": summary(full_start),
        "full_guard_start_minus_off_s": round(statistics.median(full_start) - median["off"], 2),
        "full_guard_run": summary(guard_layer),
        "runs": runs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("images", nargs="+", help="built images, e.g. the stand-in sglang and base")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    results = [measure(image, args.runs) for image in args.images]
    document = {
        "command": f"python benchmarks/guard_start.py --runs {args.runs} " + " ".join(args.images),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, shared",
        "measured": "`docker run --rm IMAGE true`: EPSTACK_GUARD=strict against off (interleaved), and "
        "strict with EPSTACK_GUARD_WALK=full (every folder listed) where the start counts the folders it "
        "listed; the full guard at start (NCCL_NET_PLUGIN set: a variable the record cannot vouch for); "
        "`docker run` of the image's full guard (`epstack guard --layer $EPSTACK_GUARD_LAYER`, "
        "entrypoint off)",
        "goal": "strict adds under 1 s to a start where nothing changed",
        "images": results,
    }
    RESULTS.write_text(json.dumps(document, indent=2) + "\n")
    print(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
