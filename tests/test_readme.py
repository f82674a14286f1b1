"""The README's quick start ("Five minutes from a clean clone") as a new user runs it: each command read
from README.md and run as written there, by bash, in a copy of the checkout (its tracked files as they
are now; the clone the first line makes) with this test's venv as its `.venv`. A command that exits
non-zero fails. Those that need Docker (`make image`, `docker run`) are named and not run; those that ask
the package index run in the network test. A command this file does not know fails too, so a new one
is never silently skipped."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

SECTION = "## Five minutes from a clean clone"
CLONE = "git clone <this repository> epstack && cd epstack"  # what the copy below stands for
DOCKER = ("make image", "docker run ")
INDEX = (".venv/bin/epstack pins outdated", ".venv/bin/epstack pins bump")
HERE = (".venv/bin/epstack pins check", ".venv/bin/epstack cluster render")


def quick_start(readme: str) -> list[str]:
    """The commands of the section's bash block: comment lines dropped, continued lines joined."""
    block = re.search(rf"{re.escape(SECTION)}\n+```bash\n(.*?)```", readme, re.DOTALL)
    assert block, f"README.md has no bash block under {SECTION!r}"
    commands, current = [], ""
    for line in block.group(1).splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line + "\n"
        if not line.endswith("\\"):
            commands.append(current.rstrip("\n"))
            current = ""
    return commands


def needs(command: str) -> str:
    """What running `command` takes beyond this machine: clone, docker, index, or "" (nothing)."""
    for what, starts in (("clone", (CLONE,)), ("docker", DOCKER), ("index", INDEX), ("", HERE)):
        if command.startswith(starts):
            return what
    raise AssertionError(f"README.md's quick start has a command this test does not know: {command!r}")


COMMANDS = quick_start((REPO / "README.md").read_text())


def commands_needing(what: str) -> list[str]:
    return [command for command in COMMANDS if needs(command) == what]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `git clone` and `make` would leave: every tracked file as the working tree has it, and a
    `.venv` (this test's)."""
    root = tmp_path_factory.mktemp("clone") / "epstack"
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in listed.decode().split("\0"):
        if name and (REPO / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
    (root / ".venv").symlink_to(Path(sys.prefix))
    return root


def run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`command` as a user's shell runs it (its comments and continued lines included)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("EPSTACK_")}  # no --pins
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env={**env, "COLUMNS": "160"},
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_quick_start_starts_with_the_clone_and_every_command_is_known() -> None:
    assert COMMANDS[0] == CLONE
    assert [needs(command) for command in COMMANDS].count("") >= 2
    assert all(command.startswith(DOCKER) for command in commands_needing("docker"))


@pytest.mark.parametrize("command", commands_needing(""), ids=lambda command: " ".join(command.split()[1:3]))
def test_each_command_that_needs_no_docker_exits_0(checkout: Path, command: str) -> None:
    result = run(command, checkout)
    assert result.returncode == 0, f"{command}\n{result.stdout}{result.stderr}"


def test_the_cluster_render_is_the_efa_job_across_nodes(checkout: Path) -> None:
    """The render the quick start ends with (the issue's front door): two pods, every EFA interface
    of a p5.48xlarge each, on the image's digest."""
    (render,) = [command for command in COMMANDS if command.startswith(".venv/bin/epstack cluster render")]
    assert run(render, checkout).returncode == 0
    documents = [doc for doc in yaml.safe_load_all((checkout / "serve.yaml").read_text()) if doc]
    (lws,) = [doc for doc in documents if doc["kind"] == "LeaderWorkerSet"]
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    container = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["vpc.amazonaws.com/efa"] == 32
    assert container["image"] == render.split("--image ")[1].strip()


def test_a_front_door_that_breaks_fails_here(checkout: Path, tmp_path: Path) -> None:
    """The check fails on the fault it exists for: with torch's own NCCL 2.30.7 (below GIN over EFA's
    2.31.2, as shipped before) the README's render exits 2."""
    older = tmp_path / "epstack"
    shutil.copytree(checkout, older, symlinks=True)
    pins = older / "pins.env"
    pins.write_text(re.sub(r"(?m)^NCCL_VERSION=.*$", "NCCL_VERSION=2.30.7", pins.read_text()))
    (render,) = [command for command in COMMANDS if command.startswith(".venv/bin/epstack cluster render")]
    result = run(render, older)
    assert result.returncode == 2 and "GIN over AWS EFA needs NCCL >= 2.31.2" in result.stderr


@pytest.mark.network
@pytest.mark.parametrize("command", commands_needing("index"), ids=lambda command: command.split()[2])
def test_each_command_that_asks_the_package_index_exits_0(checkout: Path, command: str) -> None:
    result = run(command, checkout)
    assert result.returncode == 0, f"{command}\n{result.stdout}{result.stderr}"
