"""`cluster render --engine vllm`: vLLM's DP attention and expert parallel across nodes, from the one source
of its flags (epstack.smoke.serving.vllmcommand), as Kubernetes LeaderWorkerSets and sbatch scripts;
node 0 serves the API, every other node runs --headless. vLLM's own parser reads these commands in
tests/cluster/test_vllm_parser.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from epstack.cluster.jobs import IMAGE_ENTRYPOINT
from epstack.commands.main import main
from epstack.pins.load import load_pins
from tests.cluster.conftest import (
    DIGEST,
    REGISTRY,
    ROUTER_IMAGE,
    check_cluster_golden,
    load_all,
    render,
    render_args,
)
from tests.cluster.test_cli import _image, _manifest
from tests.cluster.test_slurm import _run_sbatch, _tool_checks
from tests.cluster.validation import images_of, validate_object
from tests.conftest import PINS

VLLM_IMAGE = f"{REGISTRY}:vllm-0.33.0-test@{DIGEST}"


def _args(target: str, nodes: int = 2, *extra: str, tmp_path: Path) -> list[str]:
    args = render_args(target=target, job="serve", nodes=nodes, gpus=8, fabric="ib", pins=PINS)
    args[args.index("--image") + 1] = VLLM_IMAGE
    return [*args, "--engine", "vllm", *extra]


def _containers(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    (lws,) = [obj for obj in objects if obj["kind"] == "LeaderWorkerSet"]
    template = lws["spec"]["leaderWorkerTemplate"]
    return {role: template[f"{role}Template"]["spec"]["containers"][0] for role in ("leader", "worker")}


def test_lws_leader_serves_and_workers_run_headless(tmp_path: Path) -> None:
    text = render(tmp_path, *_args("k8s", tmp_path=tmp_path))
    objects = load_all(text)
    for obj in objects:
        validate_object(obj)
    containers = _containers(objects)
    leader, worker = containers["leader"]["args"], containers["worker"]["args"]
    assert leader[:2] == ["vllm", "serve"] and worker == [
        *leader[: len(worker) - 5],
        "--headless",
        *leader[-4:],
    ]
    for flag, value in (
        ("--data-parallel-size", "16"),
        ("--data-parallel-size-local", "8"),
        ("--nnodes", "2"),
    ):
        assert leader[leader.index(flag) + 1] == value
    assert leader[leader.index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
    assert leader[leader.index("--data-parallel-address") + 1] == "$(LWS_LEADER_ADDRESS)"
    assert (
        "--enable-expert-parallel" in leader and leader[leader.index("--all2all-backend") + 1] == "deepep_v2"
    )
    assert "ports" in containers["leader"] and "startupProbe" in containers["leader"]
    assert "ports" not in containers["worker"] and "livenessProbe" not in containers["worker"], (
        "no HTTP there"
    )
    env = {item["name"]: item.get("value") for item in containers["leader"]["env"]}
    assert env["VLLM_DEEPEP_V2_ALLOW_HYBRID_MODE"] == "1", "GIN between nodes"
    assert {image for obj in objects for image in images_of(obj)} == {VLLM_IMAGE}
    smoke = next(obj for obj in objects if obj["metadata"]["name"] == "epstack-serve-smoke")
    command = smoke["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--engine") + 1] == "vllm", "the serve smoke speaks vLLM's API"
    check_cluster_golden(text, "serve-lws-vllm-ib-2x8.yaml")


def test_one_node_runs_no_headless_and_direct_mode(tmp_path: Path) -> None:
    objects = load_all(render(tmp_path, *_args("k8s", 1, tmp_path=tmp_path)))
    leader = _containers(objects)["leader"]
    assert "--headless" not in leader["args"] and "--nnodes" not in leader["args"]
    env = {item["name"]: item.get("value") for item in leader["env"]}
    assert env["VLLM_DEEPEP_V2_ALLOW_HYBRID_MODE"] == "0", "one NVLink domain: direct"


def _tasks(tmp_path: Path, script: str, nodes: int) -> list[list[str]]:
    """Each server task's vLLM argv as its `bash -c` expands it there (SLURM_NODEID, MASTER_ADDR)."""
    assert _run_sbatch(tmp_path, script, nodes=nodes).returncode == 0
    steps = [json.loads(line) for line in (tmp_path / "srun.jsonl").read_text().splitlines()]
    argvs = []
    for task in steps:
        if tuple(task["argv"][:2]) != IMAGE_ENTRYPOINT:
            continue
        _, _, bash, dash_c, inner = task["argv"]
        env = {key: task["env"][key] for key in ("SLURM_NODEID", "MASTER_ADDR") if key in task["env"]}
        printed = subprocess.run(
            [bash, dash_c, inner.replace("exec ", 'printf "%s\\n" ', 1)],
            env={**env, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=True,
        )
        argvs.append(printed.stdout.splitlines())
    return argvs


def test_sbatch_node_0_serves_and_the_others_run_headless(tmp_path: Path) -> None:
    script = render(tmp_path, *_args("slurm", tmp_path=tmp_path))
    _tool_checks(script, tmp_path)
    node0, node1 = _tasks(tmp_path, script, 2)
    assert node0[:2] == ["vllm", "serve"] and "--headless" not in node0 and node1[-5] == "--headless"
    assert [node0[node0.index("--node-rank") + 1], node1[node1.index("--node-rank") + 1]] == ["0", "1"]
    assert (
        node0[node0.index("--data-parallel-address") + 1]
        == "gpu-st-0"
        == node1[node1.index("--data-parallel-address") + 1]
    )
    assert "VLLM_DEEPEP_V2_ALLOW_HYBRID_MODE=1" in script and "vLLM's Prometheus metrics" in script
    check_cluster_golden(script, "serve-vllm-ib-2x8.sbatch")


def test_printed_commands_are_node_0s_and_a_headless_node_1s(tmp_path: Path) -> None:
    printed = render(tmp_path, *_args("k8s", tmp_path=tmp_path), "--print-command")
    node0, node1 = [line for line in printed.splitlines() if not line.startswith("#")]
    assert "--headless" not in node0 and node1.endswith("--headless --host 0.0.0.0 --port 30000")
    assert "vLLM, dp 16, tp 1, ep 16; DeepEP V2's all-to-all" in printed


def test_the_manifest_gives_the_vllm_image_of_these_pins(tmp_path: Path) -> None:
    """Both engines' images in one manifest: --engine vllm takes the one tagged as these pins tag vllm's."""
    pins = load_pins(PINS)
    sglang, vllm = (_image(pins.image_tag(layer, "hopper-ib"), "sha256:" + digit * 64)
                    for layer, digit in (("sglang", "1"), ("vllm", "2")))  # fmt: skip
    manifest = _manifest(tmp_path, sglang, vllm)
    args = _args("k8s", tmp_path=tmp_path)
    at = args.index("--image")
    args[at : at + 2] = ["--manifest", str(manifest)]
    objects = load_all(render(tmp_path, *args))
    assert _containers(objects)["leader"]["image"].endswith("@sha256:" + "2" * 64)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--k8s-kind", "job"], "--k8s-kind job: vLLM's nodes other than node 0 run --headless"),
        (["--router-image", ROUTER_IMAGE], "--router-image: SGLang's router and roles, not vLLM's"),
        (["--disaggregation"], "--disaggregation: SGLang's router and roles, not vLLM's"),
        (["--a2a", "deepep"], "--engine vllm --a2a deepep: vLLM runs deepep_v2 here; fix: --a2a deepep_v2"),
    ],
)
def test_what_vllm_jobs_cannot_be_is_one_line_of_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], says: str
) -> None:
    assert main(["cluster", *_args("k8s", 2, *extra, tmp_path=tmp_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and not (tmp_path / "o").exists()
