"""The timeout path with real processes: a rank that hangs, a real process-group kill, no orphans.

The stub ranks are plain Python (no torch, no GPU) but use the worker's own StageWriter, start a
grandchild like nvcc would, and hang the way the GPU worker does under the test hook."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from epstack.smoke.__main__ import main as smoke_main
from epstack.smoke.stage import HANG_RANK_ENV, HANG_STAGE_ENV, STAGES, StageWriter
from epstack.smoke.supervise import RankCommand, supervise
from tests.smoke.processes import gone, group_alive


def _commands(stub: Path, run_dir: Path, n: int, **env: str) -> list[RankCommand]:
    base = dict(os.environ) | {"WORLD_SIZE": str(n)} | env
    return [
        RankCommand(
            rank=r, argv=[sys.executable, str(stub), "--run-dir", str(run_dir)], env=base | {"RANK": str(r)}
        )
        for r in range(n)
    ]


def test_a_rank_that_never_leaves_dispatch_ends_every_rank(stub: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    commands = _commands(stub, run_dir, 3, **{HANG_STAGE_ENV: "dispatch", HANG_RANK_ENV: "1"})
    start = time.monotonic()
    result = supervise(commands, run_dir=run_dir, timeout_s=3.0, failure_grace_s=1.0)
    elapsed = time.monotonic() - start
    assert result.timed_out and not result.ok
    assert 3.0 <= elapsed < 8.0
    assert "rank 1 in dispatch" in result.reason
    by_rank = {o.rank: o for o in result.outcomes}
    assert by_rank[1].killed and by_rank[1].stage == "dispatch"
    assert not by_rank[0].killed and by_rank[0].stage == "done"
    for o in result.outcomes:
        pid = int((run_dir / f"grandchild{o.rank}.pid").read_text())
        assert gone(pid), f"rank {o.rank}'s grandchild {pid} survived"
    assert not any(
        group_alive(p) for p in (int((run_dir / f"grandchild{r}.pid").read_text()) for r in range(3))
    )


def test_a_failed_rank_does_not_leave_the_others_waiting(stub: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env = {HANG_STAGE_ENV: "report", HANG_RANK_ENV: "0", "STUB_FAIL_RANK": "1"}
    result = supervise(
        _commands(stub, run_dir, 2, **env), run_dir=run_dir, timeout_s=30.0, failure_grace_s=1.0
    )
    assert not result.timed_out and result.elapsed_s < 10
    assert "rank 1 exited 3" in result.reason
    assert [o.killed for o in result.outcomes] == [True, False]


def test_all_ranks_pass(stub: Path, tmp_path: Path) -> None:
    result = supervise(_commands(stub, tmp_path, 2), run_dir=tmp_path, timeout_s=30.0)
    assert result.ok and [o.stage for o in result.outcomes] == ["done", "done"]


def test_stage_names_are_checked(tmp_path: Path) -> None:
    writer = StageWriter(tmp_path, 0)
    with pytest.raises(ValueError, match="unknown stage"):
        writer.enter("dispach")
    assert "dispatch" in STAGES


def test_cli_hang_exits_1_within_timeout_naming_the_stage(
    stub_cli: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole command, in-process: launch detection, supervise, report JSON, exit code."""
    monkeypatch.setenv(HANG_STAGE_ENV, "dispatch")
    monkeypatch.setenv(HANG_RANK_ENV, "1")
    report = tmp_path / "report.json"
    start = time.monotonic()
    code = smoke_main(
        [
            "elastic",
            "--gpus-per-node",
            "2",
            "--timeout",
            "3",
            "--json",
            str(report),
            "--run-dir",
            str(tmp_path / "run"),
        ]
    )
    assert code == 1 and time.monotonic() - start < 10
    data = json.loads(report.read_text())
    assert data["verdict"] == "fail" and data["supervisor"]["timed_out"]
    assert "rank 1 in dispatch" in data["supervisor"]["reason"]


def test_cli_pass_and_bad_input(stub_cli: None, tmp_path: Path) -> None:
    report = tmp_path / "ok.json"
    assert (
        smoke_main(
            ["elastic", "--gpus-per-node", "2", "--json", str(report), "--run-dir", str(tmp_path / "run")]
        )
        == 0
    )
    assert json.loads(report.read_text())["verdict"] == "pass"
    # num_max_tokens_per_rank smaller than the batch is bad input: exit 2, nothing started
    assert (
        smoke_main(
            ["elastic", "--gpus-per-node", "2", "--num-tokens", "4096", "--num-max-tokens-per-rank", "1024"]
        )
        == 2
    )
    assert smoke_main(["elastic"]) == 2  # no launcher, no --nproc-per-node
