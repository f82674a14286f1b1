"""Every SGLang command epstack emits, parsed by the pinned SGLang's own parser
(sglang.srt.server_args.prepare_server_args): a renamed flag fails here, and so does a deprecation
warning, not a cluster. Marked network: the first run installs the parser (tests/cluster/sglang_env.py).
"""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from epstack.pins.file import read_pins_file
from epstack.smoke.serving import server
from epstack.smoke.serving.command import SGLANG_ENTRY, sglang_command
from epstack.smoke.serving.profiles import A2A_BACKENDS, PROFILES, ServePlan, serve_plan
from tests.cluster import sglang_env, test_roles_slurm, test_slurm
from tests.cluster.conftest import load_all, render, render_args
from tests.cluster.test_slurm import _run_sbatch
from tests.conftest import PINS, REPO

pytestmark = pytest.mark.network

NODES = (1, 2, 4)
GPUS = 8
REVISION = "0123456789abcdef0123456789abcdef01234567"  # the manifests' --model-revision


def _argv(command: list[str]) -> list[str]:
    assert command[: len(SGLANG_ENTRY)] == list(SGLANG_ENTRY)
    return command[len(SGLANG_ENTRY) :]


def _profile_commands() -> list[dict[str, Any]]:
    commands = []
    for profile, nodes, a2a in itertools.product(PROFILES, NODES, A2A_BACKENDS):
        plan = serve_plan(profile, nodes=nodes, gpus_per_node=GPUS, a2a=a2a)
        for rank in range(min(nodes, 2)):
            command = sglang_command(plan, node_rank=str(rank), leader="node-0")
            commands.append(
                {
                    "id": f"{profile}/{nodes}x{GPUS}/{a2a}/node{rank}",
                    "argv": _argv(command),
                    "plan": plan,
                    "rank": rank,
                }
            )
    return commands


def _after_entry(command: list[str]) -> list[str]:
    """What follows `serve --model-type llm` in a command that starts SGLang's CLI however it is found
    (the `sglang` script, or `python -c ...` where it is not on PATH: epstack.smoke.serving.server.entry)."""
    tail = list(SGLANG_ENTRY[1:])
    starts = [i for i in range(len(command)) if command[i : i + len(tail)] == tail]
    assert starts, command
    return command[starts[0] + len(tail) :]


# What `epstack smoke serve` launches on one node (epstack.smoke.serving.server.command): the serve
# plan for --gpus N, the same without DeepEP (its reference server), and with a user's --sglang-arg.
SMOKE_GPUS = (1, 8)
SMOKE_EXTRA = ["--attention-backend=triton"]


def _smoke_commands() -> list[dict[str, Any]]:
    commands = []
    for profile, gpus in itertools.product(PROFILES, SMOKE_GPUS):
        plan = serve_plan(profile, nodes=1, gpus_per_node=gpus)
        for served in (plan, plan.without_deepep()):
            commands.append(
                {
                    "id": f"smoke-serve/{profile}/{gpus}/{served.a2a}",
                    "argv": _after_entry(server.command(served, [])),
                    "plan": served,
                    "rank": 0,
                }
            )
    tiny = serve_plan("tiny", nodes=1, gpus_per_node=1)
    commands.append(
        {
            "id": "smoke-serve/tiny/extra",
            "argv": _after_entry(server.command(tiny, SMOKE_EXTRA)),
            "plan": tiny,
            "rank": 0,
        }
    )
    return commands


def _expand(args: list[str], values: dict[str, str]) -> list[str]:
    """Kubernetes' $(VAR) expansion of container args."""
    return [re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], arg) for arg in args]


def _manifest_commands(tmp_path: Path) -> list[dict[str, Any]]:
    """The serve container's command of each Kubernetes kind and fabric across 2 and 4 nodes (the shipped
    pins: EFA's GIN too), as the pod's node 1 expands it; then `--print-command`'s lines."""
    commands = []
    pins = PINS
    for kind, fabric, nodes in itertools.product(("lws", "job"), ("efa", "ib"), (2, 4)):
        args = render_args(
            target="k8s", job="serve", nodes=nodes, gpus=GPUS, fabric=fabric, pins=pins,
            extra=["--model-revision", REVISION],
        )  # fmt: skip
        name = f"{kind}-{fabric}-{nodes}"
        for obj in load_all(render(tmp_path, *args, "--k8s-kind", kind, name=name)):
            if obj["metadata"]["labels"]["app.kubernetes.io/component"] != "serve":
                continue  # the serve smoke's Job: an HTTP client (tests/cluster/test_servesmoke.py)
            if obj["kind"] in ("Job", "LeaderWorkerSet"):
                spec = obj["spec"].get("template") or obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]
                container = spec["spec"]["containers"][0]
                values = {
                    "LWS_WORKER_INDEX": "1",
                    "LWS_LEADER_ADDRESS": "epstack-serve-0.epstack-serve",
                    "JOB_COMPLETION_INDEX": "1",
                }
                commands.append({"id": f"k8s-{name}", "argv": _argv(_expand(container["args"], values))})
    printed = render(tmp_path, *args, "--print-command", name="printed")
    for line in (line for line in printed.splitlines() if not line.startswith("#")):
        words = shlex.split(line)
        start = words.index(SGLANG_ENTRY[0])
        commands.append({"id": f"print-command/{len(commands)}", "argv": _argv(words[start:])})
    return commands


def _slurm_commands(tmp_path: Path) -> list[dict[str, Any]]:
    """The Slurm serve script over EFA across 2 and 4 nodes, run with the stand-ins: each node's task's
    command as it expands there."""
    commands = []
    for nodes in (2, 4):
        args = render_args(target="slurm", job="serve", nodes=nodes, gpus=GPUS, fabric="efa", pins=PINS)
        script = render(tmp_path, *args, name=f"efa-{nodes}.sbatch")
        (run := tmp_path / f"run-{nodes}").mkdir()
        for rank, task in enumerate(test_slurm._tasks(run, script, nodes=nodes)):
            commands.append({"id": f"slurm-efa-{nodes}/node{rank}", "argv": test_slurm.expanded(task)})
    return commands


def _role_commands(tmp_path: Path) -> list[dict[str, Any]]:
    """--disaggregation's printed commands (the shipped lock: nixl): node 0 and 1 of prefill, then decode."""
    pins = PINS
    args = render_args(target="k8s", job="serve", nodes=2, gpus=GPUS, fabric="ib", pins=pins)
    locks = REPO / "locks"
    printed = render(tmp_path, *args, "--disaggregation", "--print-command", "--locks", str(locks), name="pd")
    lines = [line for line in printed.splitlines() if not line.startswith("#")]
    commands = []
    for index, (role, line) in enumerate(zip(["prefill", "prefill", "decode", "decode"], lines, strict=True)):
        words = shlex.split(line)
        argv = _argv(words[words.index(SGLANG_ENTRY[0]) :])
        commands.append({"id": f"role/{role}/node{index % 2}", "argv": argv, "role": role})
    return commands


def _slurm_role_commands(tmp_path: Path) -> list[dict[str, Any]]:
    """--disaggregation's Slurm script run with the stand-ins: each role's tasks' commands as they expand
    there (node ranks 0 and 1, prefill's leader gpu-st-0, decode's gpu-st-2)."""
    script = test_roles_slurm._render(tmp_path)
    assert _run_sbatch(tmp_path, script, nodes=4, FAKE_PREFILL_SECONDS="1").returncode == 0
    commands = []
    for role, tasks in test_roles_slurm._role_tasks(test_roles_slurm._recorded(tmp_path)).items():
        for rank, task in enumerate(tasks):
            leader = tasks[0]["env"]["SLURMD_NODENAME"]
            argv = test_roles_slurm._expanded(task)
            commands.append(
                {"id": f"role/slurm/{role}/node{rank}", "argv": argv, "role": role, "leader": leader}
            )
    return commands


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp_path = tmp_path_factory.mktemp("sglang")
    commands = (
        _profile_commands()
        + _manifest_commands(tmp_path)
        + _slurm_commands(tmp_path)
        + _smoke_commands()
        + _role_commands(tmp_path)
        + _slurm_role_commands(tmp_path)
    )
    negative = [
        # A renamed flag (the attention-DP flag under a name this SGLang does not have) must fail...
        {"id": "renamed", "argv": ["--model-path", "m", "--attention-dp-width", "2"]},
        # ...and a deprecated spelling must show up as a warning.
        {
            "id": "deprecated",
            "argv": ["--model-path", "m", "--tp-size", "2", "--dp-size", "2", "--enable-dp-attention"],
        },
    ]
    results = sglang_env.parse([{"id": c["id"], "argv": c["argv"]} for c in commands + negative])
    by_id = {r["id"]: r for r in results}
    for command in commands:
        by_id[command["id"]] |= {"plan": command.get("plan"), "rank": command.get("rank")}
        by_id[command["id"]] |= {"role": command.get("role"), "leader": command.get("leader")}
    return by_id


def _deprecations(result: dict[str, Any]) -> list[str]:
    return [w for w in result["warnings"] if "deprecat" in w.lower()]


def test_requirements_pin_the_sglang_of_pins_env() -> None:
    assert sglang_env.pinned_sglang() == read_pins_file(PINS).entries["SGLANG_VERSION"].value


def test_every_emitted_command_parses_without_deprecation(parsed: dict[str, dict[str, Any]]) -> None:
    emitted = {key: value for key, value in parsed.items() if key not in ("renamed", "deprecated")}
    assert len(emitted) >= len(PROFILES) * len(NODES) * len(A2A_BACKENDS) + 4
    failures = {
        key: r["error"] or _deprecations(r) for key, r in emitted.items() if not r["ok"] or _deprecations(r)
    }
    assert not failures


def test_parsed_values_are_the_plan(parsed: dict[str, dict[str, Any]]) -> None:
    for result in parsed.values():
        plan: ServePlan | None = result.get("plan")
        if plan is None:
            continue
        values: dict[str, Any] = result["values"]
        assert values["tp_size"] == plan.tp_size and values["ep_size"] == plan.ep_size
        assert values["attn_dp_size"] == plan.attn_dp_size and values["dp_size"] == 1
        assert values["moe_a2a_backend"] == plan.a2a
        assert values["chunked_prefill_size"] == plan.chunked_prefill_size
        assert values["cuda_graph_max_bs_decode"] == plan.profile.decode_graph_bs
        assert values["nnodes"] == plan.nodes and values["node_rank"] == result["rank"]
        if plan.nodes > 1:
            assert values["dist_init_addr"] == "node-0:5000"
        if plan.a2a == "deepep_v2":
            assert values["deepep_v2_mode"] == ("hybrid" if plan.nodes > 1 else "direct")


def test_the_serve_smokes_own_servers_parse_as_planned(parsed: dict[str, dict[str, Any]]) -> None:
    """What `epstack smoke serve` starts: every profile's weights read from its folder (the tiny one's
    generated, never SGLang's dummy ones), no DeepEP flag in the
    reference server, and the user's extra flag after the plan's."""
    smoke = {key: value for key, value in parsed.items() if key.startswith("smoke-serve/")}
    argvs = {command["id"]: command["argv"] for command in _smoke_commands()}
    assert len(smoke) == len(PROFILES) * len(SMOKE_GPUS) * 2 + 1
    for key, result in smoke.items():
        assert result["ok"] and not _deprecations(result), (key, result["error"] or result["warnings"])
        values = result["values"]
        plan: ServePlan = result["plan"]
        assert values["load_format"] == "auto"
        assert (values["host"], values["port"]) == ("0.0.0.0", 30000)
        if plan.a2a == "none":
            assert values["moe_a2a_backend"] == "none" and "--deepep-v2-mode" not in argvs[key]
    assert parsed["smoke-serve/tiny/extra"]["values"]["attention_backend"] == "triton"
    assert parsed["smoke-serve/tiny/1/deepep_v2"]["values"]["attention_backend"] != "triton"


def test_manifest_commands_carry_the_expanded_rank(parsed: dict[str, dict[str, Any]]) -> None:
    for kind, fabric, nodes in itertools.product(("lws", "job"), ("efa", "ib"), (2, 4)):
        result = parsed[f"k8s-{kind}-{fabric}-{nodes}"]
        assert result["ok"], result["error"]
        values = result["values"]
        assert (values["node_rank"], values["nnodes"], values["ep_size"]) == (1, nodes, nodes * GPUS)
        # The weights' pinned revision, and SGLang's Prometheus metrics on.
        assert values["revision"] == REVISION
        assert values["enable_metrics"] is True
        assert values["moe_a2a_backend"] == "deepep_v2"
    assert parsed["k8s-lws-efa-2"]["values"]["dist_init_addr"] == "epstack-serve-0.epstack-serve:5000"


def test_the_slurm_efa_commands_parse_with_each_nodes_rank(parsed: dict[str, dict[str, Any]]) -> None:
    for nodes in (2, 4):
        for rank in range(nodes):
            result = parsed[f"slurm-efa-{nodes}/node{rank}"]
            assert result["ok"] and not _deprecations(result), result["error"] or result["warnings"]
            values = result["values"]
            assert (values["node_rank"], values["nnodes"], values["ep_size"]) == (rank, nodes, nodes * GPUS)
            assert values["dist_init_addr"] == "gpu-st-0:5000"


def test_the_parser_catches_a_renamed_flag_and_a_deprecated_one(parsed: dict[str, dict[str, Any]]) -> None:
    assert not parsed["renamed"]["ok"]
    assert "unrecognized arguments: --attention-dp-width" in parsed["renamed"]["error"]
    assert parsed["deprecated"]["ok"] and _deprecations(parsed["deprecated"])


def test_the_roles_parse_as_prefill_and_decode_with_deepep_v2(parsed: dict[str, dict[str, Any]]) -> None:
    roles = {key: value for key, value in parsed.items() if key.startswith("role/")}
    assert len(roles) == 8  # node 0 and 1 of each role: printed (k8s), and run by the Slurm script
    for key, result in roles.items():
        assert result["ok"] and not _deprecations(result), (key, result["error"] or result["warnings"])
        values = result["values"]
        assert values["disaggregation_mode"] == result["role"]
        assert values["disaggregation_transfer_backend"] == "nixl"
        assert values["moe_a2a_backend"] == "deepep_v2" and values["deepep_v2_mode"] == "hybrid"
        if result["role"] == "prefill":
            assert values["disaggregation_bootstrap_port"] == 8998
        if result["leader"]:  # Slurm: each role its own serving group, its first node the leader
            assert values["dist_init_addr"] == f"{result['leader']}:5000" and values["nnodes"] == 2
            assert values["node_rank"] == int(key[-1])
