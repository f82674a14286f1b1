"""The smoke refuses what it cannot run before any rank starts, forgets earlier runs, and its ranks die
with their supervisor even when the supervisor is SIGKILLed. CPU only: stub ranks, the real preflight
probe on this machine's CPU torch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from epstack.errors import BAD_INPUT, CHECK_FAILED, ENVIRONMENT, OK
from epstack.smoke import preflight
from epstack.smoke.__main__ import main as smoke_main
from epstack.smoke.preflight import Found, require
from epstack.smoke.result import RANK_RESULT
from epstack.smoke.stage import HANG_RANK_ENV, HANG_STAGE_ENV
from tests.conftest import REPO
from tests.smoke.processes import gone

RUN = ["elastic", "--gpus-per-node", "2", "--timeout", "20"]


def test_a_cpu_torch_is_named_before_any_rank_starts(
    stub_cli: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real probe, in this Python: torch is the CPU build the tests install."""
    monkeypatch.setattr(preflight, "PROBE", (sys.executable, "-m", "epstack.smoke.preflight"))
    run_dir = tmp_path / "run"
    assert smoke_main([*RUN, "--run-dir", str(run_dir), "--json", str(tmp_path / "r.json")]) == ENVIRONMENT
    err = capsys.readouterr().err
    assert "is a CPU build" in err and "fix:" in err and "Traceback" not in err
    assert not run_dir.exists() and not (tmp_path / "r.json").exists()


def test_torch_that_does_not_import_is_named(
    stub_cli: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    no_torch = (
        "import runpy, sys; sys.modules['torch'] = None; "
        "runpy.run_module('epstack.smoke.preflight', run_name='__main__')"
    )
    monkeypatch.setattr(preflight, "PROBE", (sys.executable, "-c", no_torch))
    assert smoke_main([*RUN, "--run-dir", str(tmp_path / "run")]) == ENVIRONMENT
    assert "torch does not import" in capsys.readouterr().err


def test_a_probe_that_says_nothing_is_an_environment_problem(
    stub_cli: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(preflight, "PROBE", (sys.executable, "-c", "import sys; sys.exit('segfault-ish')"))
    assert smoke_main([*RUN, "--run-dir", str(tmp_path / "run")]) == ENVIRONMENT
    assert "could not check the Python the ranks run" in capsys.readouterr().err


def test_a_probe_that_hangs_is_an_environment_problem(
    stub_cli: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(preflight, "PROBE", (sys.executable, "-c", "import time; time.sleep(60)"))
    monkeypatch.setattr(preflight, "TIMEOUT_S", 1.0)
    assert smoke_main([*RUN, "--run-dir", str(tmp_path / "run")]) == ENVIRONMENT
    assert "did not finish within 1 s; fix: check the NVIDIA driver" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("found", "words"),
    [
        (Found(python="py", torch="2.14.1", cuda="13.0", gpus=0), "no GPU visible"),
        (Found(python="py", torch="2.14.1", cuda="13.0", gpu_error="RuntimeError: driver"), "driver"),
        (Found(python="py", torch="2.14.1", cuda="13.0", gpus=1), "1 are visible"),
        (Found(python="py", torch="2.14.1", cuda="13.0", gpus=8), "deep_ep is not installed"),
    ],
)
def test_each_missing_piece_in_words(found: Found, words: str) -> None:
    with pytest.raises(Exception, match=words) as caught:
        require(found, local_ranks=2, first_local_rank=0, need_deep_ep=True)
    assert getattr(caught.value, "exit_code", None) == ENVIRONMENT


def test_a_reused_run_dir_never_reports_the_previous_run(
    stub_cli: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir, report = tmp_path / "run", tmp_path / "report.json"
    assert smoke_main([*RUN, "--run-dir", str(run_dir), "--json", str(report)]) == OK
    assert (run_dir / "all_ranks.json").is_file()
    (run_dir / "mine.txt").write_text("not the smoke's")
    monkeypatch.setenv("STUB_FAIL_RANK", "1")
    monkeypatch.setenv(HANG_STAGE_ENV, "report")
    monkeypatch.setenv(HANG_RANK_ENV, "0")  # rank 0 never writes all_ranks.json this time
    assert (
        smoke_main([*RUN, "--timeout", "5", "--run-dir", str(run_dir), "--json", str(report)]) == CHECK_FAILED
    )
    data = json.loads(report.read_text())
    assert data["verdict"] == "fail"
    assert all(RANK_RESULT.parse(rank, report).status != "pass" for rank in data["ranks"])
    assert (run_dir / "mine.txt").read_text() == "not the smoke's"


@pytest.mark.parametrize(
    "flags",
    [
        ["--timeout", "nan"],
        ["--timeout", "-1"],
        ["--timeout", "inf"],
        ["--timeout", "0"],
        ["--gpus-per-node", "0"],
        ["--iters", "0"],
        ["--master-port", "70000"],
        ["--master-port", "0"],
        ["--num-experts", "-8"],
        ["--masked-ratio", "nan"],
        ["--json", ""],
        ["--run-dir", "a\0b"],
    ],
)
def test_out_of_range_flags_are_bad_input(
    stub_cli: None, flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert smoke_main([*RUN, *flags]) == BAD_INPUT
    assert "Traceback" not in capsys.readouterr().err


def test_a_report_path_that_is_a_directory_is_refused_before_ranks_start(
    stub_cli: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert smoke_main([*RUN, "--run-dir", str(tmp_path / "run"), "--json", str(tmp_path)]) == BAD_INPUT
    assert "is a directory" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


SUPERVISOR = """
import os, sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from epstack.smoke.supervise import RankCommand, supervise
run_dir = Path({run_dir!r})
env = dict(os.environ) | {{"WORLD_SIZE": "2", "EPSTACK_SMOKE_HANG_STAGE": "dispatch"}}
argv = [sys.executable, {stub!r}, "--run-dir", str(run_dir)]
commands = [RankCommand(rank=r, argv=argv, env=env | {{"RANK": str(r)}}) for r in range(2)]
supervise(commands, run_dir=run_dir, timeout_s=300)
"""


def test_ranks_die_with_a_sigkilled_supervisor(stub: Path, tmp_path: Path) -> None:
    """The supervisor, a real process, is SIGKILLed while its ranks hang: the kernel kills them."""
    run_dir = tmp_path / "run"
    script = SUPERVISOR.format(repo=str(REPO), run_dir=str(run_dir), stub=str(stub))
    supervisor = subprocess.Popen([sys.executable, "-c", script])
    pids: list[int] = []
    deadline = time.monotonic() + 30
    while len(pids) < 2 and time.monotonic() < deadline:
        pids = [int(p.read_text()) for p in run_dir.glob("rank*.pid") if p.read_text()]
        time.sleep(0.05)
    assert len(pids) == 2, "the stub ranks did not start"
    supervisor.send_signal(signal.SIGKILL)
    supervisor.wait()
    try:
        assert all(gone(pid) for pid in pids), "a rank outlived its SIGKILLed supervisor"
    finally:
        for pid in pids:
            if not gone(pid, 0):
                os.kill(pid, signal.SIGKILL)
