"""The vLLM launch command and environment for one node of a serve job (vLLM 0.33.0's flags): the one
source the serve smoke (`epstack smoke serve --engine vllm`) and the cluster jobs (`cluster render
--engine vllm`) share; tests/cluster/test_vllm_parser.py runs vLLM's own parser over every command.

vLLM serves a MoE model with DP attention and expert parallel: `--data-parallel-size` ranks of
`--tensor-parallel-size 1`, `--enable-expert-parallel`, the all-to-all `--all2all-backend deepep_v2`
(DeepEP V2's ElasticBuffer). Its all-to-all kernels run only when data parallel is above 1
(`use_all2all_kernels`, fused_moe/config.py): on one GPU nothing goes through DeepEP. Across nodes every
node runs the same command with `--nnodes`, `--node-rank` (vLLM infers each node's first DP rank,
node_rank x GPUs per node) and node 0's `--data-parallel-address` and `--data-parallel-rpc-port`; the
other nodes run `--headless` (engines only, no API server). The server's port, health and metrics paths
(/health, Prometheus at /metrics, always on) are the SGLang jobs' (epstack.smoke.serving.command).
"""

from __future__ import annotations

from epstack.smoke.serving.command import DIST_INIT_PORT, HTTP_PORT
from epstack.smoke.serving.profiles import ServePlan

VLLM_ENTRY: tuple[str, ...] = ("vllm", "serve")
HEADLESS = "--headless"  # what every node but node 0 adds
# vLLM's variables (vllm/envs.py) for DeepEP V2's ElasticBuffer: hybrid mode (GIN between nodes) or
# direct (one NVLink domain), as SGLang's --deepep-v2-mode is set from the same plan.
HYBRID_ENV = "VLLM_DEEPEP_V2_ALLOW_HYBRID_MODE"


def vllm_args(plan: ServePlan, *, node_rank: str, leader: str, worker: str = "") -> list[str]:
    """The arguments after VLLM_ENTRY. node_rank and leader may be expressions a platform expands;
    `worker`: what a node other than node 0 adds (HEADLESS, an expression that expands to it there, or
    "" on node 0 and on one node)."""
    args = [plan.model_path]
    if plan.model_revision:
        args += ["--revision", plan.model_revision]
    if plan.profile.trust_remote_code:
        args.append("--trust-remote-code")
    args += ["--tensor-parallel-size", "1", "--data-parallel-size", str(plan.world)]
    args += ["--data-parallel-size-local", str(plan.gpus_per_node)]
    if plan.a2a == "deepep_v2":
        args += ["--enable-expert-parallel", "--all2all-backend", "deepep_v2"]
    args += ["--max-num-batched-tokens", str(plan.profile.chunk_per_dp_rank)]
    args += ["--max-cudagraph-capture-size", str(plan.profile.decode_graph_bs)]
    if plan.nodes > 1:
        args += ["--nnodes", str(plan.nodes), "--node-rank", node_rank]
        args += ["--data-parallel-address", leader, "--data-parallel-rpc-port", str(DIST_INIT_PORT)]
        args += [worker] if worker else []
    args += ["--host", "0.0.0.0", "--port", str(HTTP_PORT)]
    return args


def vllm_command(plan: ServePlan, *, node_rank: str, leader: str, worker: str = "") -> list[str]:
    """A node's command: `vllm serve` and the plan's arguments."""
    return [*VLLM_ENTRY, *vllm_args(plan, node_rank=node_rank, leader=leader, worker=worker)]


def vllm_env(plan: ServePlan) -> dict[str, str]:
    """DeepEP V2's mode from the same plan as the flags: hybrid across nodes, direct in one."""
    if plan.a2a != "deepep_v2" or plan.world == 1:
        return {}
    return {HYBRID_ENV: "1" if plan.nodes > 1 else "0"}


def all_to_all_ran(plan: ServePlan) -> bool:
    """Whether vLLM moves tokens through its all-to-all (DeepEP V2) at all: data parallel above 1."""
    return plan.a2a == "deepep_v2" and plan.world > 1
