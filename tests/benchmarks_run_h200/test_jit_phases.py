"""The JIT phases' pieces that run without a GPU: the image's CUDA_HOME with an nvcc that logs its
runs, and the entrypoint's copy of the shipped caches, whose variables the later commands get."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.elastic.h200 import jit
from benchmarks.elastic.h200.host import Host
from tests.benchmarks_run_h200.conftest import REPO
from tests.jit import EPSTACK_PATH


def _host(tmp_path: Path, path: str) -> Host:
    environ = {"PATH": path, "PYTHONPATH": str(REPO), "OUT": str(tmp_path / "out"), "PYTHON": sys.executable}
    return Host.from_environment(environ, root=tmp_path / "root")


def test_the_image_cuda_home_logs_each_nvcc_run_then_runs_the_real_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    toolkit = tmp_path / "cuda-13.0"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "bin" / "nvcc").write_text('#!/bin/sh\necho "toolkit nvcc $*"\n')
    (toolkit / "bin" / "nvcc").chmod(0o755)
    host = _host(tmp_path, f"{toolkit / 'bin'}:/usr/bin:/bin")
    assert jit.toolkit(host) == toolkit
    home, logs = tmp_path / "home", tmp_path / "logs"
    logs.mkdir()
    jit.logged_cuda_home(host, home, logs, tmp_path / "summary.json")
    ran = subprocess.run([home / "bin" / "nvcc", "-c", "x.cu"], capture_output=True, text=True, check=True)
    assert ran.stdout == "toolkit nvcc -c x.cu\n"
    assert (logs / "nvcc.log").read_text() == "-c x.cu\n"
    assert (home / "bin" / "nvcc.real").read_text() == (toolkit / "bin" / "nvcc").read_text()


def test_the_entrypoints_copy_fills_the_cache_and_its_moves_reach_the_next_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EP_JIT_CACHE_DIR names a file (no folder can be made there): the script moves the cache to
    $TMPDIR/epstack/deep_ep and exports it; the shipped kernel is copied there."""
    monkeypatch.chdir(REPO)
    shipped = tmp_path / "image" / "jit" / "deep_ep"
    kernel = shipped / "cache" / "kernel.dispatch.0123"
    kernel.parent.mkdir(parents=True)
    kernel.write_bytes(b"cubin")
    digest = hashlib.sha256(b"cubin").hexdigest()
    Path(f"{shipped}.sha256").write_text(f"{digest}  cache/kernel.dispatch.0123\n")
    (tmp_path / "a-file").write_text("")
    host = _host(tmp_path, EPSTACK_PATH)  # `epstack image jit-install` beside this Python, as on the host
    env = host.environ({"EPSTACK_HOME": str(tmp_path / "image"), "EP_JIT_CACHE_DIR": str(tmp_path / "a-file"),
                        "TMPDIR": str(tmp_path / "tmp")})  # fmt: skip
    after = jit.entrypoint_copy(host, env)
    moved = tmp_path / "tmp" / "epstack" / "deep_ep"
    assert after["EP_JIT_CACHE_DIR"] == str(moved)
    assert jit.kernels_in(after["EP_JIT_CACHE_DIR"]) == 1
    assert after["EPSTACK_HOME"] == str(tmp_path / "image")
