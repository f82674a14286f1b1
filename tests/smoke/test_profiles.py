"""The serve plan (epstack.smoke.serving.profiles): parallel sizes, DeepEP V2's per-rank dispatch token
budget (SGLang 0.5.23 refuses to start below it), the a2a backend, and what is refused."""

from __future__ import annotations

import pytest

from epstack.errors import BadInput
from epstack.smoke.serving.profiles import PROFILES, ServePlan, serve_plan


@pytest.mark.parametrize(
    ("profile", "nodes", "gpus", "sizes"),
    [
        # DP attention: each of the 16 ranks takes its own 4096-token chunk, scattered to itself only.
        ("deepseek-v3", 2, 8, (16, 65536, 4096, 128, 4096)),
        # TP attention: one 8192-token chunk scattered over 16 ranks, below the decode graph's 256.
        ("qwen3-30b-a3b", 2, 8, (1, 8192, 512, 256, 512)),
        ("qwen3-30b-a3b", 4, 8, (1, 8192, 256, 256, 256)),
        ("qwen3-30b-a3b", 1, 8, (1, 8192, 1024, 256, 1024)),
        ("tiny", 1, 8, (1, 512, 64, 8, 64)),
        ("tiny", 1, 1, (1, 512, 512, 8, 512)),
    ],
)
def test_dispatch_budget_covers_the_prefill_chunk_and_the_decode_graph(
    profile: str, nodes: int, gpus: int, sizes: tuple[int, int, int, int, int]
) -> None:
    """sizes: attention-DP width, --chunked-prefill-size, prefill and decode tokens a rank, budget."""
    plan = serve_plan(profile, nodes=nodes, gpus_per_node=gpus)
    assert plan.world == plan.tp_size == plan.ep_size == nodes * gpus
    assert sizes == (
        plan.attn_dp_size,
        plan.chunked_prefill_size,
        plan.prefill_tokens_per_rank,
        plan.decode_tokens_per_rank,
        plan.dispatch_budget,
    )


def test_a_prefill_chunk_that_does_not_split_evenly_rounds_up() -> None:
    """Every rank's share fits: 8192 tokens over 3 ranks is 2731 a rank, not 2730."""
    plan = ServePlan(profile=PROFILES["qwen3-30b-a3b"], nodes=3, gpus_per_node=1, a2a="deepep_v2",
                     model_path="Qwen/Qwen3-30B-A3B")  # fmt: skip
    assert plan.prefill_tokens_per_rank == 2731 and plan.dispatch_budget == 2731


@pytest.mark.parametrize(("nodes", "mode"), [(1, "direct"), (2, "hybrid"), (4, "hybrid")])
def test_deepep_v2_crosses_nodes_in_hybrid_mode(nodes: int, mode: str) -> None:
    assert serve_plan("deepseek-v3", nodes=nodes, gpus_per_node=8).deepep_v2_mode == mode


@pytest.mark.parametrize(
    ("a2a", "chosen"), [(None, "deepep_v2"), ("deepep_v2", "deepep_v2"), ("deepep", "deepep")]
)
def test_the_a2a_backend_is_deepep_v2_unless_v1_is_asked_for(a2a: str | None, chosen: str) -> None:
    plan = serve_plan("tiny", nodes=1, gpus_per_node=8, **({"a2a": a2a} if a2a else {}))
    assert plan.a2a == chosen


def test_the_model_path_is_the_profiles_unless_given() -> None:
    assert serve_plan("deepseek-v3", nodes=2, gpus_per_node=8).model_path == "deepseek-ai/DeepSeek-V3"
    given = serve_plan("deepseek-v3", nodes=2, gpus_per_node=8, model_path="/models/DeepSeek-V3")
    assert given.model_path == "/models/DeepSeek-V3" and given.profile is PROFILES["deepseek-v3"]


def _refused(profile: str, **kwargs: object) -> str:
    with pytest.raises(BadInput) as info:
        serve_plan(profile, **kwargs)  # type: ignore[arg-type]
    return str(info.value)


def test_an_unknown_profile_lists_the_profiles() -> None:
    assert _refused("llama", nodes=1, gpus_per_node=8) == (
        "--profile llama: not a profile; fix: use one of deepseek-v3, qwen3-30b-a3b, tiny"
    )


def test_an_unknown_a2a_backend_is_refused() -> None:
    assert _refused("tiny", nodes=1, gpus_per_node=8, a2a="mooncake") == (
        "--a2a mooncake: fix: use deepep_v2 (DeepEP V2, ElasticBuffer) or deepep (V1)"
    )


@pytest.mark.parametrize(
    ("profile", "nodes", "gpus", "ranks"), [("tiny", 3, 8, 24), ("qwen3-30b-a3b", 1, 6, 6)]
)
def test_experts_must_split_evenly_over_the_ep_ranks(profile: str, nodes: int, gpus: int, ranks: int) -> None:
    experts = PROFILES[profile].shape.num_experts
    assert _refused(profile, nodes=nodes, gpus_per_node=gpus) == (
        f"--profile {profile}: {experts} experts do not split over {ranks} EP ranks ({nodes} nodes x "
        f"{gpus} GPUs); fix: use a rank count that divides {experts}"
    )
