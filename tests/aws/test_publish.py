"""`epstack publish push|pull` with a real Docker engine and a real registry on 127.0.0.1:
guard inside each image, push, digest read back, pull by digest; stand-ins never leave loopback."""

from __future__ import annotations

import hashlib
import subprocess
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

from epstack.commands.main import main
from epstack.httpclient import is_loopback
from epstack.image.build import BuildReport, BuiltImage, build_target, standin_ref, write_build_report
from epstack.image.buildmanifest import BUILD_MANIFEST
from epstack.image.engine import DockerEngine
from epstack.image.render import plan_render, source_date, write_plan
from epstack.pins.load import load_pins
from tests.conftest import PINS

pytestmark = [pytest.mark.docker, pytest.mark.network]
TARGET = "hopper-ib"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1:5000", True),
        ("127.0.0.1", True),
        ("localhost:5000", True),
        ("[::1]:5000", True),
        ("::1", True),
        ("10.0.0.1:5000", False),
        ("registry.example.com", False),
        ("[2001:db8::1]:5000", False),
    ],
)
def test_only_loopback_hosts_are_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory, build_engine: DockerEngine) -> Path:
    """hopper-ib on the CUDA stand-in as `epstack build --report` records it (BuildKit's cache makes
    this quick when the Docker build tests ran first: same render, same layers)."""
    pins = load_pins(PINS)
    context = tmp_path_factory.mktemp("publish") / "ctx"
    plan = plan_render(pins, created=source_date(), revision="test")
    write_plan(plan, context)
    built = build_target(
        pins=pins,
        plan=plan,
        context=context,
        target=TARGET,
        engine=build_engine,
        console=Console(stderr=True),
    )
    path = context.parent / "build-report.json"
    write_build_report(path, built)
    return path


def manifest_digest(registry: str, repository: str, reference: str) -> str:
    """sha256 of the manifest bytes the registry serves: what a digest is."""
    request = urllib.request.Request(
        f"http://{registry}/v2/{repository}/manifests/{reference}",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return "sha256:" + hashlib.sha256(response.read()).hexdigest()


def test_a_stand_in_is_never_pushed_to_ecr(
    report: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    ecr = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
    assert (
        main(["publish", "push", str(report), "--registry", ecr, "--out-dir", str(out), "--pins", str(PINS)])
        == 2
    )
    err = capsys.readouterr().err
    tag = standin_ref(load_pins(PINS).image_ref("base", TARGET).replace(":base-", ":devel-"))
    assert f"{tag} is a stand-in (built without the CUDA base); stand-ins go only to a loopback" in err
    assert f"registry, not {ecr}; fix: build where nvidia/cuda can be pulled" in err
    assert not out.exists()


def test_push_guards_pushes_and_pull_comes_back_by_digest(
    report: Path, registry: str, tmp_path: Path, engine: DockerEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    args = [
        "publish",
        "push",
        str(report),
        "--registry",
        f"{registry}/epstack-cb",
        "--out-dir",
        str(out),
        "--pins",
        str(PINS),
        "--push",
        "top",
    ]
    assert main(args) == 0, capsys.readouterr().err
    tag = standin_ref(load_pins(PINS).image_ref("base", TARGET))
    devel, image = BUILD_MANIFEST.read(out / "build-manifest.json").images
    assert devel.stage == "devel" and not devel.pushed, "--push top: the base image only"
    repository, image_tag = f"epstack-cb/{tag.split(':')[0]}", tag.split(":")[1]
    assert image.uri == f"{registry}/{repository}:{image_tag}" and image.pushed and image.standin
    assert image.digest == manifest_digest(registry, repository, image_tag)
    assert image.pins_hash == load_pins(PINS).layer_hash("base", TARGET) and image_tag.endswith(
        image.pins_hash
    )
    suites = {
        suite.get("name"): suite for suite in ET.parse(out / "guard-junit.xml").getroot().iter("testsuite")
    }
    assert set(suites) == {devel.tag, tag}, "every built image is guarded, pushed or not"
    assert (suites[tag].get("tests"), suites[tag].get("failures")) == (str(image.guard_checks), "0")
    env = dict(line.split("=", 1) for line in (out / "image.env").read_text().splitlines())
    assert env["IMAGE_DIGEST"] == image.digest and env["IMAGE_URI"] == image.uri
    assert not engine.image_exists(image.uri), "the registry tag is removed locally after the push"

    # publishing again finds the tag already naming the image
    assert main(args) == 0
    assert "not pushed again" in capsys.readouterr().err

    pulled = tmp_path / "pulled"
    assert (
        main(
            [
                "publish",
                "pull",
                "--registry",
                f"{registry}/epstack-cb",
                "--image",
                tag,
                "--out-dir",
                str(pulled),
            ]
        )
        == 0
    )
    ref = f"{registry}/{repository}@{image.digest}"
    try:
        assert ref in engine.repo_digests(ref)
        assert (pulled / "image.env").read_text() == (out / "image.env").read_text()
    finally:
        subprocess.run([engine.cli, "image", "rm", ref], capture_output=True, check=False)


def test_a_failing_guard_pushes_nothing(
    report: Path, registry: str, tmp_path: Path, engine: DockerEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    """An image whose own layer moved a pin after the build-time guard (the drift publish catches)."""
    tag = standin_ref(load_pins(PINS).image_ref("base", TARGET))
    drifted = f"epstack-cb-drift:{tag.split(':')[1]}"
    (tmp_path / "Dockerfile").write_text(f"FROM {tag}\nRUN uv pip install nvidia-nvshmem-cu13==3.5.21\n")
    subprocess.run(
        [engine.cli, "build", "-q", "-t", drifted, str(tmp_path)],
        check=True,
        capture_output=True,
        env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"},
    )
    try:
        bad_report = tmp_path / "report.json"
        drifted_image = BuiltImage(ref=drifted, layer="base", stage="base", seconds=0.0, size=0)
        write_build_report(bad_report, BuildReport(target=TARGET, standin=None, built=[drifted_image]))
        out = tmp_path / "out"
        args = [
            "publish",
            "push",
            str(bad_report),
            "--registry",
            registry,
            "--out-dir",
            str(out),
            "--pins",
            str(PINS),
        ]
        assert main(args) == 1
        assert f"the guard failed in {drifted}" in capsys.readouterr().err
        failures = [
            c.get("name")
            for c in ET.parse(out / "guard-junit.xml").getroot().iter("testcase")
            if c.find("failure") is not None
        ]
        # The pinned row and its headers row; nvidia-cuda-cccl 13.3, which NVSHMEM 3.5.21 brought along
        # (another CUDA minor); then the closure's summary, its extra row for cccl (an extra row fails
        # as the guard says) and its row for the moved wheel.
        assert failures == [
            "nvidia-nvshmem-cu13",
            "NVSHMEM (headers)",
            "nvidia-cuda-cccl",
            "Python distributions",
            "nvidia-cuda-cccl",
            "nvidia-nvshmem-cu13",
        ]
        assert not (out / "build-manifest.json").exists()
        with pytest.raises(urllib.error.HTTPError):
            manifest_digest(registry, "epstack-cb-drift", tag.split(":")[1])
    finally:
        subprocess.run([engine.cli, "image", "rm", drifted], capture_output=True, check=False)
