"""The SGLang launch command and environment for one node of a serve job (SGLang 0.5.23's flags).

`sglang serve --model-type llm` is 0.5.23's recommended entry point (`python -m sglang.launch_server`
now warns); everything after it goes to `sglang.srt.server_args.prepare_server_args`, the parser
tests/cluster/test_sglang_parser.py runs over every command these functions emit. DP attention is
`--attn-dp-size N`: `--enable-dp-attention` with `--dp-size` is deprecated in 0.5.23.
"""

from __future__ import annotations

from epstack.smoke.serving.profiles import ServePlan

SGLANG_ENTRY: tuple[str, ...] = ("sglang", "serve", "--model-type", "llm")
HTTP_PORT = 30000
HEALTH_PATH = "/health"
# --enable-metrics: SGLang's Prometheus metrics at /metrics on the HTTP port (node 0's server).
METRICS_PATH = "/metrics"
DIST_INIT_PORT = 5000
# A prefill server's bootstrap port, which decode servers reach for the KV cache (SGLang's default, written
# out); the router reads it from the prefill pods' BOOTSTRAP_ANNOTATION.
BOOTSTRAP_PORT = 8998

# SGLang's environment variables (sglang/srt/environ.py) for each backend's per-rank token budget.
V2_BUDGET_ENV = "SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK"
V1_BUDGET_ENV = "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"


def sglang_args(plan: ServePlan, *, node_rank: str, leader: str) -> list[str]:
    """The arguments after SGLANG_ENTRY. node_rank and leader may be expressions a platform expands
    ($(LWS_WORKER_INDEX), "$SLURM_NODEID"); leader is node 0's host, without a port."""
    args = ["--model-path", plan.model_path]
    if plan.model_revision:
        args += ["--revision", plan.model_revision]
    if plan.profile.trust_remote_code:
        args.append("--trust-remote-code")
    args += ["--tp-size", str(plan.tp_size), "--ep-size", str(plan.ep_size)]
    if plan.attn_dp_size > 1:
        args += ["--attn-dp-size", str(plan.attn_dp_size)]
    args += ["--moe-a2a-backend", plan.a2a]
    if plan.a2a == "deepep_v2":
        args += ["--deepep-v2-mode", plan.deepep_v2_mode]
    elif plan.a2a == "deepep":
        args += ["--deepep-mode", "auto"]
    if plan.role:
        args += [
            "--disaggregation-mode",
            plan.role,
            "--disaggregation-transfer-backend",
            plan.transfer_engine,
        ]
        if plan.role == "prefill":
            args += ["--disaggregation-bootstrap-port", str(BOOTSTRAP_PORT)]
    args += [
        "--chunked-prefill-size",
        str(plan.chunked_prefill_size),
        "--cuda-graph-max-bs-decode",
        str(plan.profile.decode_graph_bs),
    ]
    if plan.nodes > 1:
        args += ["--nnodes", str(plan.nodes), "--node-rank", node_rank]
        args += ["--dist-init-addr", f"{leader}:{DIST_INIT_PORT}"]
    args += ["--host", "0.0.0.0", "--port", str(HTTP_PORT)]
    return args


def sglang_command(plan: ServePlan, *, node_rank: str, leader: str) -> list[str]:
    """A cluster job's command: the plan's arguments, metrics on."""
    return [*SGLANG_ENTRY, *sglang_args(plan, node_rank=node_rank, leader=leader), "--enable-metrics"]


def serve_env(plan: ServePlan) -> dict[str, str]:
    """The token budget SGLang checks at start-up, sized from the same plan as the flags."""
    if plan.a2a == "deepep_v2":
        return {V2_BUDGET_ENV: str(plan.dispatch_budget)}
    if plan.a2a == "none":
        return {}
    # V1's low-latency (decode) buffer holds the decode graph's batch per rank.
    return {V1_BUDGET_ENV: str(plan.decode_tokens_per_rank)}


# Words that name an SGLang flag whose value is a secret (--api-key, --admin-api-key).
_SECRET_WORDS = frozenset({"key", "token", "secret", "password"})
REDACTED = "***"


def _secret_flag(arg: str) -> bool:
    return arg.startswith("--") and bool(_SECRET_WORDS & set(arg[2:].partition("=")[0].split("-")))


def redacted(argv: list[str]) -> list[str]:
    """`argv` as a report or a console shows it: the value of every secret flag (--api-key=V, --api-key V)
    written as ***."""
    shown = []
    for index, arg in enumerate(argv):
        if _secret_flag(arg) and "=" in arg:
            shown.append(f"{arg.partition('=')[0]}={REDACTED}")
        elif index and _secret_flag(argv[index - 1]) and "=" not in argv[index - 1]:
            shown.append(REDACTED)
        else:
            shown.append(arg)
    return shown
