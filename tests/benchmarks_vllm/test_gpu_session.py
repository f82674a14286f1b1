"""benchmarks/vllm/gpu_session.py's cold start on CPU: the real `epstack smoke serve --engine vllm` twice
against the vLLM stand-in (tests/smoke/vllm_standin.py), the exports refused without a GPU and the run
going on, the entrypoint's copy, one cold-start.json. What a GPU host adds is the real vLLM."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks.vllm import gpu_session
from tests.smoke.test_serve import free_port
from tests.smoke.test_serve_vllm import STANDIN

REPO = Path(__file__).resolve().parents[2]


def test_the_cold_start_serves_twice_and_writes_one_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    (bin_dir / "vllm").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")
    (tmp_path / "model").mkdir()  # not the tiny profile's: its tokenizer needs `tokenizers`, not here
    serve = f"--vllm-arg=--port={free_port()} --concurrency 1 --model-path {tmp_path / 'model'}"
    monkeypatch.setenv("SERVE_ARGS", serve)
    monkeypatch.setattr(gpu_session, "WORK", tmp_path / "work")
    monkeypatch.setattr(gpu_session, "TRITON", tmp_path / "work" / "triton")
    monkeypatch.chdir(REPO)
    result = gpu_session.run()
    assert result["empty"]["verdict"] == "pass" and result["shipped"]["verdict"] == "pass"
    assert [level["concurrency"] for level in result["empty"]["sweep"]] == [1]
    assert result["shipped"]["sweep"] == [], "the shipped start only proves it serves"
    assert set(result["launch_to_healthy_s"]) == {"empty", "shipped"}
    assert all(0 < seconds < 60 for seconds in result["launch_to_healthy_s"].values())
    assert result["exports"] == {}, "no GPU here: nothing exported, and the run went on"
    assert result["compiled_empty"] == {"vllm-compile": 0, "triton-kernels": 0}
    assert json.loads((tmp_path / "work" / "cold-start.json").read_text()) == result
    run_log = (tmp_path / "work" / "run.log").read_text()
    assert "[export vllm-compile: exit" in run_log and "[entrypoint copy: exit 0" in run_log
