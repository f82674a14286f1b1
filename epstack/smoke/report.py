"""The smoke's JSON report: its bandwidth summary and ratios. Pure: composes what the ranks wrote."""

from __future__ import annotations

import statistics
from typing import Any

from epstack.smoke.result import RankResult
from epstack.smoke.upstream import UpstreamResult

OPS = ("dispatch_fp8", "dispatch_bf16", "combine")
# test_ep's first mode is an fp8 dispatch; its combine is the bf16 combine after it.
UPSTREAM_OP = {"dispatch_fp8": "dispatch", "combine": "combine"}


def aggregate(ranks: list[RankResult]) -> dict[str, Any]:
    """Per operation: each rank's GB/s and µs, and their mean and minimum over ranks."""
    out: dict[str, Any] = {}
    for op in OPS:
        figures = [r.bench.ops[op] for r in ranks if r.bench is not None]
        if not figures:
            continue
        out[op] = {
            "ranks": len(figures),
            "bytes_per_rank": [f.bytes for f in figures],
            "kernel_gbps_per_rank": [f.kernel_gbps for f in figures],
            "kernel_gbps_mean": statistics.fmean(f.kernel_gbps for f in figures),
            "kernel_gbps_min": min(f.kernel_gbps for f in figures),
            "kernel_mean_gbps_mean": statistics.fmean(f.kernel_mean_gbps for f in figures),
            "kernel_us_median_per_rank": [f.kernel_us.median for f in figures],
            "kernel_us_spread_per_rank": [[f.kernel_us.p10, f.kernel_us.p90] for f in figures],
            "call_gbps_mean": statistics.fmean(f.call_gbps for f in figures),
            "call_us_median_per_rank": [f.call_us.median for f in figures],
        }
    return out


def ratios(summary: dict[str, Any], upstream: UpstreamResult | None) -> dict[str, Any]:
    """Smoke over test_ep, same byte count and the same statistic (bytes / mean kernel time)."""
    if upstream is None:
        return {}
    out: dict[str, Any] = {}
    for op, up_op in UPSTREAM_OP.items():
        ref = upstream.first_mode(up_op)
        if op in summary and ref.get("su_gbps"):
            smoke = summary[op]["kernel_mean_gbps_mean"]
            out[op] = {"smoke_gbps": smoke, "test_ep_gbps": ref["su_gbps"], "ratio": smoke / ref["su_gbps"]}
    return out
