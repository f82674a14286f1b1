"""sbatch scripts: bash -n, shellcheck, and run for real with stand-ins for srun and scontrol (no Slurm
here) that record each task's environment, so the smoke launcher sees what a task would see."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from epstack.cluster.image import parse_image
from epstack.cluster.jobs import IMAGE_ENTRYPOINT
from epstack.cluster.slurm import squashfs_path
from epstack.smoke import launchenv as V
from epstack.smoke.launch import detect
from tests.cluster.conftest import DIGEST, IMAGE, check_cluster_golden, render, render_args
from tests.conftest import PINS, REPO, venv_tool

# srun stand-in: for each of --nodes (default: the job's) x --ntasks-per-node tasks, the environment srun
# would give it (its node: --nodelist, else the job's node --relative + its index in the step, as
# SLURMD_NODENAME), recorded with the container image and the task's command as JSON lines (the command
# is not run). A step then takes FAKE_<ROLE>_SECONDS and exits FAKE_<ROLE>_EXIT, its role "smoke"
# (epstack smoke serve), "prefill" or "decode" (sglang in that --disaggregation-mode), "server" (sglang)
# or "other".
FAKE_SRUN = r"""#!/usr/bin/env python3
import json, os, sys, time
args = sys.argv[1:]
opts = {}
while args and args[0].startswith("--"):
    key, _, value = args.pop(0)[2:].partition("=")
    opts[key] = value
nodes = int(opts.get("nodes", os.environ["FAKE_NODES"]))
per_node = int(opts.get("ntasks-per-node", "1"))
text = " ".join(args)
role = "smoke" if args[1:3] == ["smoke", "serve"] else "server" if "sglang" in text else "other"
for mode in ("prefill", "decode"):
    role = mode if f"--disaggregation-mode {mode} " in text else role
with open(os.environ["FAKE_LOG"], "a") as log:
    for node in range(nodes):
        host = opts.get("nodelist") or f"gpu-st-{int(opts.get('relative', '0')) + node}"
        for local in range(per_node):
            env = dict(os.environ, SLURM_PROCID=str(node * per_node + local), SLURM_LOCALID=str(local),
                       SLURM_NODEID=str(node), SLURMD_NODENAME=host, SLURM_NTASKS=str(nodes * per_node),
                       SLURM_NTASKS_PER_NODE=str(per_node), SLURM_NNODES=str(nodes),
                       SLURM_STEP_NODELIST=os.environ["SLURM_JOB_NODELIST"])
            log.write(json.dumps({"opts": opts, "argv": args, "env": env}) + "\n")
time.sleep(float(os.environ.get(f"FAKE_{role.upper()}_SECONDS", "0")))
sys.exit(int(os.environ.get(f"FAKE_{role.upper()}_EXIT", "0")))
"""
FAKE_SCONTROL = """#!/bin/sh
[ "$1 $2" = "show hostnames" ] || exit 2
i=0; while [ "$i" -lt "$FAKE_NODES" ]; do echo "gpu-st-$i"; i=$((i + 1)); done
"""


def _run_sbatch(
    tmp_path: Path, script: str, nodes: int, memlock: str = "unlimited", **fake: str
) -> subprocess.CompletedProcess[str]:
    """Run the script with the stand-ins first on PATH, `fake` (FAKE_SMOKE_EXIT="1" ...) in their
    environment. `ulimit -l` answers `memlock` (a bash function from BASH_ENV: this machine's own limit
    cannot be raised)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "bash_env").write_text(f'ulimit() {{ [ "$*" = "-l" ] && echo {memlock}; }}\n')
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "BASH_ENV": str(tmp_path / "bash_env"),
        "FAKE_NODES": str(nodes),
        "FAKE_LOG": str(tmp_path / "srun.jsonl"),
        "SLURM_JOB_NODELIST": f"gpu-st-[0-{nodes - 1}]",
        "SLURM_JOB_ID": "4242",
        **fake,
    }
    return subprocess.run(["bash", path], env=env, capture_output=True, text=True, check=False, timeout=60)


def _steps(tmp_path: Path, script: str, nodes: int) -> list[dict[str, Any]]:
    """Every task of every srun the script ran."""
    (tmp_path / "srun.jsonl").unlink(missing_ok=True)
    result = _run_sbatch(tmp_path, script, nodes)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in (tmp_path / "srun.jsonl").read_text().splitlines()]


def _job_step(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tasks of the job's step (in its container, through the image's entrypoint), not the host
    steps before it nor the serve smoke beside it."""
    return [
        task
        for task in steps
        if "container-image" in task["opts"] and tuple(task["argv"][:2]) == IMAGE_ENTRYPOINT
    ]


def _tasks(tmp_path: Path, script: str, nodes: int) -> list[dict[str, Any]]:
    return _job_step(_steps(tmp_path, script, nodes))


def expanded(task: dict[str, Any]) -> list[str]:
    """SGLang's arguments as a serve task's `bash -c` runs them, with its own SLURM_NODEID and the
    exported MASTER_ADDR."""
    hold_env, entry, bash, dash_c, inner = task["argv"]
    assert (hold_env, entry, bash, dash_c) == (*IMAGE_ENTRYPOINT, "bash", "-c")
    words = subprocess.run(
        ["bash", "-c", inner.replace("exec ", 'printf "%s\\n" ', 1)],
        env={"SLURM_NODEID": task["env"]["SLURM_NODEID"], "MASTER_ADDR": task["env"]["MASTER_ADDR"]},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert words[:4] == ["sglang", "serve", "--model-type", "llm"]
    return words[4:]


def _tool_checks(script: str, tmp_path: Path) -> None:
    path = tmp_path / "check.sbatch"
    path.write_text(script)
    subprocess.run(["bash", "-n", path], check=True)
    result = subprocess.run(
        [venv_tool("shellcheck"), "-s", "bash", path], check=False, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize(
    ("job", "fabric", "nodes"),
    [(j, f, n) for j in ("elastic-smoke", "serve") for f in ("efa", "ib") for n in (1, 2, 4)],
)
def test_sbatch_passes_bash_n_and_shellcheck(tmp_path: Path, job: str, fabric: str, nodes: int) -> None:
    pins = PINS
    script = render(
        tmp_path, *render_args(target="slurm", job=job, nodes=nodes, gpus=8, fabric=fabric, pins=pins)
    )
    _tool_checks(script, tmp_path)
    assert f"--container-image={IMAGE}" in script
    assert "@sha256:" in script and f"#SBATCH --nodes={nodes}" in script


def test_smoke_tasks_are_the_ranks_the_launcher_expects(tmp_path: Path) -> None:
    pins = PINS
    script = render(
        tmp_path, *render_args(target="slurm", job="elastic-smoke", nodes=2, gpus=4, fabric="ib", pins=pins)
    )
    tasks = _tasks(tmp_path, script, nodes=2)
    assert len(tasks) == 8  # one task per GPU
    for procid, task in enumerate(tasks):
        assert task["opts"]["container-image"] == IMAGE
        assert task["argv"][:5] == [*IMAGE_ENTRYPOINT, "epstack", "smoke", "elastic"]
        launch = detect(task["env"])
        assert (launch.launcher, launch.rank, launch.world_size) == ("slurm", procid, 8)
        assert (launch.master_addr, launch.master_port) == ("gpu-st-0", 29500)
        assert launch.local_rank == procid % 4 and launch.node_rank == procid // 4
    exported = set(tasks[0]["opts"]["container-env"].split(","))
    launcher_names = {value for key, value in vars(V).items() if key.isupper() and isinstance(value, str)}
    assert exported & launcher_names == set(V.LAUNCHERS["slurm"].job_sets)


def test_serve_task_expands_its_node_rank_inside_the_task(tmp_path: Path) -> None:
    pins = PINS
    script = render(
        tmp_path, *render_args(target="slurm", job="serve", nodes=2, gpus=8, fabric="efa", pins=pins)
    )
    tasks = _tasks(tmp_path, script, nodes=2)
    assert len(tasks) == 2  # one task per node: SGLang starts a process per GPU
    for node, task in enumerate(tasks):
        argv = expanded(task)
        assert argv[argv.index("--node-rank") + 1] == str(node)
        assert argv[argv.index("--dist-init-addr") + 1] == "gpu-st-0:5000"
        assert task["env"]["SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] == "4096"
        assert task["env"]["FI_EFA_USE_DEVICE_RDMA"] == "1"


def test_golden_sbatch_serve(tmp_path: Path) -> None:
    pins = PINS
    args = render_args(target="slurm", job="serve", nodes=2, gpus=8, fabric="ib", pins=pins)
    check_cluster_golden(render(tmp_path, *args, "--squashfs-dir", "/scratch/images"), "serve-ib-2x8.sbatch")


def test_pull_script_and_render_agree_on_the_squashfs_file(tmp_path: Path) -> None:
    pull = render(
        tmp_path,
        "pull",
        "--platform",
        "slurm",
        "--image",
        IMAGE,
        "--nodes",
        "4",
        "--squashfs-dir",
        "/scratch/images",
        name="pull",
    )
    _tool_checks(pull, tmp_path)
    sqsh = squashfs_path("/scratch/images", parse_image(IMAGE))
    assert sqsh == f"/scratch/images/epstack-{DIGEST[7:19]}.sqsh"
    assert shlex.quote(f"docker://{IMAGE}") in pull and sqsh in pull and "#SBATCH --nodes=4" in pull
    pins = PINS
    args = render_args(target="slurm", job="serve", nodes=2, gpus=8, fabric="ib", pins=pins)
    sbatch = render(tmp_path, *args, "--squashfs-dir", "/scratch/images")
    assert f"--container-image={sqsh}" in sbatch


def test_sbatch_stops_before_srun_when_memlock_is_limited(tmp_path: Path) -> None:
    pins = PINS
    script = render(
        tmp_path, *render_args(target="slurm", job="elastic-smoke", nodes=2, gpus=8, fabric="ib", pins=pins)
    )
    result = _run_sbatch(tmp_path, script, nodes=2, memlock="65536")
    assert result.returncode == 1
    assert "ulimit -l is 65536" in result.stderr and "fix:" in result.stderr
    assert not (tmp_path / "srun.jsonl").exists()


def test_the_entrypoint_pyxis_runs_is_the_images_own() -> None:
    """The base layer's stages set it; the layers above inherit it."""
    rendered = (REPO / "tests" / "golden" / "hopper-efa" / "base.Dockerfile").read_text()
    entrypoints = {line for line in rendered.splitlines() if line.startswith("ENTRYPOINT")}
    assert entrypoints == {f"ENTRYPOINT {json.dumps(list(IMAGE_ENTRYPOINT))}"}
