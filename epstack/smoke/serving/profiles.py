"""Model profiles and the serve plan: parallel sizes and DeepEP V2's per-rank dispatch token budget.

The budget follows SGLang 0.5.23's own check (`validate_deepep_v2_dispatch_token_budget` in
sglang/srt/arg_groups/moe_hook.py), which refuses to start when
SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK (default 128) is below either
  - the prefill chunk one rank dispatches: chunked_prefill_size // attn_dp_size (SGLang divides the
    flag by the attention-DP width), split over the tp_size // attn_dp_size ranks it is scattered to;
  - the decode CUDA graph's batch: --cuda-graph-max-bs-decode (x1 token per request, no speculation).
Both flags are passed explicitly, so the budget never depends on SGLang's memory-based defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from epstack.errors import BadInput
from epstack.smoke.config import PRESETS, Shape

A2A = Literal["deepep_v2", "deepep", "none"]
# What a serve job may use; "none" (no all-to-all, experts reduced by TP) only as the serve smoke's
# reference run (ServePlan.without_deepep).
A2A_BACKENDS: tuple[A2A, ...] = ("deepep_v2", "deepep")
# A server's part in prefill/decode disaggregation (epstack.cluster.roles); "" serves both.
Role = Literal["", "prefill", "decode"]


@dataclass(frozen=True, kw_only=True)
class Profile:
    name: str
    model_path: str
    shape: Shape  # the MoE shape, shared with `epstack smoke elastic --profile`
    attention_dp: bool  # DP attention across every rank (MLA models), else TP attention
    chunk_per_dp_rank: int  # prefill tokens one attention-DP rank takes per chunk
    decode_graph_bs: int  # --cuda-graph-max-bs-decode
    trust_remote_code: bool
    # epstack writes the model folder itself (epstack.smoke.serving.tinymodel): config, tokenizer and
    # seeded weights at the config's init scale; nothing is fetched
    generated: bool
    # A pod's ephemeral storage for the HF cache when no other model storage is given: the weights
    # on the hub and room to spare.
    disk: str


PROFILES: dict[str, Profile] = {
    "deepseek-v3": Profile(
        name="deepseek-v3",
        model_path="deepseek-ai/DeepSeek-V3",
        shape=PRESETS["deepseek-v3"],
        attention_dp=True,
        chunk_per_dp_rank=4096,
        decode_graph_bs=128,
        trust_remote_code=True,
        generated=False,
        disk="800Gi",  # 163 FP8 safetensors shards, 689 GB (642 GiB)
    ),
    "qwen3-30b-a3b": Profile(
        name="qwen3-30b-a3b",
        model_path="Qwen/Qwen3-30B-A3B",
        shape=PRESETS["qwen3-30b-a3b"],
        attention_dp=False,
        chunk_per_dp_rank=8192,
        decode_graph_bs=256,
        trust_remote_code=False,
        generated=False,
        disk="100Gi",  # BF16 weights, 61 GB
    ),
    # Qwen3-30B-A3B's MoE layer in a 2-layer model (epstack/smoke/serving/tiny-qwen3-moe.json) whose
    # weights epstack draws from a seed (`epstack smoke serve` into its cache; a cluster job into its model
    # volume before the servers start): serving proven with no hub. Its path is where a cluster job has it.
    "tiny": Profile(
        name="tiny",
        model_path="/models/tiny-qwen3-moe",
        shape=PRESETS["qwen3-30b-a3b"],
        attention_dp=False,
        chunk_per_dp_rank=512,
        decode_graph_bs=8,
        trust_remote_code=False,
        generated=True,
        disk="8Gi",  # 3.48 GiB of weights, and room for a second copy while one replaces the other
    ),
}


@dataclass(frozen=True, kw_only=True)
class ServePlan:
    profile: Profile
    nodes: int
    gpus_per_node: int
    a2a: A2A
    model_path: str
    model_revision: str | None = None  # a hub commit (or branch) for the weights: --revision
    role: Role = ""
    transfer_engine: str = ""  # the KV cache's transfer engine between the roles (mooncake, nixl)

    def without_deepep(self) -> ServePlan:
        """The same model and layout with --moe-a2a-backend none: the serve smoke's reference."""
        return replace(self, a2a="none")

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def tp_size(self) -> int:
        return self.world

    @property
    def ep_size(self) -> int:
        return self.world

    @property
    def attn_dp_size(self) -> int:
        return self.world if self.profile.attention_dp else 1

    @property
    def chunked_prefill_size(self) -> int:
        """The --chunked-prefill-size flag: SGLang divides it by attn_dp_size again."""
        return self.profile.chunk_per_dp_rank * self.attn_dp_size

    @property
    def prefill_tokens_per_rank(self) -> int:
        per_dp_chunk = self.chunked_prefill_size // self.attn_dp_size
        scatter_ranks = max(1, self.tp_size // self.attn_dp_size)
        return -(-per_dp_chunk // scatter_ranks)

    @property
    def decode_tokens_per_rank(self) -> int:
        return self.profile.decode_graph_bs

    @property
    def dispatch_budget(self) -> int:
        """SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK: covers the prefill chunk and decode graph."""
        return max(self.prefill_tokens_per_rank, self.decode_tokens_per_rank)

    @property
    def deepep_v2_mode(self) -> str:
        """direct: one NVLink domain; hybrid: GIN between nodes."""
        return "hybrid" if self.nodes > 1 else "direct"


def serve_plan(
    profile: str,
    *,
    nodes: int,
    gpus_per_node: int,
    a2a: str = "deepep_v2",
    model_path: str | None = None,
    model_revision: str | None = None,
) -> ServePlan:
    if profile not in PROFILES:
        raise BadInput(f"--profile {profile}: not a profile; fix: use one of {', '.join(PROFILES)}")
    if a2a not in A2A_BACKENDS:
        raise BadInput(f"--a2a {a2a}: fix: use deepep_v2 (DeepEP V2, ElasticBuffer) or deepep (V1)")
    chosen = PROFILES[profile]
    plan = ServePlan(
        profile=chosen,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        a2a="deepep" if a2a == "deepep" else "deepep_v2",
        model_path=model_path or chosen.model_path,
        model_revision=model_revision,
    )
    if chosen.shape.num_experts % plan.ep_size:
        raise BadInput(
            f"--profile {profile}: {chosen.shape.num_experts} experts do not split over "
            f"{plan.ep_size} EP ranks ({nodes} nodes x {gpus_per_node} GPUs); fix: use a rank count "
            f"that divides {chosen.shape.num_experts}"
        )
    return plan
