"""Real images from the real templates, on a real Docker engine (offline Debian base)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from epstack.build import OFFLINE_STAGE, build_target, offline_tag
from epstack.cli import main
from epstack.engine import DockerEngine
from epstack.offline_base import OFFLINE_BASE, OFFLINE_PYTHON
from epstack.pins import load_pins
from epstack.render import plan_render, source_date, write_plan
from tests.conftest import PINS, pins_variant

pytestmark = pytest.mark.docker


def test_offline_build_installs_the_pinned_wheels(tmp_path: Path, engine: DockerEngine) -> None:
    pins = load_pins(PINS)
    plan = plan_render(pins, created=source_date(), revision="test")
    write_plan(plan, tmp_path / "ctx")
    report = build_target(
        pins=pins,
        plan=plan,
        context=tmp_path / "ctx",
        target="hopper-ib",
        engine=engine,
        console=Console(stderr=True),
    )
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
    plan = plan_render(pins, created=source_date(), revision="test")
    write_plan(plan, tmp_path / "ctx")
    report = build_target(
        pins=pins,
        plan=plan,
        context=tmp_path / "ctx",
        target="hopper-ib",
        engine=engine,
        console=Console(stderr=True),
    )
    assert offline_tag(pins, "hopper-ib") != offline_tag(load_pins(PINS), "hopper-ib")
    assert "nvidia-nvshmem-cu13==3.5.21" in report.check_output.split()


def test_make_image_path_reports_what_it_could_not_build(
    tmp_path: Path, engine: DockerEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["build", "--pins", str(PINS), "--out", str(tmp_path / "render")]) == 0
    err = capsys.readouterr().err
    assert "cannot pull nvidia/cuda:13.0.3-devel-ubuntu24.04@sha256:" in err
    assert "not built" in err and "built in" in err
