"""A bare host in a temporary folder: its root (/tmp, /opt), $OUT, and a python3 that records how it
was called (argv and the variables the phases set) instead of running anything."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from benchmarks.elastic.h200.host import Host

REPO = Path(__file__).resolve().parents[2]
WATCHED = ("CC", "CUDA_HOME", "CUDA_VISIBLE_DEVICES", "EP_DISABLE_GIN", "EP_JIT_CACHE_DIR",
           "EPSTACK_SMOKE_HANG_STAGE", "EPSTACK_SMOKE_HANG_RANK", "OUT", "PYTHONPATH")  # fmt: skip
# pip's install creates a folder per wheel in --target; the stack phase's version line names the
# first PYTHONPATH entry, so a test sees which environment it ran in.
FAKE_PYTHON = """#!{python}
import json, os, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({{"argv": args, "env": {{k: os.environ.get(k) for k in {watched!r}}}}}) + "\\n")
if args[:3] == ["-m", "pip", "install"] and "--target" in args:
    target = args[args.index("--target") + 1]
    for wheel in (a for a in args if a.endswith(".whl")):
        os.makedirs(os.path.join(target, os.path.basename(wheel).split("-")[0]), exist_ok=True)
    print("WARNING: a warning pip prints")
elif args[:1] == ["-c"] and "sysconfig" in args[1]:
    print(os.environ["FAKE_PURELIB"])
elif args[:1] == ["-c"] and "sglang" in args[1]:
    print("stack: 2.11.0 0.5.0", os.environ["PYTHONPATH"].split(":")[0])
else:
    print("ran", *args)
time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
sys.exit(int(os.environ.get("FAKE_STATUS", "0")))
"""


@dataclass(frozen=True)
class FakeHost:
    host: Host
    root: Path
    log: Path

    def calls(self) -> list[dict[str, Any]]:
        """Each run of the fake python3: {"argv": [...], "env": {...}}."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def argvs(self) -> list[list[str]]:
        return [call["argv"] for call in self.calls()]

    def notes(self) -> list[str]:
        return (self.host.out / "run.log").read_text().splitlines()


def fake_host(tmp_path: Path, **environ: str) -> FakeHost:
    python = tmp_path / "bin" / "python3"
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_text(FAKE_PYTHON.format(python=sys.executable, watched=WATCHED))
    python.chmod(0o755)
    log = tmp_path / "fake-python.jsonl"
    base = {"PATH": os.environ["PATH"], "OUT": str(tmp_path / "out"), "GPU_SRC": str(tmp_path / "src"),
            "PYTHON": str(python), "FAKE_LOG": str(log),
            "FAKE_PURELIB": str(tmp_path / "purelib")}  # fmt: skip
    host = Host.from_environment({**base, **environ}, root=tmp_path / "root")
    host.out.mkdir(parents=True, exist_ok=True)
    return FakeHost(host=host, root=tmp_path / "root", log=log)


@pytest.fixture
def bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHost:
    """A fake host with the default settings, run from the repository root (pins.env, scripts/)."""
    monkeypatch.chdir(REPO)
    return fake_host(tmp_path)
