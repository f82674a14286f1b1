"""What one rank of the elastic smoke found, stage by stage, as typed values. Pure: no torch.

The worker fills a RankResult as its stages end; `to_json()` is the rank<N>.json document (and the
report's "ranks" entries), with the keys the report, the benchmarks and the committed results use,
and RANK_RESULT reads it back. A rank that fails keeps what the stages before the failure found.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from epstack.document import Schema


@dataclass(frozen=True, kw_only=True)
class NcclFacts:
    version: str  # the loaded libnccl's own ncclGetVersion, e.g. 2.30.7
    code: int
    path: str
    mapped: list[str]  # every libnccl mapped (more than one is itself a problem)
    torch_compiled: str  # torch.cuda.nccl.version(): what torch was built against, for contrast
    all_ranks: list[str] | None = None  # every rank's loaded version, once the group exists


@dataclass(frozen=True, kw_only=True)
class DeepEpFacts:
    file: str
    version: str


@dataclass(frozen=True, kw_only=True)
class FabricFacts:
    rdma_devices: list[str]
    gin: bool
    hosts: int
    mode: str  # hybrid | direct
    why: str

    @property
    def hybrid(self) -> bool:
        return self.mode == "hybrid"


@dataclass(frozen=True, kw_only=True)
class BufferFacts:
    bytes: int
    num_topk: int
    hint_bytes: int
    hint_bytes_num_topk_0: int
    num_topk_0_over_this: float
    construct_s: float
    scaleout_ranks: int
    scaleup_ranks: int
    rdma_ranks: int
    nvlink_ranks: int
    allow_hybrid_mode: bool


@dataclass(frozen=True, kw_only=True)
class CaseCheck:
    """One routing case in one dtype, checked against the all_to_all reference."""

    case: str
    dtype: str
    tokens: int
    masked_slots: int
    received: int
    dispatch: str  # "ok" or the first mismatch
    combine: str
    combine_compare: str

    @property
    def ok(self) -> bool:
        return self.dispatch == "ok" and self.combine == "ok"


@dataclass(frozen=True, kw_only=True)
class JitFacts:
    """First-call times (kernels compiled on first use) and the JIT cache before and after."""

    first_dispatch_bf16_s: float
    first_dispatch_fp8_s: float
    first_combine_s: float
    cache_dir: str
    cache_files_before: int
    cache_files_after: int


@dataclass(frozen=True, kw_only=True)
class Stats:
    n: int
    median: float
    mean: float
    min: float
    max: float
    p10: float
    p90: float

    @classmethod
    def of(cls, values: Sequence[float], scale: float = 1.0) -> Stats:
        ordered = sorted(values)
        n = len(ordered)
        return cls(
            n=n,
            median=statistics.median(ordered) * scale,
            mean=statistics.fmean(ordered) * scale,
            min=ordered[0] * scale,
            max=ordered[-1] * scale,
            p10=ordered[max(0, int(0.1 * (n - 1)))] * scale,
            p90=ordered[round(0.9 * (n - 1))] * scale,  # at most n - 1
        )


@dataclass(frozen=True, kw_only=True)
class OpFigures:
    """One operation's timing: per-call kernel and whole-call times in µs, GB/s from the median (and
    *_mean_gbps from the mean kernel time, the statistic test_ep prints)."""

    bytes: float
    kernel_us: Stats
    call_us: Stats
    kernel_gbps: float
    kernel_mean_gbps: float
    call_gbps: float

    @classmethod
    def of(cls, num_bytes: float, kernel_s: Sequence[float], call_s: Sequence[float]) -> OpFigures:
        kernel, call = Stats.of(kernel_s), Stats.of(call_s)
        return cls(
            bytes=num_bytes,
            kernel_us=Stats.of(kernel_s, 1e6),
            call_us=Stats.of(call_s, 1e6),
            kernel_gbps=num_bytes / kernel.median / 1e9,
            kernel_mean_gbps=num_bytes / kernel.mean / 1e9,
            call_gbps=num_bytes / call.median / 1e9,
        )


@dataclass(frozen=True, kw_only=True)
class Bench:
    dispatch_fp8: OpFigures
    dispatch_bf16: OpFigures
    combine: OpFigures

    @property
    def ops(self) -> dict[str, OpFigures]:
        """Each operation's figures by its name."""
        return {field.name: getattr(self, field.name) for field in fields(self)}


@dataclass(kw_only=True)
class RankResult:
    """Everything a rank reports; fields stay None until the stage that finds them has run."""

    rank: int
    world_size: int | None = None
    local_rank: int | None = None
    host: str | None = None
    nccl: NcclFacts | None = None
    deep_ep: DeepEpFacts | None = None
    init_s: float | None = None
    fabric: FabricFacts | None = None
    buffer: BufferFacts | None = None
    num_sms: int | None = None
    num_qps: int | None = None
    checks: list[CaseCheck] | None = None
    jit: JitFacts | None = None
    bench: Bench | None = None
    status: str | None = None  # pass | fail | environment | error
    error: str | None = None
    stage: str | None = None  # where a failed rank was
    finding: dict[str, Any] | None = None  # a classified failure (epstack.smoke.classify)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(check.ok for check in self.checks or ())

    def to_json(self) -> dict[str, Any]:
        """The rank<N>.json document: what was found, nothing for stages not reached."""
        failed = self.error is not None
        document = {
            key: value
            for key, value in asdict(self).items()
            if value is not None or (failed and key == "finding")
        }
        if self.nccl is not None and self.nccl.all_ranks is None:
            del document["nccl"]["all_ranks"]
        return RANK_RESULT.body(document)


RANK_RESULT = Schema(
    name="smoke-rank",
    version=1,
    model=RankResult,
    what="a smoke rank result (rank<N>.json)",
    fix="run `epstack smoke elastic` of this epstack again",
)
