"""Real images from the real templates, on a real Docker engine (offline Debian base)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from rich.console import Console

from epstack.build import OFFLINE_STAGE, BuildReport, build_target, offline_tag
from epstack.cli import main
from epstack.engine import DockerEngine
from epstack.offline_base import OFFLINE_BASE, OFFLINE_PYTHON
from epstack.pins import Pins, load_pins
from epstack.render import RenderPlan, plan_render, source_date, write_plan
from tests.conftest import PINS, pins_variant

pytestmark = pytest.mark.docker


def build_offline(pins: Pins, context: Path, engine: DockerEngine) -> tuple[RenderPlan, BuildReport]:
    """Render into `context` and build hopper-ib there, as `epstack build` does without CUDA images."""
    plan = plan_render(pins, created=source_date(), revision="test")
    write_plan(plan, context)
    report = build_target(
        pins=pins, plan=plan, context=context, target="hopper-ib", engine=engine, console=Console(stderr=True)
    )
    return plan, report


def test_offline_build_installs_the_pinned_wheels(tmp_path: Path, engine: DockerEngine) -> None:
    pins = load_pins(PINS)
    plan, report = build_offline(pins, tmp_path / "ctx", engine)
    tag = offline_tag(pins, "hopper-ib")
    assert report.offline and list(report.built) == [tag]
    assert set(report.not_built) == {image.tag for image in plan.images_for("hopper-ib")}
    assert report.check_output.split() == [
        f"nvidia-nccl-cu13=={pins.nccl_version}",
        f"nvidia-nvshmem-cu13=={pins.nvshmem_version}",
    ]
    labels = engine.labels(tag)
    for key, value in pins.layer_pins("base", "hopper-ib").items():
        assert labels[f"io.epstack.pin.{key.lower()}"] == value
    assert labels["io.epstack.stage"] == OFFLINE_STAGE
    assert labels["io.epstack.offline-base"] == OFFLINE_BASE
    python = engine.run(tag, ["python", "-c", "import sys; print(sys.prefix, sys.version_info[:2])"])
    assert python.split(" ", 1) == ["/opt/epstack/venv", f"({OFFLINE_PYTHON.replace('.', ', ')})\n"]


def test_a_pin_change_reaches_the_image(tmp_path: Path, engine: DockerEngine) -> None:
    """NVSHMEM moved in pins.env -> new tag, and the image holds the new wheel."""
    pins = load_pins(pins_variant(tmp_path, NVSHMEM_VERSION="3.5.21"))
    _, report = build_offline(pins, tmp_path / "ctx", engine)
    assert offline_tag(pins, "hopper-ib") != offline_tag(load_pins(PINS), "hopper-ib")
    assert "nvidia-nvshmem-cu13==3.5.21" in report.check_output.split()


def test_make_image_path_reports_what_it_could_not_build(
    tmp_path: Path, engine: DockerEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["build", "--pins", str(PINS), "--out", str(tmp_path / "render")]) == 0
    err = capsys.readouterr().err
    assert "cannot pull nvidia/cuda:13.0.3-devel-ubuntu24.04@sha256:" in err
    assert "not built" in err and "built in" in err


DRIFT = "nvidia-nvshmem-cu13==3.5.21"


@pytest.fixture(scope="module")
def offline_image(tmp_path_factory: pytest.TempPathFactory, engine: DockerEngine) -> str:
    """The python stage of hopper-ib on the offline base, as `epstack build` makes it."""
    pins = load_pins(PINS)
    build_offline(pins, tmp_path_factory.mktemp("offline") / "ctx", engine)
    return offline_tag(pins, "hopper-ib")


def docker_build(engine: DockerEngine, directory: Path, dockerfile: str) -> subprocess.CompletedProcess[str]:
    """A user's own layer over an epstack image (the way drift usually arrives)."""
    (directory / "Dockerfile").write_text(dockerfile)
    return subprocess.run(
        [
            engine.cli,
            "build",
            "--no-cache",
            "--progress",
            "plain",
            "-t",
            f"epstack-test/{directory.name}",
            str(directory),
        ],
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_drifting_layer_fails_its_build_with_the_table(
    tmp_path: Path, engine: DockerEngine, offline_image: str
) -> None:
    result = docker_build(
        engine,
        tmp_path,
        f"FROM {offline_image}\nRUN uv pip install {DRIFT}\nRUN /opt/epstack/scripts/guard-layer.sh python\n",
    )
    assert result.returncode != 0
    row = next(line for line in result.stderr.splitlines() if "│ nvidia-nvshmem-cu13" in line)
    assert "3.4.5" in row and "3.5.21" in row and "mismatch" in row
    headers = next(line for line in result.stderr.splitlines() if "│ NVSHMEM (headers)" in line)
    assert "3.5.21" in headers and "mismatch" in headers
    assert "guard: 2 of 3 checks failed" in result.stderr


def test_a_correct_layer_passes_its_build(tmp_path: Path, engine: DockerEngine, offline_image: str) -> None:
    result = docker_build(
        engine,
        tmp_path,
        f"FROM {offline_image}\nRUN uv pip install {DRIFT} && uv pip install nvidia-nvshmem-cu13==3.4.5\n"
        "RUN /opt/epstack/scripts/guard-layer.sh python\n",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "guard: ok (3 checks)" in result.stderr


@pytest.fixture(scope="module")
def drifted_image(tmp_path_factory: pytest.TempPathFactory, engine: DockerEngine, offline_image: str) -> str:
    """An image whose own layer moved a pin and skipped the build-time guard."""
    directory = tmp_path_factory.mktemp("drifted")
    built = docker_build(engine, directory, f"FROM {offline_image}\nRUN uv pip install {DRIFT}\n")
    assert built.returncode == 0, built.stderr[-2000:]
    return f"epstack-test/{directory.name}"


@pytest.mark.parametrize(
    ("mode", "exit_code", "ran"),
    [("strict", 1, False), ("warn", 0, True), ("off", 0, True), ("loud", 2, False)],
)
def test_entrypoint_guard_modes_on_a_drifted_image(
    engine: DockerEngine, drifted_image: str, mode: str, exit_code: int, ran: bool
) -> None:
    show = "echo started; grep -c mismatch /tmp/epstack-guard.json || true"
    result = subprocess.run(
        [engine.cli, "run", "--rm", "-e", f"EPSTACK_GUARD={mode}", drifted_image, "sh", "-c", show],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == exit_code, result.stderr
    assert ("started" in result.stdout) == ran
    if mode == "warn":
        # the distribution and its nvshmem_version.h
        assert result.stdout.split() == ["started", "2"], "report written where the entrypoint says"
        assert "3.5.21" in result.stderr


def test_entrypoint_guard_passes_on_the_built_image(engine: DockerEngine, offline_image: str) -> None:
    result = subprocess.run(
        [engine.cli, "run", "--rm", offline_image, "python", "-c", "print('served')"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0 and result.stdout == "served\n"
    assert "guard: ok (3 checks)" in result.stderr
