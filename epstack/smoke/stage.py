"""The stage file: each rank writes where it is; the supervisor reads it to name a hang.

One small file per rank, replaced atomically, so a reader never sees half a name. Pure Python:
the CPU tests' hanging stub ranks use the same writer as the GPU worker.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

STAGES = (
    "start",
    "import",
    "init",
    "nccl",
    "fabric",
    "buffer",
    "route",
    "dispatch",
    "combine",
    "bench-dispatch",
    "bench-combine",
    "report",
    "done",
)

HANG_STAGE_ENV = "EPSTACK_SMOKE_HANG_STAGE"
HANG_RANK_ENV = "EPSTACK_SMOKE_HANG_RANK"


def stage_path(run_dir: Path, rank: int) -> Path:
    return run_dir / f"rank{rank}.stage"


def read_stage(run_dir: Path, rank: int) -> str:
    """The last stage the rank entered, or "not-started" when it wrote none."""
    try:
        return stage_path(run_dir, rank).read_text().strip() or "not-started"
    except FileNotFoundError:
        return "not-started"


class StageWriter:
    """`enter(name)` records the stage; a test hook can make one rank hang on entering one."""

    def __init__(
        self,
        run_dir: Path,
        rank: int,
        *,
        hang_stage: str | None = None,
        hang_rank: int | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.rank = rank
        self.hang_stage = hang_stage
        self.hang_rank = hang_rank
        self.current = "start"

    @classmethod
    def from_env(cls, run_dir: Path, rank: int, env: dict[str, str] | None = None) -> StageWriter:
        env = dict(os.environ) if env is None else env
        hang_rank = env.get(HANG_RANK_ENV)
        return cls(
            run_dir,
            rank,
            hang_stage=env.get(HANG_STAGE_ENV) or None,
            hang_rank=int(hang_rank) if hang_rank else None,
        )

    def enter(self, name: str) -> None:
        if name not in STAGES:
            raise ValueError(f"unknown stage {name!r}; stages are {', '.join(STAGES)}")
        self.current = name
        path = stage_path(self.run_dir, self.rank)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(name + "\n")
        os.replace(tmp, path)
        if name == self.hang_stage and self.hang_rank in (None, self.rank):
            while True:  # the injected hang: only the supervisor's kill ends it
                time.sleep(3600)
