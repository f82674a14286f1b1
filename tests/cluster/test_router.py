"""SGLang's router on Slurm: a step of one task on node 0 without a GPU, in its own image, in front of
the job's server, and the serve smoke calling it. The script runs with the srun stand-in; the router's
flags are parsed by smg's own parser in tests/cluster/test_router_parser.py."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from epstack.cluster import router, servesmoke
from epstack.commands.main import build_parser, main
from tests.cluster.conftest import ROUTER_IMAGE, check_cluster_golden, render, render_args
from tests.cluster.test_slurm import _job_step, _run_sbatch, _steps, _tool_checks
from tests.conftest import PINS

FLAGS = ["--profile", "deepseek-v3", "--router-image", ROUTER_IMAGE]


def _render(tmp_path: Path, *extra: str) -> str:
    pins = PINS
    args = render_args(target="slurm", job="serve", nodes=2, gpus=8, fabric="ib", pins=pins, extra=extra)
    return render(tmp_path, *args)


def _role(steps: list[dict[str, Any]], first: list[str]) -> list[dict[str, Any]]:
    return [step for step in steps if step["argv"][: len(first)] == first]


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_the_router_is_a_gpu_free_step_on_node_0_in_front_of_the_server(tmp_path: Path) -> None:
    script = _render(tmp_path, *FLAGS)
    _tool_checks(script, tmp_path)
    steps = _steps(tmp_path, script, nodes=2)
    (route,) = _role(steps, ["smg", "launch"])
    server = _job_step(steps)
    opts = route["opts"]
    assert (opts["overlap"], opts["nodes"], opts["ntasks"], opts["gres"]) == ("", "1", "1", "none")
    assert opts["nodelist"] == server[0]["env"]["MASTER_ADDR"] == "gpu-st-0"
    assert opts["container-image"] == ROUTER_IMAGE
    argv = route["argv"]
    # It routes to the server on its own node, waits for it as long as the smoke does, and listens
    # beside it on another port.
    served_port = _flag(server[0]["argv"][-1].split(), "--port")
    assert _flag(argv, "--worker-urls") == f"http://127.0.0.1:{served_port}"
    assert _flag(argv, "--port") == str(router.SLURM_PORT) != served_port
    assert _flag(argv, "--worker-startup-timeout-secs") == "4200"  # --startup-timeout 3600 + 600
    # The serve smoke goes through it.
    (smoke,) = _role(steps, [servesmoke.PROGRAM, "smoke", "serve"])
    parsed: argparse.Namespace = build_parser().parse_args(smoke["argv"][1:])
    assert parsed.url == f"http://127.0.0.1:{router.SLURM_PORT}"
    # Started first, in the background: the server step holds the job.
    assert script.index("smg launch") < script.index(" smoke serve ") < script.index("exec sglang")
    assert f"http://$MASTER_ADDR:{router.SLURM_PORT}" in script  # the header tells clients where


@pytest.mark.parametrize("mode", ["on", "exit", "off"])
def test_the_job_ends_as_it_did_without_a_router(tmp_path: Path, mode: str) -> None:
    script = _render(tmp_path, *FLAGS, "--serve-smoke", mode)
    _tool_checks(script, tmp_path)
    quick = {"FAKE_SERVER_SECONDS": "1"} if mode == "exit" else {}
    assert _run_sbatch(tmp_path, script, nodes=2, FAKE_SMOKE_EXIT="3", **quick).returncode == (
        3 if mode == "exit" else 0
    )
    if mode != "exit":  # (exit: tests/cluster/test_servesmoke.py, the server ending first)
        assert _run_sbatch(tmp_path, script, nodes=2, FAKE_SERVER_EXIT="7").returncode == 7
    assert "smg launch" in script


def test_golden_sbatch_router_deepseek_v3(tmp_path: Path) -> None:
    check_cluster_golden(_render(tmp_path, *FLAGS), "serve-deepseek-v3-router-ib-2x8.sbatch")


def test_the_router_is_for_serve_jobs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pins = PINS
    base = render_args(target="slurm", job="elastic-smoke", nodes=2, gpus=8, fabric="ib", pins=pins)
    assert main(["cluster", *base, "--router-image", ROUTER_IMAGE, "--out", str(tmp_path / "x")]) == 2
    assert "fix: use it with --job serve" in capsys.readouterr().err
