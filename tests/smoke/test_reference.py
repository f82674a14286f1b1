"""Reference routing and verification against hand-checked cases (CPU torch; skipped without it).

Layout used below: 2 ranks, 4 experts (0 and 1 on rank 0, 2 and 3 on rank 1), top-2, and
num_max_tokens_per_rank 8, so rank 1's token t has the global id 8 + t."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from torch import Tensor

torch = pytest.importorskip("torch")

from epstack.smoke.reference import (  # noqa: E402
    Received,
    Routing,
    cast_to_fp8,
    combine_input,
    dequantize,
    expected_combine,
    first_combine_mismatch,
    first_dispatch_mismatch,
    localize,
    make_routing,
    send_plan,
    simulate_dispatch,
)
from tests.conftest import REPO  # noqa: E402

NMAX = 8
R0 = Routing(
    topk_idx=torch.tensor([[0, 2], [1, -1], [3, 2]]),
    topk_weights=torch.tensor([[0.5, 0.25], [1.0, 0.0], [0.75, 0.125]]),
)
R1 = Routing(topk_idx=torch.tensor([[-1, -1], [2, 0]]), topk_weights=torch.tensor([[0.0, 0.0], [0.5, 0.5]]))
X0 = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=torch.bfloat16)
X1 = torch.tensor([[7.0, 8.0], [9.0, 10.0]], dtype=torch.bfloat16)


def test_send_plan_and_localize() -> None:
    plan = send_plan(R0.topk_idx, num_experts=4, num_ranks=2)
    assert [p.tolist() for p in plan] == [[0, 1], [0, 2]]
    assert [p.tolist() for p in send_plan(R1.topk_idx, num_experts=4, num_ranks=2)] == [[1], [1]]
    assert localize(torch.tensor([[3, 2, 1, -1]]), rank=1, experts_per_rank=2).tolist() == [[1, 0, -1, -1]]


def _received() -> list[Received]:
    return simulate_dispatch([X0, X1], [R0, R1], num_experts=4, num_max_tokens_per_rank=NMAX)


def test_simulated_dispatch_by_hand() -> None:
    rank0, rank1 = _received()
    assert rank0.src.tolist() == [0, 1, 9]
    assert rank0.topk_idx.tolist() == [[0, -1], [1, -1], [-1, 0]]
    assert rank0.x.float().tolist() == [[1, 2], [3, 4], [9, 10]]
    assert rank1.src.tolist() == [0, 2, 9]
    assert rank1.topk_idx.tolist() == [[-1, 0], [1, 0], [0, -1]]
    assert rank1.topk_weights.tolist() == [[0.5, 0.25], [0.75, 0.125], [0.5, 0.5]]


def test_expected_combine_by_hand() -> None:
    # rank r returns x * (r + 1): token 0 of rank 0 went to both ranks -> 3x, token 1 to rank 0
    # only -> x, token 2 to rank 1 only -> 2x; rank 1's token 0 went nowhere -> 0.
    assert expected_combine(X0, R0.topk_idx, num_experts=4, num_ranks=2).float().tolist() == [
        [3, 6],
        [3, 4],
        [10, 12],
    ]
    assert expected_combine(X1, R1.topk_idx, num_experts=4, num_ranks=2).float().tolist() == [
        [0, 0],
        [27, 30],
    ]
    assert combine_input(X1, rank=1).float().tolist() == [[14, 16], [18, 20]]


def _shuffled(r: Received, perm: list[int], **change: Tensor) -> Received:
    p = torch.tensor(perm)
    shuffled = Received(
        x=r.x[p], sf=None, topk_idx=r.topk_idx[p], topk_weights=r.topk_weights[p], src=r.src[p]
    )
    return replace(shuffled, **change)


def test_any_receive_order_passes() -> None:
    ref = _received()[1]
    got = _shuffled(ref, [2, 0, 1])
    assert first_dispatch_mismatch(got, ref, rank=1, experts_per_rank=2, num_max_tokens_per_rank=NMAX) is None


def test_mismatches_name_rank_token_expert() -> None:
    ref = _received()[1]  # rank 1 holds ids [0, 2, 9]
    weights = ref.topk_weights.clone()
    weights[1, 0] = 0.7  # token 2 of rank 0, slot 0 = local expert 1 = global expert 3
    bad = first_dispatch_mismatch(
        _shuffled(ref, [0, 1, 2], topk_weights=weights),
        ref,
        rank=1,
        experts_per_rank=2,
        num_max_tokens_per_rank=NMAX,
    )
    assert bad is not None
    assert (bad.rank, bad.src_rank, bad.token, bad.expert) == (1, 0, 2, 3)
    assert "weight" in bad.what
    # a weight on a slot that lives on the other rank is not compared
    weights = ref.topk_weights.clone()
    weights[0, 0] = 9.0  # token 0's slot 0 is expert 0, on rank 0
    assert (
        first_dispatch_mismatch(
            _shuffled(ref, [0, 1, 2], topk_weights=weights),
            ref,
            rank=1,
            experts_per_rank=2,
            num_max_tokens_per_rank=NMAX,
        )
        is None
    )
    x = ref.x.clone()
    x[2, 1] = 0  # rank 1's own token 1 (id 9)
    bad = first_dispatch_mismatch(
        _shuffled(ref, [0, 1, 2], x=x), ref, rank=1, experts_per_rank=2, num_max_tokens_per_rank=NMAX
    )
    assert bad is not None and (bad.src_rank, bad.token, bad.expert) == (1, 1, 2)
    src = ref.src.clone()
    src[1] = 0  # token 0 twice, token 2 missing
    bad = first_dispatch_mismatch(
        _shuffled(ref, [0, 1, 2], src=src), ref, rank=1, experts_per_rank=2, num_max_tokens_per_rank=NMAX
    )
    assert bad is not None and "received twice" in bad.what and "1 missing" in bad.what


def test_combine_compare() -> None:
    expected = expected_combine(X0, R0.topk_idx, num_experts=4, num_ranks=2)
    assert first_combine_mismatch(expected.clone(), expected, R0.topk_idx, rank=0, exact=True) is None
    got = expected.clone()
    got[2, 1] = 11.0
    bad = first_combine_mismatch(got, expected, R0.topk_idx, rank=0, exact=True)
    assert bad is not None and (bad.token, bad.expert) == (2, 3) and "column 1" in bad.what
    near = expected.float().clone()
    near[0, 0] *= 1 + 2**-9
    assert first_combine_mismatch(near.bfloat16(), expected, R0.topk_idx, rank=0, exact=False) is None


def test_routing_is_seeded_masked_and_unbalanced() -> None:
    kw = {"num_tokens": 2000, "num_experts": 64, "num_topk": 8, "num_ranks": 4}
    a = make_routing(seed=1, rank=0, masked_ratio=0.25, **kw)
    assert torch.equal(a.topk_idx, make_routing(seed=1, rank=0, masked_ratio=0.25, **kw).topk_idx)
    assert not torch.equal(a.topk_idx, make_routing(seed=1, rank=1, masked_ratio=0.25, **kw).topk_idx)
    masked = (a.topk_idx < 0).float().mean().item()
    assert 0.2 < masked < 0.3 and bool((a.topk_weights[a.topk_idx < 0] == 0).all())
    valid = a.topk_idx.masked_fill(a.topk_idx < 0, 10**6)
    rows = valid.sort(dim=1).values
    assert bool(((rows[:, 1:] != rows[:, :-1]) | (rows[:, 1:] == 10**6)).all())  # distinct
    hot = make_routing(seed=1, rank=0, hot_rank_ratio=4.0, **kw).topk_idx
    share = (hot // 16 == 0).float().mean().item()  # rank 0 holds experts 0-15
    assert share > 0.45  # uniform would be 0.25


def test_fp8_roundtrip() -> None:
    x = torch.randn(4, 256, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    q, sf = cast_to_fp8(x)
    assert q.dtype == torch.float8_e4m3fn and sf.shape == (4, 2)
    back = dequantize(q.view(torch.uint8), sf)
    assert torch.allclose(back.float(), x.float(), rtol=0.07, atol=0.02)


DIST_SCRIPT = """
import sys, torch, torch.distributed as dist
sys.path.insert(0, {repo!r})
from epstack.smoke.reference import *

def run(rank, world, init):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    kw = dict(num_experts=16, num_topk=4, num_ranks=world, seed=3, masked_ratio=0.1)
    routings = [make_routing(num_tokens=50 - r, rank=r, **kw) for r in range(world)]
    xs = [torch.randn(50 - r, 256, generator=torch.Generator().manual_seed(r)).bfloat16()
          for r in range(world)]
    q = [cast_to_fp8(x) for x in xs]
    for fp8 in (False, True):
        sim = simulate_dispatch([a.view(torch.uint8) for a, _ in q] if fp8 else xs, routings,
                                num_experts=16, num_max_tokens_per_rank=64,
                                sfs=[s for _, s in q] if fp8 else None)[rank]
        got = reference_dispatch(q[rank][0] if fp8 else xs[rank], q[rank][1] if fp8 else None,
                                 routings[rank], rank=rank, world=world, num_experts=16,
                                 num_max_tokens_per_rank=64)
        bad = first_dispatch_mismatch(got, sim, rank=rank, experts_per_rank=16 // world,
                                      num_max_tokens_per_rank=64)
        assert bad is None, str(bad)
        assert got.src.unique().numel() == got.src.numel() > 0
    print(f"rank {{rank}} ok", flush=True)

if __name__ == "__main__":
    torch.multiprocessing.spawn(run, args=(3, "file://" + sys.argv[1]), nprocs=3)
"""


def test_all_to_all_reference_matches_the_simulation(tmp_path: Path) -> None:
    """reference_dispatch moves tokens with torch.distributed.all_to_all_single (gloo, 3 ranks,
    real processes); every rank's receive equals the single-process simulation."""
    script = tmp_path / "dist_ref.py"
    script.write_text(textwrap.dedent(DIST_SCRIPT.format(repo=str(REPO))))
    out = subprocess.run(
        [sys.executable, "-W", "ignore", str(script), str(tmp_path / "store")],
        # gloo would bind the host name's address; the ranks talk over loopback only.
        env={**os.environ, "GLOO_SOCKET_IFNAME": "lo"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    # Three processes share the pipe: their lines can interleave, so find each rank's word.
    assert sorted(re.findall(r"rank (\d) ok", out.stdout)) == ["0", "1", "2"]
