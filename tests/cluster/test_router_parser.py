"""The router's commands (Kubernetes and Slurm), parsed by the pinned router's own parser: smg's
RouterArgs (smg==1.13.0 with --no-deps into .cache/, 37 MB; its parser needs only its own Rust module).
A renamed flag fails here, not in a cluster. Marked network: the first run installs it
(tests/cluster/sglang_env.install)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from epstack.cluster import router
from tests.cluster import sglang_env, test_roles_slurm
from tests.cluster.conftest import ROUTER_IMAGE, load_all, render, render_args
from tests.cluster.test_slurm import _run_sbatch
from tests.cluster.validation import validate_object
from tests.conftest import PINS, REPO

pytestmark = pytest.mark.network

# Runs in the smg folder: each argv through RouterArgs' argparse and from_cli_args; the fields read back.
PARSE = """
import argparse, json, sys
from smg.router_args import RouterArgs
out = []
for argv in json.load(sys.stdin):
    parser = argparse.ArgumentParser(exit_on_error=False)
    RouterArgs.add_cli_args(parser)
    try:
        args = RouterArgs.from_cli_args(parser.parse_args(argv))
        args._validate_router_args()
    except (argparse.ArgumentError, SystemExit, ValueError) as exc:
        out.append({"ok": False, "error": str(exc)})
        continue
    fields = ("host", "port", "policy", "service_discovery", "selector", "service_discovery_port",
              "service_discovery_namespace", "prometheus_host", "prometheus_port", "worker_urls",
              "worker_startup_timeout_secs", "pd_disaggregation", "prefill_selector", "decode_selector",
              "prefill_urls", "decode_urls")
    out.append({"ok": True, "values": {name: getattr(args, name) for name in fields}})
print(json.dumps(out))
"""


def _parse(argvs: list[list[str]]) -> list[dict[str, Any]]:
    version = router.PACKAGE.split("==")[1]
    where = sglang_env.install(
        sglang_env.REPO / ".cache" / f"smg-{version}", router.PACKAGE, [router.PACKAGE]
    )
    result = subprocess.run(
        [sys.executable, "-c", PARSE],
        input=json.dumps(argvs),
        env=dict(os.environ, PYTHONPATH=str(where)),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    parsed: list[dict[str, Any]] = json.loads(result.stdout)
    return parsed


def _router_command(objects: list[dict[str, Any]], namespace: str) -> list[str]:
    """The router's arguments as Kubernetes passes them: $(POD_NAMESPACE) expanded to its pod's
    namespace, which the downward API gives it."""
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    (env,) = container["env"]
    assert env == {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}
    command: list[str] = container["command"]
    assert command[:2] == ["smg", "launch"]
    return [word.replace("$(POD_NAMESPACE)", namespace) for word in command[2:]]


@pytest.mark.parametrize("kind", ["lws", "job"])
def test_the_rendered_router_parses_and_finds_the_leaders(tmp_path: Path, kind: str) -> None:
    pins = PINS
    args = render_args(target="k8s", job="serve", nodes=2, gpus=8, fabric="ib", pins=pins)
    objects = load_all(
        render(
            tmp_path, *args, "--router-image", ROUTER_IMAGE, "--namespace", "inference", "--k8s-kind", kind
        )
    )
    for obj in objects:
        validate_object(obj)
    command = _router_command(objects, "inference")
    renamed = [*command, "--service-discovery-prt", "1"]  # the control: a misspelt flag is refused
    good, bad = _parse([command, renamed])
    assert not bad["ok"]
    assert good["ok"], good
    values = good["values"]
    (http,) = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == "epstack-serve-http"]
    # It discovers exactly the pods the job's HTTP Service routes to: node 0 of each group.
    assert values["selector"] == http["spec"]["selector"]
    assert values["service_discovery"] is True and values["service_discovery_namespace"] == "inference"
    assert (values["port"], values["service_discovery_port"], values["prometheus_port"]) == (
        30000,
        30000,
        29000,
    )
    (binding,) = [o for o in objects if o["kind"] == "RoleBinding"]
    assert binding["subjects"][0]["namespace"] == "inference"
    (smoke,) = [o for o in objects if o["metadata"]["name"] == "epstack-serve-smoke"]
    url = smoke["spec"]["template"]["spec"]["containers"][0]["command"]
    assert url[url.index("--url") + 1] == "http://epstack-serve-router:30000"  # the smoke goes through it


def test_the_slurm_router_parses_and_routes_to_node_0s_server(tmp_path: Path) -> None:
    pins = PINS
    args = render_args(target="slurm", job="serve", nodes=2, gpus=8, fabric="ib", pins=pins)
    script = render(tmp_path, *args, "--router-image", ROUTER_IMAGE)
    (line,) = [line for line in script.splitlines() if line.lstrip().startswith("smg launch")]
    command = shlex.split(line.removesuffix(" &"))
    assert command[:2] == ["smg", "launch"]
    (good,) = _parse([command[2:]])
    assert good["ok"], good
    values = good["values"]
    assert values["worker_urls"] == ["http://127.0.0.1:30000"] and values["service_discovery"] is False
    assert (values["port"], values["prometheus_port"]) == (router.SLURM_PORT, router.METRICS_PORT)
    assert values["worker_startup_timeout_secs"] == 4200 and values["policy"] == router.POLICY


def test_the_pd_router_parses_and_finds_each_roles_leaders(tmp_path: Path) -> None:
    pins = PINS
    args = render_args(target="k8s", job="serve", nodes=2, gpus=8, fabric="ib", pins=pins)
    text = render(
        tmp_path, *args, "--disaggregation", "--router-image", ROUTER_IMAGE, "--locks", str(REPO / "locks")
    )
    objects = load_all(text)
    (good,) = _parse([_router_command(objects, "default")])
    assert good["ok"], good
    values = good["values"]
    assert values["pd_disaggregation"] is True and values["selector"] == {}
    for role in ("prefill", "decode"):
        (http,) = [o for o in objects if o["metadata"]["name"] == f"epstack-serve-{role}-http"]
        assert values[f"{role}_selector"] == http["spec"]["selector"]


def test_the_slurm_pd_router_parses_and_routes_to_each_roles_leader(tmp_path: Path) -> None:
    """As the batch script starts it: each leader's host read from the job's node list (the stand-ins')."""
    script = test_roles_slurm._render(tmp_path)
    assert _run_sbatch(tmp_path, script, nodes=4, FAKE_PREFILL_SECONDS="1").returncode == 0
    (route,) = [
        task for task in test_roles_slurm._recorded(tmp_path) if task["argv"][:2] == ["smg", "launch"]
    ]
    (good,) = _parse([route["argv"][2:]])
    assert good["ok"], good
    values = good["values"]
    assert values["pd_disaggregation"] is True and values["worker_urls"] == []
    assert values["prefill_urls"] == [["http://gpu-st-0:30000", 8998]]
    assert values["decode_urls"] == ["http://gpu-st-2:30000"]
    assert (values["port"], values["worker_startup_timeout_secs"]) == (router.SLURM_PORT, 4200)
