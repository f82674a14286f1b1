"""The smoke's sizes: presets for real models, DeepEP test_ep's defaults, and the run settings."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from epstack.errors import BadInput


@dataclass(frozen=True, kw_only=True)
class Shape:
    hidden: int
    num_topk: int
    num_experts: int


# The default is DeepEP tests/elastic/test_ep.py's own (4096 tokens, hidden 7168, top-6 of 256), so
# the smoke's bandwidth compares with upstream's; presets are the models' real MoE shapes.
DEFAULT_SHAPE = Shape(hidden=7168, num_topk=6, num_experts=256)
PRESETS: dict[str, Shape] = {
    # DeepSeek-V3 / R1: hidden 7168, 256 routed experts, 8 active per token.
    "deepseek-v3": Shape(hidden=7168, num_topk=8, num_experts=256),
    # Qwen3-30B-A3B: hidden 2048, 128 experts, 8 active per token.
    "qwen3-30b-a3b": Shape(hidden=2048, num_topk=8, num_experts=128),
    # A small MoE for tests and quick checks of a cluster's plumbing (epstack cluster's tiny profile).
    "tiny": Shape(hidden=512, num_topk=4, num_experts=64),
}
DEFAULT_NUM_TOKENS = 4096


@dataclass(frozen=True, kw_only=True)
class SmokeConfig:
    """Everything one rank needs; written as JSON by the supervisor, read by each worker."""

    hidden: int
    num_topk: int
    num_experts: int
    num_tokens: int
    num_max_tokens_per_rank: int
    seed: int = 0
    masked_ratio: float = 0.1
    hot_rank_ratio: float = 4.0
    iters: int = 50
    mode: str = "auto"  # auto | direct | hybrid
    prefer_overlap_with_compute: bool = False
    init_timeout: float = 120.0
    skip_bench: bool = False
    report_path: str = ""
    buffer_num_topk: int | None = None  # num_topk given to ElasticBuffer; None: num_topk

    def validate(self, world_size: int) -> None:
        """Raise BadInput naming the flag and the fix."""
        for name in ("hidden", "num_topk", "num_experts", "num_tokens", "iters"):
            if getattr(self, name) <= 0:
                raise BadInput(f"--{name.replace('_', '-')} must be > 0")
        if self.num_max_tokens_per_rank < self.num_tokens:
            raise BadInput(
                f"--num-max-tokens-per-rank {self.num_max_tokens_per_rank} is smaller than the "
                f"batch (--num-tokens {self.num_tokens}); DeepEP asserts "
                "num_tokens <= num_max_tokens_per_rank. Fix: raise it to at least the batch."
            )
        if self.num_topk > self.num_experts:
            raise BadInput(f"--num-topk {self.num_topk} > --num-experts {self.num_experts}")
        if self.num_experts % world_size:
            raise BadInput(f"--num-experts {self.num_experts} is not a multiple of the {world_size} ranks")
        if self.hidden % 128:
            raise BadInput(f"--hidden {self.hidden} must be a multiple of 128 (FP8 scale blocks)")
        if not 0 <= self.masked_ratio < 1:
            raise BadInput("--masked-ratio must be in [0, 1)")
        if self.hot_rank_ratio < 1:
            raise BadInput("--hot-rank-ratio must be >= 1")
        if self.mode not in ("auto", "direct", "hybrid"):
            raise BadInput(f"--mode {self.mode}: use auto, direct or hybrid")

    def dump(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2, sort_keys=True))

    @classmethod
    def load(cls, path: Path) -> SmokeConfig:
        return cls(**json.loads(path.read_text()))


def resolve_shape(
    preset: str | None, hidden: int | None, num_topk: int | None, num_experts: int | None
) -> Shape:
    """Preset (or test_ep's default), then any explicit flag over it."""
    if preset is not None and preset not in PRESETS:
        raise BadInput(f"--profile {preset}: not a model profile; fix: use one of {', '.join(PRESETS)}")
    base = PRESETS[preset] if preset else DEFAULT_SHAPE
    return Shape(
        hidden=hidden if hidden is not None else base.hidden,
        num_topk=num_topk if num_topk is not None else base.num_topk,
        num_experts=num_experts if num_experts is not None else base.num_experts,
    )
