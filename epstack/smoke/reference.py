"""Routing and the expected dispatch/combine as plain torch functions; they run on CPU.

The GPU worker moves the reference data with torch.distributed.all_to_all_single using
`send_plan`; the CPU tests check the same functions against hand-made cases and against every rank's
all_to_all played in one process (tests/smoke/simulate.py).

Conventions (DeepEP V2's): a token goes once to each rank that holds at least one of its experts;
the receiver sees top-k indices local to it (expert - rank * experts_per_rank) and -1 for slots on
other ranks; a token's global id is src_rank * num_max_tokens_per_rank + its index.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch  # type: ignore[import-not-found, unused-ignore]
import torch.distributed as dist  # type: ignore[import-not-found, unused-ignore]

FP8_BLOCK = 128


@dataclass(frozen=True, kw_only=True)
class Routing:
    topk_idx: torch.Tensor  # [tokens, topk] int64, -1 = masked slot
    topk_weights: torch.Tensor  # [tokens, topk] float32, 0 where masked


@dataclass(frozen=True, kw_only=True)
class Received:
    """What one rank holds after dispatch, in the reference order (sorted by global id)."""

    x: torch.Tensor  # bf16 [n, hidden], or fp8 viewed as uint8 [n, hidden]
    sf: torch.Tensor | None  # fp32 [n, hidden / 128] scales for fp8
    topk_idx: torch.Tensor  # [n, topk] local expert ids, -1 elsewhere
    topk_weights: torch.Tensor  # [n, topk]
    src: torch.Tensor  # [n] int64 global token ids


@dataclass(frozen=True, kw_only=True)
class Mismatch:
    rank: int  # the rank that holds the wrong value
    src_rank: int  # where the token came from
    token: int  # its index on src_rank
    expert: int  # global expert id involved, -1 when none applies
    what: str

    def __str__(self) -> str:
        return (
            f"rank {self.rank}: token {self.token} of rank {self.src_rank}"
            + (f", expert {self.expert}" if self.expert >= 0 else "")
            + f": {self.what}"
        )


def make_routing(
    *,
    num_tokens: int,
    num_experts: int,
    num_topk: int,
    num_ranks: int,
    seed: int,
    rank: int,
    masked_ratio: float = 0.0,
    hot_rank_ratio: float = 1.0,
) -> Routing:
    """Seeded top-k routing: distinct experts per token, drawn with probabilities proportional to
    `hot_rank_ratio` for rank 0's experts and 1 for the others (Gumbel top-k), then a
    `masked_ratio` share of slots set to -1 (weight 0)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + rank)
    weights = torch.ones(num_experts)
    weights[: num_experts // num_ranks] = hot_rank_ratio
    uniform = torch.rand(num_tokens, num_experts, generator=gen).clamp_min(1e-12)
    scores = weights.log() - (-uniform.log()).log()
    topk_idx = scores.topk(num_topk, dim=1).indices.to(torch.int64)
    topk_weights = torch.rand(num_tokens, num_topk, generator=gen).to(torch.float32)
    if masked_ratio > 0:
        masked = torch.rand(num_tokens, num_topk, generator=gen) < masked_ratio
        topk_idx = topk_idx.masked_fill(masked, -1)
        topk_weights = topk_weights.masked_fill(masked, 0.0)
    return Routing(topk_idx=topk_idx, topk_weights=topk_weights)


def send_plan(topk_idx: torch.Tensor, *, num_experts: int, num_ranks: int) -> list[torch.Tensor]:
    """For each destination rank, the (ascending) indices of the tokens sent to it."""
    per_rank = num_experts // num_ranks
    dst = torch.where(topk_idx >= 0, topk_idx // per_rank, torch.full_like(topk_idx, -1))
    return [(dst == r).any(dim=1).nonzero(as_tuple=True)[0] for r in range(num_ranks)]


def localize(topk_idx: torch.Tensor, *, rank: int, experts_per_rank: int) -> torch.Tensor:
    """Global expert ids -> ids local to `rank`; -1 for experts elsewhere (and for -1)."""
    start = rank * experts_per_rank
    here = (topk_idx >= start) & (topk_idx < start + experts_per_rank)
    return torch.where(here, topk_idx - start, torch.full_like(topk_idx, -1))


def cast_to_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token, per-128-column e4m3 cast: (fp8 [n, hidden], fp32 scales [n, hidden / 128])."""
    n, hidden = x.shape
    blocks = x.float().view(n, hidden // FP8_BLOCK, FP8_BLOCK)
    amax = blocks.abs().amax(dim=2).clamp_min(1e-4)
    fp8 = (blocks * (448.0 / amax).unsqueeze(2)).to(torch.float8_e4m3fn).view(n, hidden)
    return fp8, amax / 448.0


def dequantize(fp8: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
    """fp8 (or its uint8 view) and scales -> bf16."""
    if fp8.dtype == torch.uint8:
        fp8 = fp8.view(torch.float8_e4m3fn)
    n, hidden = fp8.shape
    blocks = fp8.float().view(n, hidden // FP8_BLOCK, FP8_BLOCK) * sf.float().unsqueeze(2)
    return blocks.view(n, hidden).to(torch.bfloat16)


def combine_input(recv_bf16: torch.Tensor, *, rank: int) -> torch.Tensor:
    """What rank `rank` sends back for each token it received: the token times (rank + 1)."""
    return (recv_bf16.float() * (rank + 1)).to(torch.bfloat16)


def expected_combine(
    x_bf16: torch.Tensor, topk_idx: torch.Tensor, *, num_experts: int, num_ranks: int
) -> torch.Tensor:
    """On the source rank: sum over destination ranks r of combine_input(x, rank=r), summed in
    fp32 and rounded once to bf16 (exact whatever the order: the terms share x's mantissa)."""
    per_rank = num_experts // num_ranks
    total = torch.zeros(x_bf16.shape, dtype=torch.float32, device=x_bf16.device)
    for r in range(num_ranks):
        here = ((topk_idx >= r * per_rank) & (topk_idx < (r + 1) * per_rank)).any(dim=1)
        total += combine_input(x_bf16, rank=r).float() * here.unsqueeze(1)
    return total.to(torch.bfloat16)


def reference_dispatch(
    x: torch.Tensor,
    sf: torch.Tensor | None,
    routing: Routing,
    *,
    rank: int,
    world: int,
    num_experts: int,
    num_max_tokens_per_rank: int,
    group: object | None = None,
) -> Received:
    """This rank's reference receive, moved with plain torch.distributed.all_to_all_single.

    Token data travels as bytes (bf16 and fp8 viewed as uint8), so any backend carries it:
    NCCL on the GPUs, gloo in the CPU tests."""
    plan = send_plan(routing.topk_idx, num_experts=num_experts, num_ranks=world)
    order = torch.cat(plan)
    send_counts = [int(p.numel()) for p in plan]
    recv_counts_t = torch.empty(world, dtype=torch.int64, device=x.device)
    dist.all_to_all_single(recv_counts_t, torch.tensor(send_counts, device=x.device), group=group)
    recv_counts = [int(c) for c in recv_counts_t.tolist()]

    def a2a(t: torch.Tensor) -> torch.Tensor:
        wire = t.view(torch.uint8) if t.dtype in (torch.bfloat16, torch.float8_e4m3fn) else t
        out = torch.empty((sum(recv_counts), *wire.shape[1:]), dtype=wire.dtype, device=t.device)
        dist.all_to_all_single(out, wire[order].contiguous(), recv_counts, send_counts, group=group)
        return out.view(t.dtype) if wire is not t else out

    topk = a2a(routing.topk_idx)
    ids = torch.arange(routing.topk_idx.shape[0], dtype=torch.int64, device=x.device)
    return Received(
        x=a2a(x).view(torch.uint8) if x.dtype == torch.float8_e4m3fn else a2a(x),
        sf=a2a(sf) if sf is not None else None,
        topk_idx=localize(topk, rank=rank, experts_per_rank=num_experts // world),
        topk_weights=a2a(routing.topk_weights),
        src=a2a(ids + rank * num_max_tokens_per_rank),
    )


def _first_row(a: torch.Tensor, b: torch.Tensor) -> int | None:
    if a.shape != b.shape:
        return 0
    diff = (a != b).reshape(a.shape[0], -1).any(dim=1)
    rows = diff.nonzero(as_tuple=True)[0]
    return int(rows[0]) if rows.numel() else None


def first_dispatch_mismatch(  # noqa: PLR0911
    got: Received,
    ref: Received,
    *,
    rank: int,
    experts_per_rank: int,
    num_max_tokens_per_rank: int,
) -> Mismatch | None:
    """Compare a rank's DeepEP receive (any order) with the reference; None when identical.

    Checks the set of received tokens, then each token's data (bitwise), top-k ids and the
    weights of the slots on this rank."""

    def where(row: int, what: str, slots: torch.Tensor | None = None) -> Mismatch:
        gid = int(ref.src[row])  # the receive holds as many tokens as the reference by now
        local = ref.topk_idx[row]
        if slots is not None:  # the slots that differ: some do, in the row that differs
            slot = int(slots.nonzero(as_tuple=True)[0][0])
        else:
            valid = (local >= 0).nonzero(as_tuple=True)[0]
            slot = int(valid[0]) if valid.numel() else -1
        lid = int(local[slot]) if slot >= 0 else -1
        return Mismatch(
            rank=rank,
            src_rank=gid // num_max_tokens_per_rank,
            token=gid % num_max_tokens_per_rank,
            expert=lid + rank * experts_per_rank if lid >= 0 else -1,
            what=what,
        )

    order = torch.argsort(got.src, stable=True)
    src = got.src[order]
    dup = (src[1:] == src[:-1]).nonzero(as_tuple=True)[0]
    missing = ref.src[~torch.isin(ref.src, src)]
    extra = src[~torch.isin(src, ref.src)]
    if dup.numel() or missing.numel() or extra.numel() or src.numel() != ref.src.numel():
        counts = (
            f"received {src.numel()} tokens, reference {ref.src.numel()}: "
            f"{dup.numel()} received twice, {missing.numel()} missing, {extra.numel()} not "
            "routed here"
        )
        if dup.numel():
            gid, what = int(src[int(dup[0])]), "received twice"
        elif missing.numel():
            gid, what = int(missing[0]), "routed here but not received"
        else:
            gid, what = int(extra[0]), "received but none of its experts is here"
        hit = (ref.src == gid).nonzero(as_tuple=True)[0]
        if hit.numel():
            return where(int(hit[0]), f"{what} ({counts})")
        return Mismatch(
            rank=rank,
            src_rank=gid // num_max_tokens_per_rank,
            token=gid % num_max_tokens_per_rank,
            expert=-1,
            what=f"{what} ({counts})",
        )
    row = _first_row(got.x[order], ref.x)
    if row is not None:
        return where(row, "token data differs")
    if ref.sf is not None:
        assert got.sf is not None
        row = _first_row(got.sf[order], ref.sf)
        if row is not None:
            return where(row, "fp8 scales differ")
    idx = got.topk_idx[order]
    row = _first_row(idx, ref.topk_idx)
    if row is not None:
        return where(row, "top-k index differs", idx[row] != ref.topk_idx[row])
    mask = ref.topk_idx >= 0
    weights = got.topk_weights[order].masked_fill(~mask, 0)
    ref_weights = ref.topk_weights.masked_fill(~mask, 0)
    row = _first_row(weights, ref_weights)
    if row is not None:
        return where(row, "top-k weight differs", weights[row] != ref_weights[row])
    return None


def first_combine_mismatch(
    got: torch.Tensor,
    expected: torch.Tensor,
    topk_idx: torch.Tensor,
    *,
    rank: int,
    exact: bool,
) -> Mismatch | None:
    """Compare combined tokens with the expected reduction; exact, or within one bf16 step."""
    if got.shape != expected.shape:
        return Mismatch(
            rank=rank,
            src_rank=rank,
            token=0,
            expert=-1,
            what=f"combined shape {tuple(got.shape)}, expected {tuple(expected.shape)}",
        )
    if exact:
        bad = (got != expected).any(dim=1)
    else:
        bad = ~torch.isclose(got.float(), expected.float(), rtol=2**-7, atol=1e-3).all(dim=1)
    rows = bad.nonzero(as_tuple=True)[0]
    if not rows.numel():
        return None
    row = int(rows[0])
    valid = topk_idx[row][topk_idx[row] >= 0]
    col = int((got[row] != expected[row]).nonzero(as_tuple=True)[0][0])
    return Mismatch(
        rank=rank,
        src_rank=rank,
        token=row,
        expert=int(valid[0]) if valid.numel() else -1,
        what=f"combined value at column {col} is {float(got[row, col])}, "
        f"expected {float(expected[row, col])}",
    )
