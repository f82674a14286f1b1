"""benchmarks/serve/stack_sampler + stacks.py: a real Python process sampled by the sitecustomize hook,
read back as the timeline a cold-start's phases are named from."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks.serve import stacks
from benchmarks.serve.cold_start import SAMPLER

# A wait on an event (idle: dropped), a busy Python loop, a C call that holds the GIL for a while (the
# sampler cannot run: a gap whose neighbours name the call), a wait for a child process (work: a compiler).
PROGRAM = """
import subprocess, sys, time, threading
def busy_python():
    end = time.monotonic() + 0.8
    while time.monotonic() < end:
        pass
def holds_the_gil():
    sum(range(40_000_000))
def waits_for_a_compiler():
    subprocess.run([sys.executable, "-c", "import time; time.sleep(0.6)"], check=True)
threading.Event().wait(0.3)
busy_python()
holds_the_gil()
waits_for_a_compiler()
"""


def sampled(tmp_path: Path) -> tuple[Path, str]:
    """The samples' folder and the program's own pid (its child is sampled too)."""
    folder = tmp_path / "samples"
    folder.mkdir()
    env = os.environ | {
        "PYTHONPATH": str(SAMPLER),
        "EPSTACK_STACK_SAMPLES": str(folder),
        "EPSTACK_STACK_EVERY_S": "0.05",
    }
    with subprocess.Popen([sys.executable, "-c", PROGRAM], env=env) as program:
        assert program.wait(timeout=60) == 0
    return folder, str(program.pid)


def test_a_sampled_process_shows_its_busy_code_its_wait_for_a_child_and_a_gap(tmp_path: Path) -> None:
    folder, pid = sampled(tmp_path)
    assert len(list(folder.glob("*.txt"))) == 2  # the program and its child
    found = stacks.samples(folder / f"{pid}.txt", depth=8)
    assert len(found) > 10
    busy = [s for s in found if any("busy_python" in stack for stack in s.busy)]
    assert busy, [s.busy for s in found]
    assert not any("sitecustomize" in stack for s in found for stack in s.busy)  # the sampler itself
    timeline = stacks.timeline(folder, bucket_s=0.25, gap_s=0.2)
    process = timeline["processes"][pid]  # type: ignore[index]
    assert any("busy_python" in row["top"] for row in process["timeline"])
    assert any("waits_for_a_compiler" in stack for s in found for stack in s.busy)
    assert not any(stack.startswith("threading.py") for s in found for stack in s.busy)  # the event's wait
    # The GIL-holding call leaves no sample of its own: a gap at least as long as most of it.
    assert any(gap["seconds"] >= 0.2 for gap in process["gaps"]), process["gaps"]


def test_without_the_variable_nothing_is_sampled() -> None:
    env = os.environ | {"PYTHONPATH": str(SAMPLER)}
    env.pop("EPSTACK_STACK_SAMPLES", None)
    result = subprocess.run(
        [sys.executable, "-c", "import threading; print(threading.active_count())"],
        env=env, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert result.stdout.strip() == "1"
