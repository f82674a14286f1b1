"""The loaded-NCCL probe's parsing, DeepEP test_ep output parsing, config and report pieces."""

from __future__ import annotations

import pytest

from epstack.errors import BadInput
from epstack.guard.loaded import decode_nccl_version, mapped_libraries
from epstack.smoke.config import DEFAULT_SHAPE, SmokeConfig, resolve_shape
from epstack.smoke.nccl import NcclInfo
from epstack.smoke.report import aggregate, ratios
from epstack.smoke.result import Bench, OpFigures, RankResult, Stats
from epstack.smoke.upstream import EXPECTED_MODES, parse
from tests.conftest import REPO

RESULTS = REPO / "benchmarks" / "elastic" / "results"

WHEEL = "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"
MAPS = f"""\
7f1c2a000000-7f1c2a200000 r--p 00000000 00:2d 1234 {WHEEL}
7f1c2a200000-7f1c2b000000 r-xp 00200000 00:2d 1234 {WHEEL}
7f1c2c000000-7f1c2c100000 r--p 00000000 00:2d 99 /usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.33
7f1c2d000000-7f1c2d100000 r--p 00000000 00:2d 77 /opt/nccl/lib/libnccl.so.2.30.7
7f1c2e000000-7f1c2e001000 rw-p 00000000 00:00 0
"""


def test_mapped_nccl_in_first_mapped_order() -> None:
    plugin = "7f1c2f000000-7f1c2f100000 r--p 00000000 00:2d 5 /opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so\n"
    assert mapped_libraries(MAPS + plugin, "libnccl.so") == [WHEEL, "/opt/nccl/lib/libnccl.so.2.30.7"]
    assert mapped_libraries("7f-8f r--p 0 00:00 0 [heap]\n", "libnccl.so") == []


@pytest.mark.parametrize(("code", "version"), [(23007, (2, 30, 7)), (22809, (2, 28, 9)), (2708, (2, 7, 8))])
def test_decode_version(code: int, version: tuple[int, int, int]) -> None:
    assert decode_nccl_version(code) == version


def test_min_version() -> None:
    assert NcclInfo(path="x", code=23004, paths=("x",)).new_enough
    assert not NcclInfo(path="x", code=22809, paths=("x",)).new_enough
    assert NcclInfo(path="x", code=23007, paths=("x",)).text == "2.30.7"


def test_parse_real_test_ep_output() -> None:
    """The log DeepEP's test_ep.py printed on the H200 machine (first mode only)."""
    result = parse((RESULTS / "test_ep-first-mode.log").read_text(), 0)
    assert result.modes == 1 and result.mode_names[0].startswith("do_handle_copy=1")
    dispatch = result.first_mode("dispatch")
    assert dispatch["ranks"] == 2 and 500 < dispatch["su_gbps"] < 700
    assert 90 < dispatch["us"] < 120
    assert result.first_mode("combine")["ranks"] == 2
    assert not result.passed  # 1 of 144 modes is not DeepEP's full verdict
    assert {p.op for p in result.perf} == {
        "dispatch",
        "expanded_dispatch",
        "cached_dispatch",
        "combine",
        "reduced_combine",
    }


def test_parse_failure() -> None:
    text = (
        " > Testing with do_handle_copy=1, expert_alignment=128 ...\n"
        "   * EP:   0/2 | dispatch: 0 GB/s (SO), 585 GB/s (SU), 103.000 us, 1 bytes | copy\n"
        "AssertionError: ref_t=tensor([1]), t=tensor([2])\n"
    )
    result = parse(text, 1)
    assert not result.passed and result.error.startswith("AssertionError")
    assert result.first_mode("dispatch")["su_gbps"] == 585.0
    assert parse(text.replace("AssertionError", "ok"), 0).modes == 1 != EXPECTED_MODES


def test_shapes_and_validation() -> None:
    assert resolve_shape(None, None, None, None) == DEFAULT_SHAPE
    assert resolve_shape("qwen3-30b-a3b", None, None, None).hidden == 2048
    assert resolve_shape("deepseek-v3", None, 4, None).num_topk == 4
    with pytest.raises(BadInput, match="not a model profile"):
        resolve_shape("deepseek", None, None, None)
    cfg = SmokeConfig(hidden=7168, num_topk=6, num_experts=256, num_tokens=4096, num_max_tokens_per_rank=4096)
    cfg.validate(2)
    with pytest.raises(BadInput, match="multiple of the 3 ranks"):
        cfg.validate(3)
    with pytest.raises(BadInput, match="smaller than the batch"):
        SmokeConfig(
            hidden=7168, num_topk=6, num_experts=256, num_tokens=4096, num_max_tokens_per_rank=100
        ).validate(2)


def test_aggregate_and_ratio() -> None:
    def figs(gbps: float, mean_gbps: float) -> OpFigures:
        us = Stats(median=100.0, p10=99.0, p90=101.0, mean=100.0, min=98.0, max=120.0, n=50)
        return OpFigures(bytes=1e6, kernel_gbps=gbps, kernel_mean_gbps=mean_gbps, call_gbps=gbps / 2,
                         kernel_us=us, call_us=us)  # fmt: skip

    def bench(fp8: OpFigures, combine: OpFigures) -> Bench:
        return Bench(dispatch_fp8=fp8, dispatch_bf16=figs(1, 1), combine=combine)

    ranks = [
        RankResult(rank=0, bench=bench(figs(580, 570), figs(600, 600))),
        RankResult(rank=1, bench=bench(figs(590, 580), figs(610, 606))),
        RankResult(rank=2, status="killed"),  # no figures: not in the mean
    ]
    summary = aggregate(ranks)
    assert summary["dispatch_fp8"]["kernel_gbps_min"] == 580
    assert summary["dispatch_fp8"]["kernel_mean_gbps_mean"] == 575
    text = (
        " > Testing with a ...\n"
        "   * EP:   0/2 | dispatch: 0 GB/s (SO), 600 GB/s (SU), 100.0 us, 1 bytes\n"
        "   @ EP:   0/2 | combine: 0 GB/s (SO), 603 GB/s (SU), 190.0 us, 1 bytes\n"
    )
    r = ratios(summary, parse(text, 0))
    assert r["dispatch_fp8"]["ratio"] == pytest.approx(575 / 600)
    assert r["combine"]["ratio"] == pytest.approx(603 / 603)
