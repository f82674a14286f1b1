"""Reference routing and verification against hand-checked cases (CPU torch; skipped without it).

Layout used below: 2 ranks, 4 experts (0 and 1 on rank 0, 2 and 3 on rank 1), top-2, and
num_max_tokens_per_rank 8, so rank 1's token t has the global id 8 + t."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
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
    reference_dispatch,
    send_plan,
)
from tests.conftest import REPO  # noqa: E402
from tests.smoke.simulate import simulate_dispatch  # noqa: E402

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
from tests.smoke.simulate import simulate_dispatch

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
    # A rank that exits while gloo's threads still serve the others aborts ("terminate called
    # without an active exception"): all ranks leave together, through the group's own teardown.
    dist.barrier()
    dist.destroy_process_group()

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


class _AllToAll:
    """torch.distributed.all_to_all_single for ranks run as threads of one process: `group` carries the
    rank, and each rank receives, in rank order, the chunk every rank addressed to it."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.barrier = threading.Barrier(world, timeout=10)
        self.sent: dict[int, list[Tensor]] = {}

    def __call__(
        self,
        out: Tensor,
        inp: Tensor,
        output_split_sizes: list[int] | None = None,
        input_split_sizes: list[int] | None = None,
        group: object = None,
    ) -> None:
        rank = int(group)  # type: ignore[call-overload]
        assert inp.dtype in (torch.uint8, torch.int64, torch.float32), inp.dtype  # bytes, not bf16 or fp8
        splits = input_split_sizes or [inp.shape[0] // self.world] * self.world
        self.sent[rank] = list(inp.split(splits))
        self.barrier.wait()
        got = torch.cat([self.sent[src][rank] for src in range(self.world)])
        assert output_split_sizes is None or list(output_split_sizes) == [
            int(self.sent[src][rank].shape[0]) for src in range(self.world)
        ]
        assert out.shape == got.shape and out.dtype == got.dtype, (out.shape, got.shape)
        out.copy_(got)
        self.barrier.wait()


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_the_all_to_all_reference_receives_what_the_simulation_computes(
    fp8: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """reference_dispatch on 3 ranks (threads, all_to_all_single between them) receives on every rank
    exactly the single-process simulation: tokens, scales, local top-k, weights and global ids."""
    world, nmax = 3, 64
    routings = [
        make_routing(
            num_tokens=20 - r, rank=r, num_experts=12, num_topk=3, num_ranks=world, seed=5, masked_ratio=0.2
        )
        for r in range(world)
    ]
    xs = [
        torch.randn(20 - r, 256, generator=torch.Generator().manual_seed(r)).bfloat16() for r in range(world)
    ]
    q = [cast_to_fp8(x) for x in xs]
    sim = simulate_dispatch(
        [a.view(torch.uint8) for a, _ in q] if fp8 else xs,
        routings,
        num_experts=12,
        num_max_tokens_per_rank=nmax,
        sfs=[s for _, s in q] if fp8 else None,
    )

    exchange = _AllToAll(world)
    monkeypatch.setattr(torch.distributed, "all_to_all_single", exchange)

    def dispatch(rank: int) -> Received:
        try:
            return dispatch_as(rank)
        except BaseException:
            exchange.barrier.abort()  # the other ranks stop waiting for this one
            raise

    def dispatch_as(rank: int) -> Received:
        return reference_dispatch(
            q[rank][0] if fp8 else xs[rank],
            q[rank][1] if fp8 else None,
            routings[rank],
            rank=rank,
            world=world,
            num_experts=12,
            num_max_tokens_per_rank=nmax,
            group=rank,
        )

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the ranks are the threads: no intra-op pool under them
    try:
        with ThreadPoolExecutor(world) as pool:
            got = list(pool.map(dispatch, range(world)))
    finally:
        torch.set_num_threads(threads)
    for rank in range(world):
        mine, ref = got[rank], sim[rank]
        assert mine.x.dtype == (torch.uint8 if fp8 else torch.bfloat16)
        assert torch.equal(mine.x, ref.x) and torch.equal(mine.src, ref.src)
        assert torch.equal(mine.topk_idx, ref.topk_idx) and torch.equal(mine.topk_weights, ref.topk_weights)
        assert (mine.sf is None) == (not fp8) and (not fp8 or torch.equal(mine.sf, ref.sf))
        assert (
            first_dispatch_mismatch(
                mine, ref, rank=rank, experts_per_rank=12 // world, num_max_tokens_per_rank=nmax
            )
            is None
        )


def _mismatch(got: Received, ref: Received) -> str:
    bad = first_dispatch_mismatch(got, ref, rank=1, experts_per_rank=2, num_max_tokens_per_rank=NMAX)
    assert bad is not None
    return str(bad)


def test_a_token_routed_here_but_not_received_is_named_with_the_counts() -> None:
    ref = _received()[1]  # rank 1 holds ids [0, 2, 9]; token 2 of rank 0 has local experts [1, 0]
    assert _mismatch(_shuffled(ref, [2, 0]), ref) == (
        "rank 1: token 2 of rank 0, expert 3: routed here but not received "
        "(received 2 tokens, reference 3: 0 received twice, 1 missing, 0 not routed here)"
    )


def test_a_token_received_but_routed_elsewhere_has_no_expert() -> None:
    ref = _received()[1]
    extra = _shuffled(ref, [0, 1, 2, 0], src=torch.tensor([0, 2, 9, 1]))  # token 1 of rank 0: rank 0 only
    bad = first_dispatch_mismatch(extra, ref, rank=1, experts_per_rank=2, num_max_tokens_per_rank=NMAX)
    assert bad is not None and (bad.rank, bad.src_rank, bad.token, bad.expert) == (1, 0, 1, -1)
    assert str(bad) == (
        "rank 1: token 1 of rank 0: received but none of its experts is here "
        "(received 4 tokens, reference 3: 0 received twice, 0 missing, 1 not routed here)"
    )
    assert _mismatch(_shuffled(ref, [0, 1, 2], src=torch.tensor([0, 2, 10])), ref) == (
        "rank 1: token 1 of rank 1, expert 2: routed here but not received "
        "(received 3 tokens, reference 3: 0 received twice, 1 missing, 1 not routed here)"
    )


def test_a_token_received_twice_is_named_at_its_first_expert_here() -> None:
    ref = _received()[1]  # token 0 of rank 0 has local experts [-1, 0]: global expert 2 on rank 1
    twice = _shuffled(ref, [0, 1, 2, 0], src=torch.tensor([9, 0, 2, 0]))
    assert _mismatch(twice, ref) == (
        "rank 1: token 0 of rank 0, expert 2: received twice "
        "(received 4 tokens, reference 3: 1 received twice, 0 missing, 0 not routed here)"
    )


def test_each_kind_of_difference_names_the_slot_that_differs() -> None:
    ref = _received()[1]
    x = ref.x.clone()
    x[0, 0] = 42  # token 0 of rank 0, whose only slot here is slot 1 (expert 2)
    assert (
        _mismatch(_shuffled(ref, [0, 1, 2], x=x), ref)
        == "rank 1: token 0 of rank 0, expert 2: token data differs"
    )
    assert _mismatch(_shuffled(ref, [0, 1, 2], x=ref.x[:, :1]), ref) == (
        "rank 1: token 0 of rank 0, expert 2: token data differs"
    )
    idx = ref.topk_idx.clone()
    idx[1, 1] = 1  # token 2 of rank 0: slot 1 (expert 2) now says local expert 1
    assert _mismatch(_shuffled(ref, [0, 1, 2], topk_idx=idx), ref) == (
        "rank 1: token 2 of rank 0, expert 2: top-k index differs"
    )
    weights = ref.topk_weights.clone()
    weights[0, 1] = 0.3  # token 0 of rank 0, slot 1: the slot here, after slot 0 that lives on rank 0
    assert _mismatch(_shuffled(ref, [0, 1, 2], topk_weights=weights), ref) == (
        "rank 1: token 0 of rank 0, expert 2: top-k weight differs"
    )
    weights = ref.topk_weights.clone()
    weights[1, 1] = 0.3  # token 2 of rank 0, slot 1 (expert 2), not slot 0 (expert 3)
    assert _mismatch(_shuffled(ref, [0, 1, 2], topk_weights=weights), ref) == (
        "rank 1: token 2 of rank 0, expert 2: top-k weight differs"
    )


def test_fp8_scales_are_compared_after_the_data() -> None:
    scales = torch.tensor([[1.0], [2.0], [3.0]])
    ref = replace(_received()[1], sf=scales)
    perm = [2, 0, 1]
    same = _shuffled(ref, perm, sf=scales[torch.tensor(perm)])
    assert (
        first_dispatch_mismatch(same, ref, rank=1, experts_per_rank=2, num_max_tokens_per_rank=NMAX) is None
    )
    sf = scales[torch.tensor(perm)].clone()
    sf[0, 0] = 9.0  # received first: id 9, rank 1's own token 1, local experts [0, -1]
    assert (
        _mismatch(_shuffled(ref, perm, sf=sf), ref)
        == "rank 1: token 1 of rank 1, expert 2: fp8 scales differ"
    )


def test_combine_mismatches_name_the_token_column_and_values() -> None:
    expected = expected_combine(X0, R0.topk_idx, num_experts=4, num_ranks=2)
    got = expected.clone()
    got[1, 1] = 5.0
    assert str(first_combine_mismatch(got, expected, R0.topk_idx, rank=0, exact=False)) == (
        "rank 0: token 1 of rank 0, expert 1: combined value at column 1 is 5.0, expected 4.0"
    )
    nowhere = expected_combine(X1, R1.topk_idx, num_experts=4, num_ranks=2)
    got = nowhere.clone()
    got[0, 0] = 1.0  # rank 1's token 0 went nowhere: no expert to name
    bad = first_combine_mismatch(got, nowhere, R1.topk_idx, rank=1, exact=True)
    assert bad is not None and bad.expert == -1
    assert str(bad) == "rank 1: token 0 of rank 1: combined value at column 0 is 1.0, expected 0.0"
    bad = first_combine_mismatch(expected[:2], expected, R0.topk_idx, rank=0, exact=True)
    assert bad is not None and (bad.rank, bad.src_rank, bad.token, bad.expert) == (0, 0, 0, -1)
    assert str(bad) == "rank 0: token 0 of rank 0: combined shape (2, 2), expected (3, 2)"
    tiny = nowhere.clone()
    tiny[0, 1] = 5e-4  # within the absolute tolerance of an expected 0
    assert first_combine_mismatch(tiny, nowhere, R1.topk_idx, rank=1, exact=False) is None
    assert first_combine_mismatch(tiny, nowhere, R1.topk_idx, rank=1, exact=True) is not None
    one_step = expected.float().clone()
    one_step[0, 0] = 3.0 + 2**-6  # the next bf16 after 3.0 is 3 + 2**-6
    assert first_combine_mismatch(one_step.bfloat16(), expected, R0.topk_idx, rank=0, exact=False) is None
    bad = first_combine_mismatch(one_step.bfloat16(), expected, R0.topk_idx, rank=0, exact=True)
    assert (
        str(bad)
        == "rank 0: token 0 of rank 0, expert 0: combined value at column 0 is 3.015625, expected 3.0"
    )
    far = expected.float().clone()
    far[0, 0] = 3.0 + 2**-4
    assert first_combine_mismatch(far.bfloat16(), expected, R0.topk_idx, rank=0, exact=False) is not None


def test_fp8_cast_scales_each_128_columns_by_their_largest_magnitude() -> None:
    x = torch.zeros(2, 256)
    x[0, :4] = torch.tensor([2.0, 1.0, 0.5, -2.0])  # block 0 of row 0: amax 2, so times 224
    x[0, 128] = 448.0  # block 1 of row 0: amax 448, times 1
    q, sf = cast_to_fp8(x.bfloat16())
    assert q.float()[0, :4].tolist() == [448.0, 224.0, 112.0, -448.0] and q.float()[0, 128] == 448.0
    assert torch.allclose(
        sf, torch.tensor([[2 / 448, 1.0], [1e-4 / 448, 1e-4 / 448]]), rtol=1e-6, atol=0
    )  # zeros: the floor
    assert bool((q.float()[1] == 0).all())
    assert dequantize(q, sf).dtype == torch.bfloat16
    assert torch.equal(dequantize(q, sf), x.bfloat16()) and torch.equal(
        dequantize(q.view(torch.uint8), sf), x.bfloat16()
    )


GOLDEN_IDX = ([[7, 2], [5, 2], [7, 3], [2, 4]], [[0, -1], [3, -1], [7, -1], [-1, 0]])
GOLDEN_WEIGHTS = (
    [[0.818092, 0.679527], [0.616785, 0.979582], [0.378548, 0.734718], [0.296663, 0.624674]],
    [[0.914156, 0.0], [0.797260, 0.0], [0.382928, 0.0], [0.0, 0.607853]],
)


def test_the_routing_of_a_seed_is_fixed() -> None:
    """A seed names one routing: runs of the same seed, and the committed results, route alike."""
    kw = {"num_tokens": 4, "num_experts": 8, "num_topk": 2, "num_ranks": 2, "seed": 1}
    plain = make_routing(rank=0, **kw)
    assert plain.topk_idx.dtype == torch.int64 and plain.topk_weights.dtype == torch.float32
    hot = make_routing(rank=1, masked_ratio=0.5, hot_rank_ratio=8.0, **kw)
    assert (plain.topk_idx.tolist(), hot.topk_idx.tolist()) == GOLDEN_IDX
    for got, golden in zip((plain.topk_weights, hot.topk_weights), GOLDEN_WEIGHTS, strict=True):
        assert torch.allclose(got, torch.tensor(golden), rtol=0, atol=1e-6)


def test_the_expected_combine_stays_on_the_tokens_device() -> None:
    """In the worker the tokens are on a GPU; here the meta device stands in for one."""
    total = expected_combine(X0.to("meta"), R0.topk_idx.to("meta"), num_experts=4, num_ranks=2)
    assert total.device.type == "meta" and total.dtype == torch.bfloat16 and total.shape == X0.shape
