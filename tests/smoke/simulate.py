"""The tests' oracle for epstack.smoke.reference: every rank's all_to_all played in one process."""

from __future__ import annotations

import torch

from epstack.smoke.reference import Received, Routing, localize, send_plan


def simulate_dispatch(
    xs: list[torch.Tensor],
    routings: list[Routing],
    *,
    num_experts: int,
    num_max_tokens_per_rank: int,
    sfs: list[torch.Tensor] | None = None,
) -> list[Received]:
    """Every rank's reference receive, computed in one process (what all_to_all would give)."""
    num_ranks = len(xs)
    per_rank = num_experts // num_ranks
    plans = [send_plan(r.topk_idx, num_experts=num_experts, num_ranks=num_ranks) for r in routings]
    out = []
    for dst in range(num_ranks):
        parts = [plans[src][dst] for src in range(num_ranks)]
        src_ids = torch.cat(
            [p.to(torch.int64) + src * num_max_tokens_per_rank for src, p in enumerate(parts)]
        )
        topk = torch.cat([routings[s].topk_idx[p] for s, p in enumerate(parts)])
        out.append(
            Received(
                x=torch.cat([xs[s][p] for s, p in enumerate(parts)]),
                sf=torch.cat([sfs[s][p] for s, p in enumerate(parts)]) if sfs else None,
                topk_idx=localize(topk, rank=dst, experts_per_rank=per_rank),
                topk_weights=torch.cat([routings[s].topk_weights[p] for s, p in enumerate(parts)]),
                src=src_ids,
            )
        )
    return out
