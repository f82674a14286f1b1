"""Start ranks as their own process groups, enforce one deadline, leave nothing behind.

Each rank runs in a new session (so a new process group whose id is its pid); whatever it starts
(NCCL proxy threads are threads, but nvcc and its children are processes) stays in that group. On
the deadline, or when a rank fails and the others do not follow within a grace period, every group
is killed with SIGKILL and reaped; the stage each rank last wrote names where it hung. Each rank also
asks the kernel (prctl PR_SET_PDEATHSIG) for SIGKILL when the supervisor dies, so even a SIGKILLed
supervisor, which can clean up nothing, leaves no rank holding GPUs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from epstack.cmd import die_with
from epstack.smoke.stage import read_stage


@dataclass(frozen=True, kw_only=True)
class RankCommand:
    rank: int
    argv: Sequence[str]
    env: Mapping[str, str]


@dataclass(frozen=True, kw_only=True)
class RankOutcome:
    rank: int
    returncode: int | None  # None: killed by the supervisor
    stage: str  # the last stage the rank entered
    killed: bool
    log: Path

    @property
    def signal_name(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            return signal.Signals(-self.returncode).name
        return None


@dataclass(frozen=True, kw_only=True)
class Supervised:
    outcomes: list[RankOutcome]
    timed_out: bool  # the deadline passed with a rank still running
    elapsed_s: float
    reason: str  # one line: why the run ended

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(o.returncode == 0 for o in self.outcomes)


class _Interrupted(Exception):
    pass


def _raise_interrupted(signum: int, _frame: FrameType | None) -> None:
    raise _Interrupted(signal.Signals(signum).name)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def supervise(  # noqa: PLR0912
    commands: Sequence[RankCommand],
    *,
    run_dir: Path,
    timeout_s: float,
    failure_grace_s: float = 15.0,
    poll_s: float = 0.05,
) -> Supervised:
    """Run every rank to completion, or kill them all; returns how each ended."""
    run_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    deadline = start + timeout_s
    procs: dict[int, subprocess.Popen[bytes]] = {}
    logs: dict[int, Path] = {}
    killed: set[int] = set()
    reason = "all ranks exited"
    timed_out = False
    old_handlers = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGTERM, signal.SIGINT)}
    die_with_me = die_with(os.getpid())
    try:
        for cmd in commands:
            logs[cmd.rank] = run_dir / f"rank{cmd.rank}.log"
            with logs[cmd.rank].open("wb") as log:
                procs[cmd.rank] = subprocess.Popen(
                    list(cmd.argv),
                    env=dict(cmd.env),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=die_with_me,  # noqa: PLW1509 (prctl only; no locks taken)
                )
        first_failure_at: float | None = None
        while True:
            running = [r for r, p in procs.items() if p.poll() is None]
            if not running:
                break
            now = time.monotonic()
            failed = [r for r, p in procs.items() if p.returncode not in (None, 0)]
            if failed and first_failure_at is None:
                first_failure_at = now
            if now >= deadline:
                timed_out = True
                stages = ", ".join(f"rank {r} in {read_stage(run_dir, r)}" for r in running)
                reason = f"timeout after {timeout_s:.0f} s: {stages}"
                break
            if first_failure_at is not None and now - first_failure_at >= failure_grace_s:
                reason = (
                    f"rank {failed[0]} exited {procs[failed[0]].returncode}; killed the ranks "
                    f"still running {failure_grace_s:.0f} s later: {running}"
                )
                break
            time.sleep(poll_s)
    except _Interrupted as exc:
        reason = f"supervisor got {exc}; killed every rank"
    finally:
        for rank, proc in procs.items():
            if proc.poll() is None:
                killed.add(rank)
            _kill_group(proc)  # also reaps grandchildren a finished rank left in its group
        for proc in procs.values():
            proc.wait()
        for s, handler in old_handlers.items():
            signal.signal(s, handler)
    outcomes = [
        RankOutcome(
            rank=rank,
            returncode=None if rank in killed else proc.returncode,
            stage=read_stage(run_dir, rank),
            killed=rank in killed,
            log=logs[rank],
        )
        for rank, proc in sorted(procs.items())
    ]
    if not timed_out and reason == "all ranks exited":
        bad = [o for o in outcomes if o.returncode != 0]
        if bad:
            reason = f"rank {bad[0].rank} exited {bad[0].returncode} in stage {bad[0].stage}"
    return Supervised(
        outcomes=outcomes,
        timed_out=timed_out,
        elapsed_s=time.monotonic() - start,
        reason=reason,
    )
