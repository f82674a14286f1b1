"""benchmarks/serve/faults/ on CPU: the sitecustomize that breaks DeepEP V2 on purpose, against a stand-in
`deep_ep` (the real one needs a GPU and its JIT) whose ElasticBuffer returns what it was given; and the GPU
run's driver against the stand-in server, which answers each fault as a real model would
(tests/smoke/sglang_standin.py): every fault's smoke exits 1 on deepep-v2-vs-none, and a fault that
changed nothing is reported as not what was expected."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.serve.faults import run_gpu
from tests.smoke.test_serve import STANDIN, free_port

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "benchmarks" / "serve" / "faults" / "site"

# A stand-in deep_ep: ElasticBuffer.dispatch and .combine with SGLang's keywords and DeepEP V2's returns;
# combine returns x as it came, and an event SGLang waits on (recorded, as the real one's wait is needed).
FAKE_DEEP_EP = """
import torch
WAITED = []
class Event:
    event = object()
    def current_stream_wait(self):
        WAITED.append(True)
class ElasticBuffer:
    def dispatch(self, x, *, topk_idx, topk_weights, num_experts, **kwargs):
        self.sent = topk_idx
        return x, topk_idx, topk_weights, None, Event()
    def combine(self, x, handle=None, topk_weights=None):
        return x.clone(), topk_weights, Event()
"""

PROBE = """
import json, torch, deep_ep
buffer = deep_ep.ElasticBuffer()
x = torch.ones(3, 4)
ids = torch.tensor([[0, 7], [3, -1], [6, 5]])
buffer.dispatch(x, topk_idx=ids, topk_weights=torch.ones(3, 2), num_experts=8)
combined, _, _ = buffer.combine(x, handle=None)
print(json.dumps({"sent": buffer.sent.tolist(), "combined": combined[0, 0].item(),
                  "waited": len(deep_ep.WAITED)}))
"""


def probe(tmp_path: Path, fault: str | None) -> tuple[int, dict[str, Any], str]:
    fake = tmp_path / "fake"
    (fake / "deep_ep").mkdir(parents=True, exist_ok=True)
    (fake / "deep_ep" / "__init__.py").write_text(FAKE_DEEP_EP)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SITE), str(fake)])}
    env.pop("EPSTACK_FAULT", None)
    if fault is not None:
        env["EPSTACK_FAULT"] = fault
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=False)
    return done.returncode, json.loads(done.stdout) if done.returncode == 0 else {}, done.stderr


def test_without_a_fault_deep_ep_is_untouched(tmp_path: Path) -> None:
    code, seen, err = probe(tmp_path, None)
    assert code == 0 and seen == {"sent": [[0, 7], [3, -1], [6, 5]], "combined": 1.0, "waited": 0}
    assert "epstack-fault" not in err


def test_zero_makes_combine_return_zeros_after_its_event(tmp_path: Path) -> None:
    code, seen, err = probe(tmp_path, "zero")
    assert code == 0 and seen["combined"] == 0.0 and seen["sent"] == [[0, 7], [3, -1], [6, 5]]
    assert seen["waited"] == 1  # the output was read only after combine's event
    assert err.startswith("epstack-fault: zero: ElasticBuffer.combine returned zeros (pid ")
    assert err.count("epstack-fault") == 1


def test_scale_scales_combine(tmp_path: Path) -> None:
    code, seen, err = probe(tmp_path, "scale")
    assert code == 0 and seen["combined"] == 0.5 and "combine scaled by 0.5" in err


def test_permute_sends_each_token_to_the_next_expert(tmp_path: Path) -> None:
    code, seen, err = probe(tmp_path, "permute")
    assert code == 0 and seen["sent"] == [[1, 0], [4, -1], [7, 6]] and seen["combined"] == 1.0
    assert "dispatch sent each token to the next of 8 experts" in err


def test_an_unknown_fault_stops_every_process(tmp_path: Path) -> None:
    code, _, err = probe(tmp_path, "halve")
    assert code == 1 and "EPSTACK_FAULT='halve'; fix: one of zero, scale, permute" in err


@pytest.fixture
def driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """run_gpu's driver with WORK in tmp_path, `sglang` the stand-in, a model folder by path."""
    work = tmp_path / "work"
    for name, value in (("WORK", work), ("SRC", work / "src"), ("RESULTS", work / "out")):
        monkeypatch.setattr(run_gpu, name, value)
    monkeypatch.setenv("WORK", str(work))  # the driver `start` detaches reads it
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sglang").write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    (bin_dir / "sglang").chmod(0o755)
    (tmp_path / "model").mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("STANDIN", "ok")
    monkeypatch.setenv("SERVE_ARGS", f"--model-path {tmp_path / 'model'} --sglang-arg=--port={free_port()}")
    return work


def test_the_driver_finds_every_fault_failing_the_comparison(driver: Path) -> None:
    assert run_gpu.run(["faults"]) == 0
    summary = json.loads((driver / "out" / "run.json").read_text())
    assert summary["all_as_expected"] is True
    for fault in run_gpu.FAULTS:
        step = summary["faults"][f"fault-{fault}"]
        assert step["exit"] == 1 and step["as_expected"]
        assert step["rows"]["deepep-v2-vs-none"].startswith("fail: ")
        assert step["fault_line"].startswith(f"epstack-fault: {fault}: ")
        assert step["rows"]["deepep-v2-vs-none-control"] == "ok: 8/8 refused"
    assert run_gpu.run(["faults"]) == 0  # done: not run again
    assert json.loads((driver / "out" / "run.json").read_text())["faults"] == summary["faults"]


def test_a_fault_that_changed_nothing_is_not_what_was_expected(
    driver: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_IGNORE_FAULT", "1")
    monkeypatch.setenv("FAULTS", "scale")
    assert run_gpu.run(["faults"]) == 1
    step = json.loads((driver / "out" / "run.json").read_text())["faults"]["fault-scale"]
    assert (step["exit"], step["as_expected"], step["fault_line"]) == (0, False, None)
    assert step["rows"]["deepep-v2-vs-none"] == "ok: 8/8 identical"


def test_wait_brings_back_at_most_eight_files(
    driver: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAULTS", "zero")
    assert run_gpu.run(["faults"]) == 0
    (driver / "driver.pid").write_text(f"{os.getpid() + 10**7}\n")  # no such process: ended
    monkeypatch.setenv("OUT", str(tmp_path / "OUT"))
    assert run_gpu.wait() == 0
    brought = sorted(p.name for p in (tmp_path / "OUT" / "faults").iterdir())
    assert brought == ["fault-zero.json", "logs.tar.gz", "run.json"] and len(run_gpu.REPORTS) + 2 == 8


def test_start_detaches_the_driver_from_a_copy_and_wait_collects(
    driver: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the GPU session runs: `start` (a copy of the tree, the driver in a session of its own), then
    `wait` until it ends."""
    monkeypatch.setenv("FAULTS", "permute")
    monkeypatch.setenv("OUT", str(tmp_path / "OUT"))
    monkeypatch.setenv("WAIT_S", "120")
    monkeypatch.chdir(REPO)
    assert run_gpu.start(["faults"]) == 0
    assert (driver / "src" / "benchmarks" / "serve" / "faults" / "site" / "sitecustomize.py").is_file()
    assert not (driver / "src" / ".git").exists() and not (driver / "src" / ".venv").exists()
    assert run_gpu.wait() == 0
    pid = int((driver / "driver.pid").read_text())
    assert not run_gpu.alive(pid)
    os.waitpid(pid, 0)  # spawned by this process: reaped here (on the GPU host `start` has ended)
    summary = json.loads((tmp_path / "OUT" / "faults" / "run.json").read_text())
    assert summary["all_as_expected"] is True and list(summary["faults"]) == ["fault-permute", "phase_s"]
