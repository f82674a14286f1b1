"""Benchmark: `pins check` + `render` time, and the rebuild after an SGLang-only pin change.

Writes benchmarks/results/render_and_rebuild.json. The rebuild half needs a Docker engine and
prunes its BuildKit cache first (pass --keep-cache to skip the prune and the cold build).
Where no CUDA base can be pulled, "the layers" are those epstack builds offline (see README).
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

from rich.console import Console

from epstack.build import build_target
from epstack.engine import DockerEngine
from epstack.pins import load_pins
from epstack.render import plan_render, source_date, source_revision, write_plan

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "render_and_rebuild.json"
TARGET = "hopper-ib"


def time_cli(pins: Path, out: Path, runs: int) -> dict[str, float]:
    """Wall time of `epstack pins check` + `epstack render` as a user runs them (new processes)."""
    epstack = str(Path(sys.executable).parent / "epstack")
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([epstack, "pins", "check", "--pins", str(pins)], check=True, capture_output=True)
        subprocess.run(
            [epstack, "render", "--pins", str(pins), "--out", str(out)], check=True, capture_output=True
        )
        samples.append(time.perf_counter() - start)
    return {"median_s": statistics.median(samples), "max_s": max(samples), "runs": runs}


def time_build(pins_path: Path, work: Path, console: Console) -> tuple[float, list[str]]:
    pins = load_pins(pins_path)
    plan = plan_render(pins, created=source_date(), revision=source_revision())
    write_plan(plan, work)
    start = time.perf_counter()
    report = build_target(
        pins=pins, plan=plan, context=work, target=TARGET, engine=DockerEngine.find(), console=console
    )
    return time.perf_counter() - start, list(report.built)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--keep-cache", action="store_true", help="do not prune the BuildKit cache first")
    args = parser.parse_args()
    console = Console(stderr=True)
    pins = REPO / "pins.env"
    results: dict[str, object] = {
        "command": "make bench",
        "machine": f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}",
    }
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        results["pins_check_plus_render"] = time_cli(pins, tmp_path / "render", args.runs)

        engine = DockerEngine.find()
        if not args.keep_cache:
            subprocess.run([engine.cli, "builder", "prune", "-af"], check=True, capture_output=True)
        first_s, first_images = time_build(pins, tmp_path / "first", console)
        changed = tmp_path / "pins-sglang-changed.env"
        changed.write_text(pins.read_text().replace("SGLANG_VERSION=0.5.23", "SGLANG_VERSION=0.5.22"))
        rebuild_s, rebuild_images = time_build(changed, tmp_path / "second", console)
    results["rebuild_after_sglang_only_change"] = {
        "target": TARGET,
        "first_build_s": round(first_s, 2),
        "rebuild_s": round(rebuild_s, 2),
        "ratio": round(rebuild_s / first_s, 4),
        "images_first": first_images,
        "images_rebuilt": rebuild_images,
        "same_images": first_images == rebuild_images,
        "scope": "layers buildable without the CUDA base (offline stand-in); the sglang layer "
        "itself needs the deepep image and is not built here",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    console.print_json(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
