"""CI's end-to-end check of buildspecs/build.yml: `epstack codebuild run-local` builds what this
machine can build (devel and base on the CUDA stand-in; deepep and sglang where sources are given),
guards it inside the image, pushes it to a real registry on 127.0.0.1, exports IMAGE_URI and
IMAGE_DIGEST, and the image comes back by that digest.

Cost: the same target and render as the Docker build tests, so BuildKit's cache serves the build;
EPSTACK_PUSH=top pushes one image. EPSTACK_PREDICT=no skips `pins predict` (a resolve against PyPI,
20 s and more, once over 120 s here; tests/python/test_predict.py covers it). EPSTACK_MIN_FREE_GB=0:
the earlier build tests wrote these layers, so the cold build's 40 GB is not needed (CI's machine had
28 GB free by then; tests/image/test_build_disk.py covers the check)."""

from __future__ import annotations

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from epstack.commands.main import main
from epstack.image.buildmanifest import BUILD_MANIFEST
from epstack.image.engine import DockerEngine
from tests.conftest import PINS, REPO

pytestmark = [pytest.mark.docker, pytest.mark.network, pytest.mark.slow]
OUT = REPO / "build" / "codebuild"  # build.yml's EPSTACK_OUT, under the source directory


@pytest.fixture
def clean_out() -> Iterator[None]:
    shutil.rmtree(OUT, ignore_errors=True)
    yield
    shutil.rmtree(OUT, ignore_errors=True)


def test_build_yml_builds_guards_pushes_and_pulls_back_by_the_exported_digest(
    registry: str,
    tmp_path: Path,
    build_engine: DockerEngine,
    capsys: pytest.CaptureFixture[str],
    clean_out: None,
) -> None:
    out = tmp_path / "run"
    overrides = [
        "EPSTACK_TARGET=hopper-ib",
        "EPSTACK_PUSH=top",
        "EPSTACK_PREDICT=no",
        "EPSTACK_MIN_FREE_GB=0",
    ]
    code = main(
        [
            "codebuild",
            "run-local",
            str(REPO / "buildspecs" / "build.yml"),
            "--registry",
            registry,
            *(f"--env={value}" for value in overrides),
            "--out-dir",
            str(out),
            "--pins",
            str(PINS),
        ]
    )
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    run = json.loads((out / "run.json").read_text())
    assert [(p["name"], p["status"]) for p in run["phases"]] == [
        (name, "SUCCEEDED") for name in ("install", "pre_build", "build", "post_build")
    ]
    uri, digest = run["exported_variables"]["IMAGE_URI"], run["exported_variables"]["IMAGE_DIGEST"]
    assert uri.startswith(f"{registry}/epstack-standin:") and digest.startswith("sha256:")
    assert f"{registry}: a loopback registry, no login needed" in err

    # the report group and the artifacts, as CodeBuild would upload them
    (report,) = run["reports"]
    assert (report["group"], report["status"], report["failures"]) == ("epstack-guard", "SUCCEEDED", 0)
    assert report["tests"] >= 3
    assert sorted(run["artifacts"]["primary"]) == ["build-manifest.json", "build-report.json", "image.env"]
    manifest = BUILD_MANIFEST.read(out / "artifacts" / "build-manifest.json")
    top = manifest.images[-1]
    assert (top.uri, top.digest, top.pushed) == (uri, digest, True)
    assert all(not image.pushed for image in manifest.images[:-1]), "EPSTACK_PUSH=top pushes one image"
    suites = ET.parse(OUT / "guard-junit.xml").getroot().findall("testsuite")
    assert [s.get("name") for s in suites] == [image.tag for image in manifest.images]

    # pull back by the exported digest
    ref = f"{uri.rsplit(':', 1)[0]}@{digest}"
    try:
        subprocess.run([build_engine.cli, "pull", "--quiet", ref], check=True, capture_output=True)
        assert ref in build_engine.repo_digests(ref)
        assert build_engine.image_id(ref) == build_engine.image_id(top.tag)
    finally:
        subprocess.run([build_engine.cli, "image", "rm", ref], capture_output=True, check=False)
