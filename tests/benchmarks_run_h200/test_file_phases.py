"""The phases that move files: stack unpacks the ferried chunks into its target, the -wait phases copy
a detached run's results to $OUT once it ended, serve-start detaches; against fake folders."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from benchmarks.elastic.h200 import host as host_module
from benchmarks.elastic.run_h200 import main
from tests.benchmarks_run_h200.conftest import REPO, FakeHost, fake_host

WHEELS = ("sglang-0.5.0-py3-none-any.whl", "torch_memory_saver-0.0.9-py3-none-any.whl")
NCCL_WHEEL = "nvidia_nccl_cu13-2.32.6-py3-none-manylinux_2_27_x86_64.whl"


def _ferry(folder: Path) -> None:
    """The wheels as ferry-pack.sh sends them (the pinned NCCL's among them): one tar, split into
    chunks c/c00, c/c01, ..."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in (*WHEELS, NCCL_WHEEL):
            entry = tarfile.TarInfo(name)
            entry.size = 4096
            tar.addfile(entry, io.BytesIO(bytes(4096)))
    data = buffer.getvalue()
    (folder / "c").mkdir(parents=True)
    for index, start in enumerate(range(0, len(data), 5000)):
        (folder / "c" / f"c{index:02d}").write_bytes(data[start : start + 5000])


@pytest.fixture
def ferried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHost:
    monkeypatch.chdir(REPO)
    _ferry(tmp_path / "ferry")
    return fake_host(tmp_path, FERRY=str(tmp_path / "ferry"))


def test_stack_installs_the_ferried_wheels_into_its_target(
    ferried: FakeHost, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["stack"], ferried.host)
    target, unpacked = ferried.root / "opt" / "sgl", ferried.root / "tmp" / "ferry-w"
    [pip, _purelib, versions] = ferried.argvs()
    assert pip[:8] == ["-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--target", str(target)]
    assert pip[8:] == [str(unpacked / name) for name in WHEELS], "NCCL goes into the host's venv instead"
    assert (ferried.root.parent / "ferry" / "nccl" / NCCL_WHEEL).is_file()
    assert not unpacked.exists()
    assert (target / "nvidia").readlink() == Path(ferried.log.parent, "purelib", "nvidia")
    assert "WARNING" not in capsys.readouterr().out
    assert versions[0] == "-c"
    assert f"stack: 2.11.0 0.5.0 {target}" in ferried.notes()


def test_install_puts_the_ferried_nccl_wheel_into_the_hosts_venv(ferried: FakeHost) -> None:
    """After the stack phase set it aside: install-nccl.sh --wheel, pip over the host's NCCL, no build."""
    main(["stack"], ferried.host)
    failing = fake_host(ferried.log.parent, FERRY=str(ferried.root.parent / "ferry"), FAKE_STATUS="1")
    main(["install"], failing.host)
    wheel = str(ferried.root.parent / "ferry" / "nccl" / NCCL_WHEEL)
    assert f"install: NCCL from the ferried wheel {NCCL_WHEEL}" in " ".join(failing.notes())
    pip = [argv for argv in failing.argvs() if argv[:3] == ["-m", "pip", "install"] and wheel in argv]
    quiet = ["--quiet", "--disable-pip-version-check"]
    assert pip == [["-m", "pip", "install", *quiet, "--no-index", "--no-deps", "--force-reinstall", wheel]]
    assert not any("--src" in argv for argv in failing.argvs()), "nothing built from source"


def test_stack_keeps_an_installed_stack(ferried: FakeHost) -> None:
    (ferried.root / "opt" / "sgl" / "sglang").mkdir(parents=True)
    main(["stack"], ferried.host)
    assert [argv[0] for argv in ferried.argvs()] == ["-c"]  # only the version line


def _ended_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def _background(root: Path, name: str, pid: int) -> Path:
    folder = root / "tmp" / name
    folder.mkdir(parents=True)
    (folder / "pid").write_text(f"{pid}\n")
    return folder


def test_serve_wait_copies_an_ended_serves_report_and_logs(bare: FakeHost) -> None:
    folder = _background(bare.root, "serve-bg", _ended_pid())
    (folder / "run").mkdir()
    for path in ("serve.json", "console", "run/server-deepep_v2.log", "run/server-none.log", "run/other.log"):
        (folder / path).write_text(path)
    main(["serve-wait"], bare.host)
    copied = sorted(path.name for path in bare.host.out.iterdir() if path.name != "run.log")
    assert copied == ["console", "serve.json", "server-deepep_v2.log", "server-none.log"]
    assert any(line.endswith("] serve-wait: epstack smoke serve finished") for line in bare.notes())


def test_a_wait_phase_gives_up_after_wait_s_and_copies_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    host = fake_host(tmp_path, WAIT_S="0")
    _background(host.root, "upstream-bg", os.getpid())  # this test's own process: still running
    (host.root / "tmp" / "upstream-bg" / "test_ep-2rank-144.json").write_text("{}")
    rank0 = host.root / "tmp" / "test_ep-2rank-144" / "upstream" / "rank0.log"
    rank0.parent.mkdir(parents=True)
    rank0.write_text("Testing with a\nother\nTesting with b\nTesting with c\n")
    main(["upstream-wait"], host.host)
    assert any(
        line.endswith("] upstream-wait: still running after 0 s, 3 modes started") for line in host.notes()
    )
    assert sorted(path.name for path in host.host.out.iterdir()) == ["run.log"]


def test_upstream_wait_copies_the_detached_runs_results(bare: FakeHost) -> None:
    folder = _background(bare.root, "upstream-bg", _ended_pid())
    for name in ("test_ep-2rank-144.json", "test_ep-2rank-144.test_ep.log", "run.log", "console"):
        (folder / name).write_text(name)
    main(["upstream-wait"], bare.host)
    out = bare.host.out
    assert (out / "test_ep-2rank-144.json").read_text() == "test_ep-2rank-144.json"
    assert (out / "test_ep-2rank-144.test_ep.log").exists()
    assert (out / "upstream-run.log").read_text() == "run.log"
    assert not (out / "console").exists()


def test_serve_start_detaches_in_a_session_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    host = fake_host(tmp_path, FAKE_SLEEP="1", SERVE_ARGS="--profile-b none  --x", CC="/usr/bin/clang")
    main(["serve-start"], host.host)
    folder = host.root / "tmp" / "serve-bg"
    pid = int((folder / "pid").read_text())
    assert os.getsid(pid) == pid
    os.waitpid(pid, 0)
    [call] = host.calls()
    assert call["argv"][-4:] == ["--sglang-arg=--attention-backend=triton", "--profile-b", "none", "--x"]
    assert call["env"]["CC"] is None
    assert (folder / "console").read_text().startswith("ran -m epstack smoke serve --profile tiny")


def test_serve_wait_sees_its_own_runs_serve_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """serve-start and serve-wait in one run: the ended serve is this process's child, reaped."""
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(host_module, "POLL_S", 0.05)
    host = fake_host(tmp_path, WAIT_S="60")
    main(["serve-start", "serve-wait"], host.host)
    assert any(line.endswith("] serve-wait: epstack smoke serve finished") for line in host.notes())
    assert host.host.seconds() < 10
