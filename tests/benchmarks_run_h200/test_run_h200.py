"""The phase table: argv names phases run in its order, each noted with its seconds in $OUT/run.log."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from benchmarks.elastic.run_h200 import main
from tests.benchmarks_run_h200.conftest import REPO, FakeHost, fake_host

NOTE = re.compile(r"^\[\d+s\] ")


def test_an_unknown_phase_is_one_line_and_nothing_runs(
    bare: FakeHost, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", "smok"], bare.host) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "unknown phase 'smok' (did you mean smoke?)" in error
    assert "fix: name phases from install, first-request," in error
    assert bare.calls() == []
    assert not (bare.host.out / "run.log").exists()


def test_the_shell_wrapper_runs_the_table_from_a_bare_python(tmp_path: Path) -> None:
    """run_h200.sh puts the checkout on PYTHONPATH itself: a python3 started anywhere finds the table."""
    env = {"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out")}
    result = subprocess.run(["bash", REPO / "benchmarks/elastic/run_h200.sh", "no-such-phase"], cwd=REPO,
                            env=env, capture_output=True, text=True, check=False)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("run_h200.sh: unknown phase 'no-such-phase'")


def test_phases_run_in_the_order_named_and_each_is_noted(bare: FakeHost) -> None:
    assert main(["smoke", "doctor", "smoke"], bare.host) == 0
    modules = [argv[1] for argv in bare.argvs()]
    assert modules == ["epstack.smoke", "epstack.doctor", "epstack.smoke"]
    notes = [line for line in bare.notes() if NOTE.match(line)]
    assert [NOTE.sub("", line) for line in notes] == [
        "smoke", "smoke: exit 0", "doctor: exit 0", "smoke", "smoke: exit 0", "all phases done",
    ]  # fmt: skip


def test_an_exit_status_is_noted_and_the_run_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    failing = fake_host(tmp_path, FAKE_STATUS="3")
    assert main(["doctor", "smoke"], failing.host) == 0
    assert any(line.endswith("] doctor: exit 3") for line in failing.notes())
    assert any(line.endswith("] smoke: exit 3") for line in failing.notes())


def test_a_phase_that_stops_on_an_error_is_noted_and_the_next_one_runs(bare: FakeHost) -> None:
    """stack with no ferried chunks: its unpack fails; doctor still runs, and the run exits 1."""
    assert main(["stack", "doctor"], bare.host) == 1
    notes = bare.notes()
    assert any(re.search(r"\] stack: stopped: `cat .*/opt/ferry/c/c\*", line) for line in notes)
    assert any(line.endswith("] doctor: exit 0") for line in notes)


def test_nproc_that_is_no_number_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NPROC", "two")
    assert main(["smoke"]) == 2
    assert (
        capsys.readouterr().err
        == "NPROC='two': not a whole number; fix: NPROC=1, 2, 4 or 8 (ranks on this host)\n"
    )
