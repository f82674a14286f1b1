"""Prefill/decode roles on Slurm: one sbatch script asking for `--nodes` per role, prefill's srun step on
the allocation's first nodes and decode's on the next, each with its own leader and node ranks, the
router in PD mode on node 0 pointing at both leaders. The script runs with the srun/scontrol stand-ins;
SGLang's and smg's own parsers take its commands in test_sglang_parser.py and test_router_parser.py."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from epstack.cluster import roles, router
from epstack.cluster.jobs import IMAGE_ENTRYPOINT
from epstack.smoke.serving.command import BOOTSTRAP_PORT, HTTP_PORT
from tests.cluster.conftest import (
    ROUTER_IMAGE,
    check_cluster_golden,
    load_all,
    render,
    render_args,
)
from tests.cluster.test_slurm import _run_sbatch, _tool_checks
from tests.conftest import PINS, REPO

FLAGS = ["--profile", "deepseek-v3", "--disaggregation", "--router-image", ROUTER_IMAGE]
FLAGS += ["--locks", str(REPO / "locks")]


def _render(tmp_path: Path, *extra: str, target: str = "slurm", nodes: int = 2) -> str:
    pins = PINS
    args = render_args(target=target, job="serve", nodes=nodes, gpus=8, fabric="ib", pins=pins)
    return render(tmp_path, *args, *FLAGS, *extra, name=target)


def _recorded(tmp_path: Path) -> list[dict[str, Any]]:
    """Every task of every srun the script ran."""
    return [json.loads(line) for line in (tmp_path / "srun.jsonl").read_text().splitlines()]


def _expanded(task: dict[str, Any]) -> list[str]:
    """SGLang's arguments as the task's `bash -c` expands them, with the task's own environment."""
    hold_env, entry, bash, dash_c, inner = task["argv"]
    assert (hold_env, entry, bash, dash_c) == (*IMAGE_ENTRYPOINT, "bash", "-c")
    words = subprocess.run(
        ["bash", "-c", inner.replace("exec ", 'printf "%s\\n" ', 1)],
        env={key: task["env"][key] for key in ("SLURM_NODEID", "PREFILL_ADDR", "DECODE_ADDR")},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert words[:4] == ["sglang", "serve", "--model-type", "llm"]
    return words[4:]


def _flag(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def _role_tasks(steps: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    servers = [task for task in steps if tuple(task["argv"][:2]) == IMAGE_ENTRYPOINT]
    return {
        role: [task for task in servers if f"--disaggregation-mode {role} " in task["argv"][-1]]
        for role in roles.ROLES
    }


@pytest.mark.parametrize("nodes", [1, 2])
def test_each_role_runs_on_its_own_nodes_with_its_own_leader_and_ranks(tmp_path: Path, nodes: int) -> None:
    script = _render(tmp_path, nodes=nodes)
    _tool_checks(script, tmp_path)
    assert f"#SBATCH --nodes={2 * nodes}\n" in script
    # Prefill outlives decode here, so the job ends with decode's step, as it would serving.
    result = _run_sbatch(tmp_path, script, nodes=2 * nodes, FAKE_PREFILL_SECONDS="1")
    assert result.returncode == 0, result.stderr
    steps = _recorded(tmp_path)
    by_role = _role_tasks(steps)
    hosts = {role: [task["env"]["SLURMD_NODENAME"] for task in tasks] for role, tasks in by_role.items()}
    # Prefill on the allocation's first nodes, decode on the next: disjoint, all of the job's.
    assert hosts["prefill"] == [f"gpu-st-{i}" for i in range(nodes)]
    assert hosts["decode"] == [f"gpu-st-{nodes + i}" for i in range(nodes)]
    for role, tasks in by_role.items():
        leader = tasks[0]["env"]["SLURMD_NODENAME"]
        for rank, task in enumerate(tasks):
            argv = _expanded(task)
            assert _flag(argv, "--disaggregation-mode") == role
            assert _flag(argv, "--disaggregation-transfer-backend") == "nixl"
            bootstrap = str(BOOTSTRAP_PORT) if role == "prefill" else None
            assert _flag(argv, "--disaggregation-bootstrap-port") == bootstrap
            if nodes > 1:  # each role a serving group of its own: ranks from 0, its first node the leader
                assert _flag(argv, "--nnodes") == str(nodes) and _flag(argv, "--node-rank") == str(rank)
                assert _flag(argv, "--dist-init-addr") == f"{leader}:5000"
            else:
                assert "--nnodes" not in argv
    # The router on node 0 (prefill's leader), in PD mode, told each role's leader.
    (route,) = [task for task in steps if task["argv"][:2] == ["smg", "launch"]]
    assert route["opts"]["nodelist"] == "gpu-st-0" and route["opts"]["container-image"] == ROUTER_IMAGE
    argv = route["argv"]
    assert "--pd-disaggregation" in argv and "--worker-urls" not in argv
    prefill = argv.index("--prefill")
    assert argv[prefill + 1 : prefill + 3] == [f"http://gpu-st-0:{HTTP_PORT}", str(BOOTSTRAP_PORT)]
    assert _flag(argv, "--decode") == f"http://gpu-st-{nodes}:{HTTP_PORT}"
    # The serve smoke calls the router, and reads prefill's node 0 log, on its own node.
    (smoke,) = [task for task in steps if task["argv"][1:3] == ["smoke", "serve"]]
    assert _flag(smoke["argv"], "--url") == f"http://127.0.0.1:{router.SLURM_PORT}"
    log = _flag(smoke["argv"], "--server-log")
    assert log == "/var/lib/epstack/results/epstack-serve-prefill-4242-node0.log"
    outputs = {role: tasks[0]["opts"]["output"] for role, tasks in by_role.items()}
    assert outputs == {
        role: f"/var/tmp/epstack/results/epstack-serve-{role}-%j-node%n.log" for role in roles.ROLES
    }


def test_the_roles_flags_are_the_kubernetes_renders(tmp_path: Path) -> None:
    """The same plan's flags on both platforms: only the leader's host differs (node 1's shown)."""
    script = _render(tmp_path)
    _run_sbatch(tmp_path, script, nodes=4, FAKE_PREFILL_SECONDS="1")
    slurm = {role: _expanded(tasks[1]) for role, tasks in _role_tasks(_recorded(tmp_path)).items()}
    objects = load_all(_render(tmp_path, target="k8s"))
    for role in roles.ROLES:
        (lws,) = [o for o in objects if o["metadata"]["name"] == f"epstack-serve-{role}"]
        k8s = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["args"]
        k8s = [word.replace("$(LWS_WORKER_INDEX)", "1") for word in k8s]
        address = k8s.index("--dist-init-addr") + 1
        k8s[address] = k8s[address].replace("$(LWS_LEADER_ADDRESS)", f"gpu-st-{2 if role == 'decode' else 0}")
        assert ["sglang", "serve", "--model-type", "llm", *slurm[role]] == k8s


@pytest.mark.parametrize("mode", ["on", "exit"])
def test_a_prefill_step_that_ends_stops_decodes_and_the_job(tmp_path: Path, mode: str) -> None:
    script = _render(tmp_path, "--serve-smoke", mode)
    # exit: the smoke still waiting is stopped with the decode step (on: Slurm would stop it with the job).
    waiting = {"FAKE_SMOKE_SECONDS": "30"} if mode == "exit" else {}
    start = time.monotonic()
    result = _run_sbatch(
        tmp_path, script, nodes=4, FAKE_PREFILL_EXIT="5", FAKE_DECODE_SECONDS="30", **waiting
    )
    assert time.monotonic() - start < 20
    assert result.returncode == 143  # decode's step stopped (SIGTERM), and the job with it
    assert "the prefill step ended (exit 5); stopping the decode step" in result.stderr


def test_the_job_ends_with_decodes_step(tmp_path: Path) -> None:
    script = _render(tmp_path, "--serve-smoke", "off")
    result = _run_sbatch(tmp_path, script, nodes=4, FAKE_DECODE_EXIT="7", FAKE_PREFILL_SECONDS="1")
    assert result.returncode == 7


def test_golden_prefill_decode_deepseek_v3_sbatch(tmp_path: Path) -> None:
    check_cluster_golden(_render(tmp_path), "serve-deepseek-v3-pd-ib-2x8.sbatch")
