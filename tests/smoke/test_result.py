"""The worker's typed results serialize to exactly the rank documents the report, the benchmarks and
the committed H200 results read (same keys, all the way down, and a schema), and read back the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from epstack.errors import BadInput
from epstack.smoke.result import (
    RANK_RESULT,
    Bench,
    BufferFacts,
    CaseCheck,
    DeepEpFacts,
    FabricFacts,
    JitFacts,
    NcclFacts,
    OpFigures,
    RankResult,
    Stats,
)
from tests.conftest import REPO

H200_SMOKE = REPO / "benchmarks" / "elastic" / "results" / "smoke-2rank.json"


def keys(value: Any, prefix: str = "") -> set[str]:
    """Every key path in a JSON document (list entries by their first element)."""
    if isinstance(value, dict):
        return {p for k, v in value.items() for p in {f"{prefix}.{k}", *keys(v, f"{prefix}.{k}")}}
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return keys(value[0], f"{prefix}[]")
    return set()


def full_result() -> RankResult:
    figures = OpFigures.of(1e6, [1e-4, 2e-4, 3e-4], [2e-4, 3e-4, 4e-4])
    return RankResult(
        rank=0,
        world_size=2,
        local_rank=0,
        host="h200",
        nccl=NcclFacts(
            version="2.30.7", code=23007, path="/x/libnccl.so.2", mapped=["/x"], torch_compiled="2.28.9"
        ),
        deep_ep=DeepEpFacts(file="/x/deep_ep/__init__.py", version=""),
        init_s=1.0,
        fabric=FabricFacts(rdma_devices=[], gin=False, hosts=1, mode="direct", why="no RDMA NIC"),
        buffer=BufferFacts(
            bytes=1,
            num_topk=6,
            hint_bytes=1,
            hint_bytes_num_topk_0=1,
            num_topk_0_over_this=1.0,
            construct_s=0.1,
            scaleout_ranks=1,
            scaleup_ranks=2,
            rdma_ranks=1,
            nvlink_ranks=2,
            allow_hybrid_mode=False,
        ),
        num_sms=20,
        num_qps=8,
        checks=[
            CaseCheck(
                case="uniform",
                dtype="bf16",
                tokens=4096,
                masked_slots=0,
                received=4000,
                dispatch="ok",
                combine="ok",
                combine_compare="bitwise",
            )
        ],
        jit=JitFacts(
            first_dispatch_bf16_s=4.0,
            first_dispatch_fp8_s=5.0,
            first_combine_s=6.0,
            cache_dir="/tmp/jit",
            cache_files_before=0,
            cache_files_after=19,
        ),
        bench=Bench(dispatch_fp8=figures, dispatch_bf16=figures, combine=figures),
        status="pass",
    )


def test_a_full_rank_result_has_the_keys_of_the_h200_run() -> None:
    committed = json.loads(H200_SMOKE.read_text())["ranks"][0]
    rank = full_result()
    with_all_ranks = RankResult(
        **(vars(rank) | {"nccl": NcclFacts(**(vars(rank.nccl) | {"all_ranks": ["2.30.7"]}))})
    )
    assert keys(with_all_ranks.to_json()) == keys(committed) | {".schema"}
    assert with_all_ranks.passed


def test_a_rank_result_reads_back_as_written() -> None:
    rank = full_result()
    assert RANK_RESULT.parse(rank.to_json(), "rank0.json") == rank
    failed = RankResult(rank=1, status="error", error="RuntimeError: x", stage="init")
    assert RANK_RESULT.parse(json.loads(json.dumps(failed.to_json())), "rank1.json") == failed


def test_a_rank_result_of_an_older_epstack_is_bad_input(tmp_path: Path) -> None:
    """The committed H200 ranks predate the schema: read back, they are refused in one line."""
    path = tmp_path / "all_ranks.json"
    path.write_text(json.dumps(json.loads(H200_SMOKE.read_text())["ranks"]))
    with pytest.raises(BadInput, match=r"^.*all_ranks.json: \[0\]: no schema, so not a smoke rank result"):
        RANK_RESULT.read_list(path)


def test_figures_are_microseconds_and_gbps_from_the_median() -> None:
    figures = OpFigures.of(1e6, [1e-4, 2e-4, 3e-4], [1e-3, 1e-3, 1e-3])
    expected = {
        "n": 3,
        "median": 200.0,
        "mean": 200.0,
        "min": 100.0,
        "max": 300.0,
        "p10": 100.0,
        "p90": 300.0,
    }
    assert vars(figures.kernel_us) == pytest.approx(expected)
    assert figures.kernel_gbps == 1e6 / 2e-4 / 1e9
    assert figures.call_gbps == 1.0


@pytest.mark.parametrize(("n", "p10", "p90"), [(1, 7, 7), (10, 0, 8), (11, 1, 9), (21, 2, 18)])
def test_p10_and_p90_are_the_nearest_ranks_of_the_sorted_values(n: int, p10: int, p90: int) -> None:
    values = [7.0] if n == 1 else [float((i * 13) % n) for i in range(n)]  # 0 .. n-1, shuffled
    stats = Stats.of(values)
    assert (stats.n, stats.min, stats.max, stats.p10, stats.p90) == (n, min(values), max(values), p10, p90)


def test_kernel_gbps_from_the_mean_and_call_times_in_microseconds() -> None:
    figures = OpFigures.of(3e6, [1e-4, 2e-4, 6e-4], [1e-3, 2e-3, 4e-3])
    assert figures.kernel_gbps == pytest.approx(15.0, rel=1e-12)  # 3 MB over the median 200 µs
    assert figures.kernel_mean_gbps == pytest.approx(10.0, rel=1e-12)  # 3 MB over the mean 300 µs
    assert figures.call_gbps == pytest.approx(1.5, rel=1e-12)
    assert (figures.call_us.median, figures.call_us.mean, figures.call_us.max) == pytest.approx(
        (2000.0, 7000.0 / 3, 4000.0)
    )
    assert figures.bytes == 3e6


def test_a_failed_rank_keeps_what_its_stages_found() -> None:
    rank = RankResult(rank=1, world_size=2, local_rank=1, host="h")
    rank.nccl = NcclFacts(version="2.28.9", code=22809, path="/x", mapped=["/x"], torch_compiled="2.28.9")
    rank.status, rank.error, rank.stage = "environment", "EnvironmentError_: loaded NCCL 2.28.9 ...", "import"
    document = rank.to_json()
    assert set(document) == {
        "schema",
        "rank",
        "world_size",
        "local_rank",
        "host",
        "nccl",
        "status",
        "error",
        "stage",
        "finding",
    }
    assert "all_ranks" not in document["nccl"] and document["finding"] is None
    assert not rank.passed
