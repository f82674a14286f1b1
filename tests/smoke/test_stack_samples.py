"""benchmarks/serve/stack_sampler + stacks.py: a real Python process sampled by the sitecustomize hook,
read back as the timeline a cold-start's phases are named from."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks.serve import stacks
from benchmarks.serve.cold_start import SAMPLER

# A thread that sleeps (idle frames are dropped), then a busy Python loop, then a C call that holds the
# GIL for a while (the sampler cannot run: a gap whose neighbours name the call).
PROGRAM = """
import time, threading
def busy_python():
    end = time.monotonic() + 0.8
    while time.monotonic() < end:
        pass
def holds_the_gil():
    sum(range(40_000_000))
threading.Event().wait(0.3)
busy_python()
holds_the_gil()
time.sleep(0.3)
"""


def sampled(tmp_path: Path) -> Path:
    folder = tmp_path / "samples"
    folder.mkdir()
    env = os.environ | {
        "PYTHONPATH": str(SAMPLER),
        "EPSTACK_STACK_SAMPLES": str(folder),
        "EPSTACK_STACK_EVERY_S": "0.05",
    }
    subprocess.run([sys.executable, "-c", PROGRAM], env=env, check=True, timeout=60)
    return folder


def test_a_sampled_process_shows_its_busy_function_and_the_gap_of_a_gil_holding_call(tmp_path: Path) -> None:
    folder = sampled(tmp_path)
    (path,) = folder.glob("*.txt")
    found = stacks.samples(path)
    assert len(found) > 10
    busy = [s for s in found if any("busy_python" in stack for stack in s.busy)]
    assert busy, [s.busy for s in found]
    assert not any("sitecustomize" in stack for s in found for stack in s.busy)  # the sampler itself
    timeline = stacks.timeline(folder, bucket_s=0.25, gap_s=0.2)
    (process,) = timeline["processes"].values()  # type: ignore[attr-defined]
    assert any("busy_python" in row["top"] for row in process["timeline"])
    gaps = process["gaps"]
    assert any("holds_the_gil" in stack for gap in gaps for stack in gap["before"] + gap["after"]), gaps


def test_without_the_variable_nothing_is_sampled(tmp_path: Path) -> None:
    env = os.environ | {"PYTHONPATH": str(SAMPLER)}
    env.pop("EPSTACK_STACK_SAMPLES", None)
    result = subprocess.run(
        [sys.executable, "-c", "import threading; print(threading.active_count())"],
        env=env, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert result.stdout.strip() == "1"
