"""Benchmark: how long `epstack guard` takes to start, before and after lazy command loading.

The images' entrypoint runs `epstack guard` at every container start; before lazy loading,
`import epstack.cli` imported every subsystem (jsonschema, ruamel.yaml, jinja2, the AWS and cluster
code). For this tree and for an earlier commit (its epstack/ package extracted with `git archive`,
so no worktree is touched) it measures, in new processes: the modules `epstack guard --help`
imports and their total self import time (`python -X importtime`), and the wall time of
`epstack guard --help` (median of --runs). Writes benchmarks/results/cli_startup.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "cli_startup.json"
# `python -m epstack`: the same entry in this tree and in an earlier commit (the CLI module moved).
GUARD_HELP = ("-m", "epstack", "guard", "--help")
HEAVY = ("jsonschema", "ruamel", "jinja2", "epstack.aws", "epstack.cluster", "epstack.smoke", "pydantic")


def _run(source: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *options, *GUARD_HELP],
        cwd=source,
        env={"PYTHONPATH": str(source), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )


def measure(source: Path, runs: int) -> dict[str, object]:
    """Imports and wall time of `epstack guard --help` run from `source`."""
    rows = [line.split("|") for line in _run(source, "-X", "importtime").stderr.splitlines()[1:]]
    modules = {row[2].strip(): int(row[0].split(":")[1]) for row in rows if len(row) == 3}
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        _run(source)
        samples.append(time.perf_counter() - start)
    return {
        "modules_imported": len(modules),
        "self_import_s": round(sum(modules.values()) / 1e6, 3),
        "heavy_modules_imported": sorted({h for h in HEAVY if any(m.startswith(h) for m in modules)}),
        "wall_s_median": round(statistics.median(samples), 3),
        "wall_s_max": round(max(samples), 3),
        "runs": runs,
    }


def extract(revision: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", revision, "epstack"], capture_output=True, check=True
    )
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--before", required=True, help="the commit to compare with, e.g. main's")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    revision = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", args.before],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="epstack-before-") as tmp:
        before = measure(extract(args.before, Path(tmp)), args.runs)
    after = measure(REPO, args.runs)
    result = {
        "command": f"python benchmarks/cli_startup.py --before {args.before} --runs {args.runs}",
        "machine": f"{platform.machine()}, CPython {platform.python_version()}, {os.cpu_count()} cores",
        "measured": "`epstack guard --help` in a new process (the guard's start without running checks)",
        "before": {"revision": revision, **before},
        "after": {"revision": "this tree (lazy command modules)", **after},
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
