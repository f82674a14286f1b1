"""The serve smoke a serve job runs against its own endpoint: Kubernetes' Job beside the leader pod and
Slurm's step on node 0. Its URL is the served host and port, its plan the server's, its flags are what
`epstack smoke serve` itself parses (epstack's parser, in-process), its Job passes the real schema, and
the sbatch script runs with stand-ins for srun: the job serves on, or ends with the smoke's exit code."""

from __future__ import annotations

import argparse
import shlex
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from epstack.cluster import servesmoke
from epstack.commands.main import build_parser, main
from epstack.smoke.serving.command import HTTP_PORT
from epstack.smoke.serving.profiles import PROFILES, serve_plan
from tests.cluster.conftest import (
    IMAGE,
    check_cluster_golden,
    load_all,
    render,
    render_args,
)
from tests.cluster.test_slurm import _job_step, _run_sbatch, _steps, _tool_checks
from tests.cluster.validation import images_of, validate_object
from tests.conftest import PINS

RESULTS = "/var/lib/epstack/results"


def _render(tmp_path: Path, target: str, *extra: str, nodes: int = 2, fabric: str = "ib") -> str:
    pins = PINS
    args = render_args(target=target, job="serve", nodes=nodes, gpus=8, fabric=fabric, pins=pins, extra=extra)
    return render(tmp_path, *args)


def _smoke_job(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (job,) = [o for o in objects if o["metadata"]["labels"]["app.kubernetes.io/component"] == "serve-smoke"]
    return job


def _leader(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """Node 0's pod template: the LWS leader's, or the indexed Job's (every index shares it)."""
    for obj in objects:
        if obj["kind"] == "LeaderWorkerSet":
            return dict(obj["spec"]["leaderWorkerTemplate"]["leaderTemplate"])
        if obj["kind"] == "Job" and obj["metadata"]["labels"]["app.kubernetes.io/component"] == "serve":
            return dict(obj["spec"]["template"])
    raise AssertionError("no serve workload")


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _parsed(argv: list[str]) -> argparse.Namespace:
    """The smoke's command parsed by epstack's own parser, in-process (the program path dropped)."""
    assert argv[:3] == [servesmoke.PROGRAM, "smoke", "serve"]
    args = build_parser("smoke").parse_args(argv[1:])
    assert args.func.__name__ == "cmd_serve"
    return args


def _smoke_plan(args: argparse.Namespace) -> Any:
    """The plan `epstack smoke serve` builds from its flags (epstack.commands.smoke.cmd_serve)."""
    return serve_plan(
        args.profile, nodes=1, gpus_per_node=args.gpus, a2a=args.a2a, model_path=args.model_path
    )


def _sbatch_server_argv(task: dict[str, Any]) -> list[str]:
    """SGLang's flags inside the server task's `bash -c 'exec sglang serve ...'`."""
    words = shlex.split(task["argv"][-1])
    assert words[:5] == ["exec", "sglang", "serve", "--model-type", "llm"]
    return words[5:]


def _smoke_tasks(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [step for step in steps if step["argv"][1:3] == ["smoke", "serve"]]


# ---- Kubernetes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["lws", "job"])
@pytest.mark.parametrize("nodes", [1, 2])
def test_k8s_smoke_job_validates_and_asks_the_served_endpoint(tmp_path: Path, kind: str, nodes: int) -> None:
    objects = load_all(_render(tmp_path, "k8s", "--k8s-kind", kind, nodes=nodes))
    smoke = _smoke_job(objects)
    validate_object(smoke)
    assert images_of(smoke) == [IMAGE]
    pod = smoke["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = _parsed(container["command"])
    assert "args" not in container  # epstack itself, not the image's entrypoint (the guard, JIT caches)
    # The URL: the serve job's HTTP Service, its port SGLang's --port and the leader's containerPort.
    url = urllib.parse.urlsplit(args.url)
    (service,) = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == url.hostname]
    assert service["spec"].get("clusterIP") != "None"
    (port,) = service["spec"]["ports"]
    leader = _leader(objects)
    served = leader["spec"]["containers"][0]
    assert url.port == port["port"] == port["targetPort"] == HTTP_PORT
    assert served["ports"] == [{"name": "http", "containerPort": HTTP_PORT}]
    assert _flag(served["args"], "--port") == str(HTTP_PORT) and _flag(served["args"], "--host") == "0.0.0.0"
    # Beside node 0's pod: the same pods the Service selects, on the same node.
    (term,) = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term == {
        "labelSelector": {"matchLabels": service["spec"]["selector"]},
        "topologyKey": "kubernetes.io/hostname",
    }
    assert leader["metadata"]["labels"]["epstack.io/job"] == service["spec"]["selector"]["epstack.io/job"]
    # Not one of the serve job's pods: no Service and no placement term of the serve job selects it.
    assert smoke["spec"]["template"]["metadata"]["labels"]["epstack.io/job"] == "epstack-serve-smoke"
    assert pod["tolerations"] == leader["spec"]["tolerations"]
    # No GPU, asked or seen; once; no API access.
    assert "nvidia.com/gpu" not in str(container["resources"])
    assert container["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    assert pod["restartPolicy"] == "Never" and smoke["spec"]["backoffLimit"] == 0
    assert pod["automountServiceAccountToken"] is False
    # It waits through its own health timeout, no longer than its Job may run, past the startup allowance.
    probe = served["startupProbe"]
    allowance = probe["failureThreshold"] * probe["periodSeconds"]
    assert allowance < args.health_timeout < smoke["spec"]["activeDeadlineSeconds"]
    assert not args.sweep and args.url and args.server_log is None
    # The report in the results volume, named after the Job.
    assert str(args.json) == f"{RESULTS}/epstack-serve-smoke.json"
    assert container["volumeMounts"] == [{"name": "results", "mountPath": RESULTS}]
    assert pod["volumes"] == [
        {"name": "results", "hostPath": {"path": "/var/tmp/epstack/results", "type": "DirectoryOrCreate"}}
    ]


@pytest.mark.parametrize("profile", list(PROFILES))
@pytest.mark.parametrize("target", ["k8s", "slurm"])
def test_the_smokes_plan_is_the_servers(tmp_path: Path, profile: str, target: str) -> None:
    text = _render(tmp_path, target, "--profile", profile)
    if target == "k8s":
        objects = load_all(text)
        smoke = _parsed(_smoke_job(objects)["spec"]["template"]["spec"]["containers"][0]["command"])
        server = _leader(objects)["spec"]["containers"][0]["args"][4:]
    else:
        steps = _steps(tmp_path, text, nodes=2)
        (task,) = _smoke_tasks(steps)
        smoke = _parsed(task["argv"])
        server = _sbatch_server_argv(_job_step(steps)[0])
    assert smoke.profile == profile
    plan = _smoke_plan(smoke)
    assert plan.model_path == _flag(server, "--model-path") == PROFILES[profile].model_path
    assert plan.a2a == _flag(server, "--moe-a2a-backend") == "deepep_v2"
    # The report's TP and EP: the served world, from a smoke that runs on no GPU.
    assert str(plan.tp_size) == _flag(server, "--tp-size") and str(plan.ep_size) == _flag(server, "--ep-size")


def test_the_smoke_follows_the_model_path_and_backend(tmp_path: Path) -> None:
    objects = load_all(_render(tmp_path, "k8s", "--model-path", "/models/$(HOME)/v3", "--a2a", "deepep"))
    command = _smoke_job(objects)["spec"]["template"]["spec"]["containers"][0]["command"]
    # Kubernetes expands $(VAR) in command too: written as $$, it reaches the smoke as typed.
    assert _flag(command, "--model-path") == "/models/$$(HOME)/v3"
    args = _parsed([word.replace("$$", "$") for word in command])
    assert (args.model_path, args.a2a) == ("/models/$(HOME)/v3", "deepep")


def test_without_a_results_volume_the_report_stays_in_the_container(tmp_path: Path) -> None:
    text = _render(tmp_path, "k8s", "--results-storage", "none")
    smoke = _smoke_job(load_all(text))
    validate_object(smoke)
    pod = smoke["spec"]["template"]["spec"]
    assert "volumes" not in pod and "volumeMounts" not in pod["containers"][0]
    assert str(_parsed(pod["containers"][0]["command"]).json) == servesmoke.FALLBACK_REPORT
    assert "report: none kept (no results volume)" in text


def test_the_manifest_says_how_to_wait_for_the_smoke(tmp_path: Path) -> None:
    text = _render(tmp_path, "k8s", "--startup-timeout", "1200")
    note = next(line for line in text.splitlines() if line.startswith("# Serve smoke:"))
    deadline = _smoke_job(load_all(text))["spec"]["activeDeadlineSeconds"]
    assert deadline == servesmoke.PULL_S + 1200 + servesmoke.HEALTH_MARGIN_S + servesmoke.CHECKS_S
    assert f"kubectl wait --for=condition=complete job/epstack-serve-smoke --timeout={deadline}s" in note
    assert "http://epstack-serve-http:30000" in note


def test_serve_smoke_off_renders_the_serve_job_alone(tmp_path: Path) -> None:
    objects = load_all(_render(tmp_path, "k8s", "--serve-smoke", "off"))
    # The model's claim and its fetch, then the serve job: no smoke Job.
    assert [o["kind"] for o in objects] == ["PersistentVolumeClaim", "Job", "LeaderWorkerSet", "Service"]
    script = _render(tmp_path, "slurm", "--serve-smoke", "off")
    assert "smoke serve" not in script and "node%n.log" not in script
    assert not _smoke_tasks(_steps(tmp_path, script, nodes=2))


@pytest.mark.parametrize(
    ("case", "text"),
    [
        (("k8s", "serve", "exit"), "--serve-smoke exit: a Kubernetes serve job keeps serving"),
        (("slurm", "elastic-smoke", "on"), "--serve-smoke on: it smokes a serve job's endpoint"),
    ],
)
def test_serve_smoke_modes_that_do_not_apply_are_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: tuple[str, str, str], text: str
) -> None:
    target, job, mode = case
    out = tmp_path / "never"
    pins = PINS
    args = render_args(target=target, job=job, nodes=2, gpus=8, fabric="ib", pins=pins)
    assert main(["cluster", *args, "--serve-smoke", mode, "--out", str(out)]) == 2
    assert not out.exists()
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert text in line and "fix:" in line


def test_golden_serve_job_tiny(tmp_path: Path) -> None:
    """The indexed Job form, one node, the tiny profile: the smoke Job sits beside pod 0."""
    text = _render(tmp_path, "k8s", "--k8s-kind", "job", "--profile", "tiny", nodes=1)
    for obj in load_all(text):
        validate_object(obj)
    check_cluster_golden(text, "serve-job-tiny-1x8.yaml")


# ---- Slurm ---------------------------------------------------------------------------------------


def test_slurm_smoke_is_a_gpu_free_step_on_node_0_against_its_server(tmp_path: Path) -> None:
    script = _render(tmp_path, "slurm")
    _tool_checks(script, tmp_path)
    steps = _steps(tmp_path, script, nodes=2)
    (smoke,) = _smoke_tasks(steps)
    server = _job_step(steps)
    assert len(server) == 2
    opts = smoke["opts"]
    # Beside the server step on node 0 ($MASTER_ADDR), one task, no GPU.
    assert (opts["overlap"], opts["nodes"], opts["ntasks"], opts["gres"]) == ("", "1", "1", "none")
    assert opts["nodelist"] == server[0]["env"]["MASTER_ADDR"] == "gpu-st-0"
    assert smoke["env"]["SLURM_NODEID"] == server[0]["env"]["SLURM_NODEID"] == "0"
    assert opts["container-image"] == IMAGE == server[0]["opts"]["container-image"]
    assert opts["container-mounts"] == f"/var/tmp/epstack/results:{RESULTS}"
    args = _parsed(smoke["argv"])
    served = _sbatch_server_argv(server[0])
    assert args.url == f"http://127.0.0.1:{_flag(served, '--port')}" and _flag(served, "--host") == "0.0.0.0"
    assert not args.sweep and args.health_timeout == 3600 + servesmoke.HEALTH_MARGIN_S
    # The report and node 0's server log, named after the job and its id (4242 here).
    assert str(args.json) == f"{RESULTS}/epstack-serve-4242-smoke.json"
    pattern = server[0]["opts"]["output"]
    assert pattern == "/var/tmp/epstack/results/epstack-serve-%j-node%n.log"
    node0 = pattern.replace("%j", "4242").replace("%n", "0").replace("/var/tmp/epstack/results", RESULTS)
    assert str(args.server_log) == node0
    # The smoke starts first, in the background; the server step holds the job.
    assert script.index(" smoke serve ") < script.index("exec sglang") and "--url" in script


def test_slurm_serve_job_lives_as_long_as_its_server(tmp_path: Path) -> None:
    script = _render(tmp_path, "slurm")
    # A failed smoke leaves the job serving (its report says why); the job's exit is the server's.
    assert _run_sbatch(tmp_path, script, nodes=2, FAKE_SMOKE_EXIT="1").returncode == 0
    assert _run_sbatch(tmp_path, script, nodes=2, FAKE_SERVER_EXIT="7").returncode == 7


def test_slurm_serve_smoke_exit_ends_the_job_with_the_smokes_code(tmp_path: Path) -> None:
    script = _render(tmp_path, "slurm", "--serve-smoke", "exit")
    _tool_checks(script, tmp_path)
    for code in ("0", "1"):
        result = _run_sbatch(tmp_path, script, nodes=2, FAKE_SMOKE_EXIT=code, FAKE_SERVER_SECONDS="1")
        assert result.returncode == int(code), result.stderr


def test_slurm_serve_smoke_exit_stops_the_smoke_when_the_server_ends_first(tmp_path: Path) -> None:
    """A server that fails at start leaves the smoke nothing to wait for: the job ends then, not after
    the smoke's --health-timeout."""
    script = _render(tmp_path, "slurm", "--serve-smoke", "exit")
    started = time.monotonic()
    result = _run_sbatch(tmp_path, script, nodes=2, FAKE_SERVER_EXIT="1", FAKE_SMOKE_SECONDS="30")
    assert time.monotonic() - started < 20
    assert result.returncode != 0
    assert "epstack: the server step ended (exit 1) before the serve smoke" in result.stderr


def test_slurm_without_a_results_directory(tmp_path: Path) -> None:
    script = _render(tmp_path, "slurm", "--results-storage", "none")
    _tool_checks(script, tmp_path)
    steps = _steps(tmp_path, script, nodes=2)
    (smoke,) = _smoke_tasks(steps)
    assert "container-mounts" not in smoke["opts"]
    args = _parsed(smoke["argv"])
    assert str(args.json) == servesmoke.FALLBACK_REPORT and args.server_log is None
    assert "output" not in _job_step(steps)[0]["opts"]  # the server logs to the job's output file


def test_a_results_directory_with_a_percent_sign_is_not_a_pattern(tmp_path: Path) -> None:
    script = _render(tmp_path, "slurm", "--results-storage", "host:/data/100%/results")
    steps = _steps(tmp_path, script, nodes=2)
    assert _job_step(steps)[0]["opts"]["output"] == ("/data/100%%/results/epstack-serve-%j-node%n.log")
    (smoke,) = _smoke_tasks(steps)
    assert smoke["opts"]["container-mounts"] == f"/data/100%/results:{RESULTS}"


def test_golden_sbatch_serve_smoke_exit_tiny(tmp_path: Path) -> None:
    """One node, the tiny profile, --serve-smoke exit: a cluster's acceptance run, ended by the smoke."""
    text = _render(tmp_path, "slurm", "--profile", "tiny", "--serve-smoke", "exit", nodes=1)
    _tool_checks(text, tmp_path)
    check_cluster_golden(text, "serve-smoke-exit-tiny-1x8.sbatch")
