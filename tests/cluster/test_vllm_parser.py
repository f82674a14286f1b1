"""Every vLLM command epstack emits, parsed by the pinned vLLM's own `vllm serve` parser: a renamed flag
fails here, and so does a deprecation warning, not a cluster. Marked network: the first run installs the
parser (tests/cluster/vllm_env.py, on vLLM's CPU platform: this machine has no GPU)."""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from epstack.pins.file import read_pins_file
from epstack.smoke.serving import server
from epstack.smoke.serving.profiles import PROFILES, serve_plan
from epstack.smoke.serving.vllmcommand import HEADLESS, VLLM_ENTRY, vllm_command
from tests.cluster import vllm_env
from tests.cluster.conftest import load_all, render
from tests.cluster.test_vllm_jobs import _args, _containers, _tasks
from tests.conftest import PINS

pytestmark = pytest.mark.network

NODES = (1, 2, 4)
GPUS = 8


def _argv(command: list[str]) -> list[str]:
    assert command[: len(VLLM_ENTRY)] == list(VLLM_ENTRY), command
    return command[len(VLLM_ENTRY) :]


def _profile_commands() -> list[dict[str, Any]]:
    commands = []
    for profile, nodes in itertools.product(PROFILES, NODES):
        plan = serve_plan(profile, nodes=nodes, gpus_per_node=GPUS)
        for rank in range(min(nodes, 2)):
            worker = HEADLESS if rank else ""
            command = vllm_command(plan, node_rank=str(rank), leader="node-0", worker=worker)
            commands.append(
                {
                    "id": f"{profile}/{nodes}x{GPUS}/node{rank}",
                    "argv": _argv(command),
                    "plan": plan,
                    "rank": rank,
                }
            )
    return commands


def _smoke_commands() -> list[dict[str, Any]]:
    """What `epstack smoke serve --engine vllm` launches on one node (server.vllm_command): the plan for
    --gpus N, and with a user's --vllm-arg."""
    commands = []
    for profile, gpus in itertools.product(PROFILES, (1, 2, 8)):
        plan = serve_plan(profile, nodes=1, gpus_per_node=gpus)
        argv = server.vllm_command(plan, ["--enforce-eager"] if gpus == 1 else [])
        serve = argv.index(VLLM_ENTRY[1])
        commands.append(
            {"id": f"smoke-serve/{profile}/{gpus}", "argv": argv[serve + 1 :], "plan": plan, "rank": 0}
        )
    return commands


def _expand(args: list[str], values: dict[str, str]) -> list[str]:
    """Kubernetes' $(VAR) expansion of container args."""
    return [re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], arg) for arg in args]


def _rendered_commands(tmp_path: Path) -> list[dict[str, Any]]:
    """The LWS's leader and worker, the sbatch tasks as they expand, the printed commands."""
    plan = serve_plan("deepseek-v3", nodes=2, gpus_per_node=GPUS)
    containers = _containers(load_all(render(tmp_path, *_args("k8s", tmp_path=tmp_path), name="lws")))
    commands = []
    for role, rank in (("leader", 0), ("worker", 1)):
        values = {"LWS_WORKER_INDEX": str(rank), "LWS_LEADER_ADDRESS": "epstack-serve-0.epstack-serve"}
        argv = _argv(_expand(containers[role]["args"], values))
        commands.append({"id": f"k8s-lws/{role}", "argv": argv, "plan": plan, "rank": rank})
    script = render(tmp_path, *_args("slurm", tmp_path=tmp_path), name="sbatch")
    for rank, argv in enumerate(_tasks(tmp_path, script, 2)):
        commands.append({"id": f"slurm/node{rank}", "argv": _argv(argv), "plan": plan, "rank": rank})
    printed = render(tmp_path, *_args("k8s", tmp_path=tmp_path), "--print-command", name="printed")
    for rank, line in enumerate(line for line in printed.splitlines() if not line.startswith("#")):
        words = shlex.split(line)
        argv = _argv(words[words.index(VLLM_ENTRY[0]) :])
        commands.append({"id": f"print-command/node{rank}", "argv": argv, "plan": plan, "rank": rank})
    return commands


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp_path = tmp_path_factory.mktemp("vllm")
    commands = _profile_commands() + _rendered_commands(tmp_path) + _smoke_commands()
    # A renamed flag (the DP size under a name this vLLM does not have) must fail.
    negative = [{"id": "renamed", "argv": ["m", "--data-parallel-world-size", "2"]}]
    results = vllm_env.parse([{"id": c["id"], "argv": c["argv"]} for c in commands + negative])
    by_id = {r["id"]: r for r in results}
    for command in commands:
        by_id[command["id"]] |= {"plan": command["plan"], "rank": command["rank"]}
    return by_id


def _deprecations(result: dict[str, Any]) -> list[str]:
    return [w for w in result["warnings"] if "deprecat" in w.lower()]


def test_requirements_pin_the_vllm_of_pins_env() -> None:
    assert vllm_env.pinned_vllm() == read_pins_file(PINS).entries["VLLM_VERSION"].value


def test_every_emitted_command_parses_without_deprecation(parsed: dict[str, dict[str, Any]]) -> None:
    emitted = {key: value for key, value in parsed.items() if key != "renamed"}
    assert len(emitted) == len(PROFILES) * (1 + 2 + 2 + 3) + 6
    failures = {
        key: r["error"] or _deprecations(r) for key, r in emitted.items() if not r["ok"] or _deprecations(r)
    }
    assert not failures


def test_a_renamed_flag_fails_the_parser(parsed: dict[str, dict[str, Any]]) -> None:
    assert not parsed["renamed"]["ok"] and "--data-parallel-world-size" in parsed["renamed"]["error"]


def test_vllm_reads_the_plans_layout(parsed: dict[str, dict[str, Any]]) -> None:
    """DP over every GPU, expert parallel through DeepEP V2, node 0 serving and the others headless."""
    for key, result in parsed.items():
        if key == "renamed":
            continue
        plan, rank, values = result["plan"], result["rank"], result["values"]
        assert values["data_parallel_size"] == plan.world and values["tensor_parallel_size"] == 1, key
        assert values["data_parallel_size_local"] == plan.gpus_per_node, key
        assert values["enable_expert_parallel"] and values["all2all_backend"] == "deepep_v2", key
        assert values["max_num_batched_tokens"] == plan.profile.chunk_per_dp_rank, key
        assert values["max_cudagraph_capture_size"] == plan.profile.decode_graph_bs, key
        assert values["nnodes"] == plan.nodes and values["node_rank"] == (rank if plan.nodes > 1 else 0), key
        assert values["headless"] is (rank > 0), key
        assert values["port"] == 30000 and values["model_tag"] == plan.model_path, key
