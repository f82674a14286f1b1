"""Every JSON document epstack writes is read back through the same model: the same value comes back,
and a file of another schema, version or shape is one BadInput line naming the file and the fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from epstack.aws.publish import read_build_report
from epstack.checkrow import Check
from epstack.deepepmanifest import DEEPEP_MANIFEST
from epstack.document import Schema
from epstack.errors import BadInput
from epstack.guard.report import GUARD_REPORT, GuardReport
from epstack.image.build import BUILD_REPORT, BuildReport, BuiltImage, write_build_report
from epstack.image.buildmanifest import BUILD_MANIFEST, BuildManifest, ManifestImage
from epstack.image.sbom import deep_ep_part
from epstack.image.standin import Standin
from epstack.python import closure
from tests.conftest import deepep_manifest, write_deepep_manifest


def _build_report() -> BuildReport:
    standin = Standin(os_image="ubuntu:24.04", devel="s:devel", runtime="s:runtime", devel_of="cuda:d",
                      runtime_of="cuda:r", runtime_flavour="base", cuda_major=13)  # fmt: skip
    image = BuiltImage(ref="epstack-standin:base-0", layer="base", stage="base", seconds=1.5, size=10)
    return BuildReport(target="hopper-efa", standin=standin, built=[image], not_built={"epstack:x": "why"})


def _build_manifest() -> BuildManifest:
    image = ManifestImage(layer="sglang", stage="sglang", tag="epstack:t", uri="r/epstack:t",
                          digest="sha256:1", pins_hash="0" * 12, standin=False, pushed=True, guard_ok=True,
                          guard_checks=3)  # fmt: skip
    return BuildManifest(target="hopper-efa", registry="r", source_revision="a" * 40, pins_sha256="b" * 64,
                         images=(image,))  # fmt: skip


def _guard_report() -> GuardReport:
    checks = (
        Check(component="torch", expected="2.11.0", found="2.11.0", verdict="ok", layer="base"),
        Check(component="triton", expected="in no lock", found="3.7.1", verdict="extra", layer="base"),
    )
    distributions = (closure.Distribution(name="triton", locked="", installed="3.7.1", source=""),)
    return GuardReport(pins=Path("base.pins.env"), layer="base", checks=checks,
                       distributions=distributions)  # fmt: skip


@pytest.mark.parametrize(
    ("schema", "document"),
    [
        (DEEPEP_MANIFEST, deepep_manifest(patches=("https://x/0001.patch#sha256=" + "a" * 64,))),
        (BUILD_REPORT, _build_report()),
        (BUILD_MANIFEST, _build_manifest()),
    ],
)
def test_a_document_reads_back_as_written(schema: Schema[Any], document: object, tmp_path: Path) -> None:
    path = tmp_path / "document.json"
    path.write_text(schema.dumps(document))
    assert schema.read(path) == document


def test_the_guard_report_reads_back_as_written() -> None:
    report = _guard_report()
    assert GUARD_REPORT.loads(report.to_json(), "base.json") == report


def test_the_build_report_is_what_publish_reads(tmp_path: Path) -> None:
    path = tmp_path / "build-report.json"
    write_build_report(path, _build_report())
    assert read_build_report(path) == ("hopper-efa", ["epstack-standin:base-0"])


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "not JSON (Expecting property name enclosed in double quotes, line 1)"),
        ('["a list"]', "no schema, so not a build report (epstack build --report), this epstack"),
        # A report of the epstack before schemas: the same keys, no schema.
        ('{"target": "t", "standin": null, "built": [], "not_built": {}}', "no schema, so not a build"),
        ('{"schema": "build-report/0"}', "'build-report/0' unknown, this epstack reads 'build-report/1'"),
        ('{"schema": "build-report/1", "target": "t", "built": []}', "standin: field required"),
        ('{"schema": "build-report/1", "target": 7, "standin": null}', "target: input should be a valid str"),
    ],
)
def test_a_bad_document_is_one_line_naming_the_file_and_the_fix(
    text: str, problem: str, tmp_path: Path
) -> None:
    path = tmp_path / "build-report.json"
    path.write_text(text)
    with pytest.raises(BadInput) as caught:
        read_build_report(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and problem in message, message
    assert message.endswith("; fix: run `epstack build --report` of this epstack again")
    assert "\n" not in message


def test_a_nested_field_of_the_wrong_type_is_named_by_its_path(tmp_path: Path) -> None:
    document = json.loads(DEEPEP_MANIFEST.dumps(deepep_manifest()))
    path = tmp_path / "deepep-source.json"
    path.write_text(json.dumps({**document, "nccl": {**document["nccl"], "version": 230}}))
    with pytest.raises(BadInput, match=r"deepep-source.json: nccl.version: input should be a valid string"):
        DEEPEP_MANIFEST.read(path)


def test_a_deep_ep_manifest_without_repo_is_bad_input_not_a_key_error(tmp_path: Path) -> None:
    path = write_deepep_manifest(tmp_path / "deepep-source.json")
    document = json.loads(path.read_text())
    path.write_text(json.dumps({key: value for key, value in document.items() if key != "repo"}))
    with pytest.raises(BadInput, match=r"^\S+deepep-source.json: repo: field required; fix: rebuild"):
        deep_ep_part(path)
    assert closure.built_deep_ep(path) == ""


def test_a_deep_ep_manifest_of_an_older_epstack_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "deepep-source.json"
    path.write_text(json.dumps({"repo": "https://github.com/deepseek-ai/DeepEP.git", "commit": "d" * 40}))
    with pytest.raises(BadInput, match="no schema, so not a deep_ep source manifest, this epstack reads"):
        deep_ep_part(path)
