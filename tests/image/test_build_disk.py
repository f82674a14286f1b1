"""`epstack build` refuses to start a build the engine's disk cannot hold (exit 3, nothing built), and
says where the space is and how to free it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from epstack.commands.main import main
from epstack.errors import EnvironmentProblem
from epstack.image.build import ensure_disk
from epstack.image.engine import DockerEngine
from tests.conftest import PINS


def fake_docker(tmp_path: Path, data_root: Path) -> tuple[Path, Path]:
    """A docker CLI that answers every query, names `data_root` as its DockerRootDir, and logs argv."""
    log = tmp_path / "argv"
    cli = tmp_path / "docker"
    cli.write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\ncase "$*" in *DockerRootDir*) echo {data_root} ;; esac\n'
    )
    cli.chmod(0o755)
    return cli, log


def free_gb(path: Path) -> int:
    return shutil.disk_usage(path).free // 10**9


def test_a_data_root_with_less_free_space_than_asked_is_refused_with_the_fix(tmp_path: Path) -> None:
    cli, _ = fake_docker(tmp_path, tmp_path)
    engine = DockerEngine(cli=str(cli), buildx=True)
    # Other processes write to this disk meanwhile (a build, another test): the free space read is the
    # data root's, give or take what they wrote between the two reads, and the ask is one read's + 2 GB.
    root, free = engine.free_disk() or (None, 0)
    assert root == tmp_path and abs(free - shutil.disk_usage(tmp_path).free) < 10**9
    asked = free_gb(tmp_path) + 2
    with pytest.raises(EnvironmentProblem) as refused:
        ensure_disk(engine, asked)
    message = str(refused.value)
    assert message.startswith(f"{tmp_path} (the Docker engine's data root) has ")
    assert f"under the {asked} GB" in message
    assert "docker builder prune" in message and "--min-free-gb 0" in message


def test_enough_free_space_or_no_check_lets_the_build_start(tmp_path: Path) -> None:
    cli, _ = fake_docker(tmp_path, tmp_path)
    engine = DockerEngine(cli=str(cli), buildx=True)
    ensure_disk(engine, 0)
    if free_gb(tmp_path) >= 1:
        ensure_disk(engine, free_gb(tmp_path))


def test_an_engine_whose_data_root_is_not_here_is_not_checked(tmp_path: Path) -> None:
    cli, _ = fake_docker(tmp_path, tmp_path / "on-another-host")
    engine = DockerEngine(cli=str(cli), buildx=True)
    assert engine.free_disk() is None
    ensure_disk(engine, 10**9)


def test_build_stops_before_any_image_when_the_disk_is_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli, log = fake_docker(tmp_path, tmp_path)
    monkeypatch.setenv("EPSTACK_DOCKER", str(cli))
    monkeypatch.setenv("PATH", str(tmp_path))  # no other docker CLI is found first
    argv = ["build", "--pins", str(PINS), "--out-dir", str(tmp_path / "render")]
    assert main([*argv, "--min-free-gb", str(free_gb(tmp_path) + 1)]) == 3
    assert "the Docker engine's data root" in capsys.readouterr().err
    assert not [line for line in log.read_text().splitlines() if line.startswith(("build ", "buildx build "))]


@pytest.mark.parametrize("value", ["-1", "1.5", "many"])
def test_min_free_gb_takes_a_whole_number_of_gigabytes(value: str) -> None:
    assert main(["build", "--pins", str(PINS), "--min-free-gb", value]) == 2


@pytest.mark.docker
def test_the_real_engine_keeps_its_data_on_this_machine(engine: DockerEngine) -> None:
    found = engine.free_disk()
    assert found is not None
    root, free = found
    assert root.is_dir() and free == shutil.disk_usage(root).free
