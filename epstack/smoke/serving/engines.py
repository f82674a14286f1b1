"""The serving engines a serve plan can run, one record each: the served layer whose image holds it, its
command and environment for one node (the cluster jobs'), how the serve smoke starts, asks and loads
it, and what its server offers that another does not. The serve smoke and the cluster jobs take an
engine's name (`--engine`) and read the rest here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from epstack.errors import BadInput
from epstack.layers import TOP
from epstack.smoke.serving import checks, server, startup, vllmapi, vllmchecks
from epstack.smoke.serving.checks import Asked, Probed
from epstack.smoke.serving.client import HEALTH, Endpoint
from epstack.smoke.serving.command import serve_env, sglang_command
from epstack.smoke.serving.profiles import ServePlan
from epstack.smoke.serving.startup import Startup
from epstack.smoke.serving.vllmcommand import HEADLESS, all_to_all_ran, vllm_command, vllm_env


@dataclass(frozen=True, kw_only=True)
class Engine:
    name: str  # the served layer (epstack.layers): its image runs this engine
    title: str
    # One node's command: the plan, node rank and node 0's host (expressions a platform may expand),
    # and `worker`, what a node other than node 0 adds (an expression, or its text).
    command: Callable[..., list[str]]
    env: Callable[[ServePlan], dict[str, str]]
    worker: str  # what a node other than node 0 adds to its command ("" when every node runs the same)
    metrics: str  # how the server comes to serve Prometheus metrics, for the jobs' notes
    backends: tuple[str, ...]  # the --a2a backends it runs (epstack.smoke.serving.profiles.A2A_BACKENDS)
    router: bool  # SGLang's router and prefill/decode roles (epstack.cluster.router, .roles)
    layout: Callable[[ServePlan], str]  # its parallel layout of a plan, in words
    # The serve smoke: the server's command on this host (the plan's, then the user's flags) and its
    # environment, the path that answers once it serves, the checks against it, its start-up read from
    # its log, and the program of its load generator ("": SGLang's module, in this Python).
    launch: Callable[[ServePlan, list[str]], list[str]]
    environment: Callable[[ServePlan, Mapping[str, str]], dict[str, str]]
    health: str
    probe: Callable[[Endpoint, ServePlan, Path | None, Asked], Probed]
    startup: Callable[[str, datetime], Startup]
    bench: str
    # Why the plan's server without DeepEP would prove nothing against it ("": it would)
    no_comparison: Callable[[ServePlan], str]
    # Cache variables only it reads and their folders under a job's cache mount, besides the shared
    # ones (epstack.cluster.site.JIT_CACHE_DIRS); the image points each at imagepaths.JIT_CACHES/<folder>.
    caches: tuple[tuple[str, str], ...] = ()


def _sglang_layout(plan: ServePlan) -> str:
    return (
        f"tp {plan.tp_size}, attn-dp {plan.attn_dp_size}, ep {plan.ep_size}; "
        f"prefill {plan.prefill_tokens_per_rank} and decode {plan.decode_tokens_per_rank} tokens per rank"
    )


def _sglang_probe(endpoint: Endpoint, plan: ServePlan, log: Path | None, asked: Asked) -> Probed:
    return checks.probe(endpoint, a2a=plan.a2a, log=log, asked=asked)


def _vllm_probe(endpoint: Endpoint, plan: ServePlan, log: Path | None, asked: Asked) -> Probed:
    return vllmchecks.probe(endpoint, plan=plan, log=log, asked=asked)


def _vllm_no_comparison(plan: ServePlan) -> str:
    if all_to_all_ran(plan):
        return ""
    return "data parallel 1: with and without expert parallel vLLM runs the same kernels, no all-to-all"


def _vllm_layout(plan: ServePlan) -> str:
    moved = "DeepEP V2's all-to-all" if all_to_all_ran(plan) else "no all-to-all (data parallel 1)"
    return f"vLLM, dp {plan.world}, tp 1, ep {plan.world if plan.a2a != 'none' else 1}; {moved}"


def _sglang(plan: ServePlan, *, node_rank: str, leader: str, worker: str = "") -> list[str]:
    return sglang_command(plan, node_rank=node_rank, leader=leader)


ENGINES: dict[str, Engine] = {
    "sglang": Engine(
        name="sglang",
        title="SGLang",
        command=_sglang,
        env=serve_env,
        worker="",
        metrics="SGLang's Prometheus metrics (--enable-metrics)",
        backends=("deepep_v2", "deepep"),
        router=True,
        layout=_sglang_layout,
        launch=server.command,
        environment=server.environment,
        health=HEALTH,
        probe=_sglang_probe,
        startup=startup.read,
        bench="",
        no_comparison=lambda plan: "",
    ),
    "vllm": Engine(
        name="vllm",
        title="vLLM",
        command=vllm_command,
        env=vllm_env,
        worker=HEADLESS,
        metrics="vLLM's Prometheus metrics (always served by its API server)",
        backends=("deepep_v2",),
        router=False,
        layout=_vllm_layout,
        launch=server.vllm_command,
        environment=server.vllm_environment,
        health=vllmapi.HEALTH,
        probe=_vllm_probe,
        startup=startup.read_vllm,
        bench="vllm",
        no_comparison=_vllm_no_comparison,
        caches=(("VLLM_CACHE_ROOT", "vllm"),),  # torch.compile's artifacts (images/vllm)
    ),
}
DEFAULT = TOP.name


def engine_named(name: str) -> Engine:
    """The engine `name`; BadInput naming the choices for another."""
    if name not in ENGINES:
        raise BadInput(f"--engine {name}: fix: use one of {', '.join(ENGINES)}")
    return ENGINES[name]


def check_backend(engine: Engine, a2a: str) -> None:
    """BadInput when the engine has no such all-to-all backend (vLLM's DeepEP V1 modes are other names)."""
    if a2a not in engine.backends:
        raise BadInput(
            f"--engine {engine.name} --a2a {a2a}: {engine.title} runs {', '.join(engine.backends)} here; "
            f"fix: --a2a {engine.backends[0]}"
        )
