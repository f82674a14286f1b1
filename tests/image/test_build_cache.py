"""`epstack build --cache-registry`: the BuildKit registry-cache arguments a build passes (a docker
CLI stand-in records its argv; the real buildx cache export was not run here: no buildx)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from epstack.image.build import provenance_args, registry_cache
from epstack.image.engine import DockerEngine
from epstack.image.render import plan_render, source_date
from epstack.pins.load import load_pins
from tests.conftest import PINS

REGISTRY = "123456789012.dkr.ecr.us-east-1.amazonaws.com"


def test_buildx_builds_read_and_write_an_ecr_compatible_registry_cache(tmp_path: Path) -> None:
    pins = load_pins(PINS)
    images = plan_render(pins, created=source_date(), revision="test").images_for("hopper-efa")
    image = next(each for each in images if each.layer == "sglang")
    log = tmp_path / "argv"
    cli = tmp_path / "docker"
    cli.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {log}\n')
    cli.chmod(0o755)
    engine = DockerEngine(cli=str(cli), buildx=True)
    cache = registry_cache(pins, engine, REGISTRY, Console(quiet=True))
    engine.build(context=tmp_path, dockerfile="d", stage="s", tag="t", args={}, labels={}, cache=cache(image))
    argv = log.read_text().splitlines()
    ref = f"type=registry,ref={REGISTRY}/epstack-cache:hopper-efa-sglang"
    assert argv[:3] == ["buildx", "build", "--load"]
    assert argv[argv.index("--cache-from") + 1] == ref
    assert argv[argv.index("--cache-to") + 1] == f"{ref},mode=max,image-manifest=true,oci-mediatypes=true"


def test_the_classic_builder_says_it_has_no_registry_cache(tmp_path: Path) -> None:
    pins = load_pins(PINS)
    console = Console(record=True, width=200)
    cache = registry_cache(pins, DockerEngine(cli="/usr/bin/docker", buildx=False), REGISTRY, console)
    image = plan_render(pins, created=source_date(), revision="test").images_for("hopper-efa")[0]
    assert cache(image) == []
    said = "no registry cache: /usr/bin/docker has no buildx; local BuildKit cache only"
    assert said in console.export_text()
    assert registry_cache(pins, DockerEngine(cli="x", buildx=True), "", console)(image) == []


def fake_cli(tmp_path: Path, driver_status: str) -> tuple[Path, Path]:
    """A docker CLI stand-in: answers `info` with `driver_status`, records any other argv."""
    log, cli = tmp_path / "argv", tmp_path / "docker"
    answer = f"if [ \"$1\" = info ]; then echo '{driver_status}'; exit 0; fi"
    cli.write_text(f'#!/bin/sh\n{answer}\nprintf "%s\\n" "$@" > {log}\n')
    cli.chmod(0o755)
    return cli, log


def test_buildx_with_an_attestation_store_gets_provenance(tmp_path: Path) -> None:
    """The flag path (no such builder here): buildx over the containerd image store keeps attestations."""
    cli, log = fake_cli(tmp_path, '[["driver-type","io.containerd.snapshotter.v1"]]')
    engine = DockerEngine(cli=str(cli), buildx=True)
    attest = provenance_args(engine, Console(quiet=True))
    engine.build(context=tmp_path, dockerfile="d", stage="s", tag="t", args={}, labels={}, attest=attest)
    assert "--provenance=mode=max" in log.read_text().splitlines()


def test_builders_without_attestations_say_so(tmp_path: Path) -> None:
    """Debian's docker 20.10 here: BuildKit in the classic CLI, no buildx, so no --provenance flag."""
    console = Console(record=True, width=200)
    assert provenance_args(DockerEngine(cli="/usr/bin/docker", buildx=False), console) == []
    cli, _ = fake_cli(tmp_path, '[["Backing Filesystem","extfs"]]')
    assert provenance_args(DockerEngine(cli=str(cli), buildx=True), console) == []
    said = console.export_text()
    assert "no provenance attestation: /usr/bin/docker has no buildx" in said
    assert "buildx --load into an image store without attestations" in said
