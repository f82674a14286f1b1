"""The SBOM: facts gathered from the committed locks, a DeepEP manifest with patches, a layer pins file
and dpkg's real output format, written as CycloneDX 1.6 and validated by cyclonedx-python-lib."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from epstack.commands.main import main
from epstack.image import cdx
from epstack.image.sbom import ImageFacts, native_parts, os_parts, python_parts
from epstack.pins.load import load_pins
from tests.conftest import PINS, REPO, write_deepep_manifest

LOCKS = REPO / "locks"
DPKG = "bash\t5.2.21-2ubuntu4\tamd64\nlibc6\t2.39-0ubuntu8.6\tamd64\nca-certificates\t20240203\tall\n"
OS_RELEASE = 'PRETTY_NAME="Ubuntu 24.04.3 LTS"\nID=ubuntu\nVERSION_ID="24.04"\n'
PATCH_SHA = "ab" * 32


def manifest(tmp_path: Path) -> Path:
    wheel = tmp_path / "deep_ep-2.0.0+local-cp312-cp312-linux_x86_64.whl"
    wheel.write_bytes(b"a built wheel")
    return write_deepep_manifest(
        tmp_path / "deepep-source.json",
        commit=load_pins(PINS).deepep_ref,
        fmt_commit=load_pins(PINS).deepep_fmt_ref,
        wheel=wheel.name,
        # As epstack image deepep-build writes it (str(sources.Patch)).
        patches=(f"https://example.org/patches/0001-efa-qp-cap.patch#sha256={PATCH_SHA}",),
    )


def facts(tmp_path: Path, target: str = "hopper-efa", standin: str = "") -> ImageFacts:
    pins = load_pins(PINS)
    layer_pins = {key: str(value) for key, value in pins.layer_pins("sglang", target).items()}
    python, locks = python_parts("sglang", LOCKS, manifest(tmp_path))
    parts = [*python, *native_parts(layer_pins, "sglang"), *os_parts(DPKG, OS_RELEASE)]
    return ImageFacts(layer="sglang", target=target, version=pins.image_tag("sglang", target),
                      base_image=pins.cuda_runtime_image, standin=standin, parts=tuple(parts),
                      locks=locks)  # fmt: skip


def components(text: str) -> dict[str, dict[str, object]]:
    return {str(c["bom-ref"]): c for c in json.loads(text)["components"]}


def test_the_sbom_validates_and_names_every_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764374400")
    text = cdx.document(facts(tmp_path))
    assert cdx.validate(text) == []
    document = json.loads(text)
    assert document["specVersion"] == "1.6" and document["metadata"]["timestamp"].startswith("2025-11-29")
    parts = components(text)
    pins = load_pins(PINS)
    digest = pins.cuda_runtime_image.split("@sha256:")[1]
    base = parts[f"base-image:{pins.cuda_runtime_image}"]
    assert base["hashes"] == [{"alg": "SHA-256", "content": digest}]
    assert str(base["purl"]).startswith("pkg:docker/nvidia/cuda@sha256:")
    assert parts["python:flashinfer-python@0.7.2"]["purl"] == "pkg:pypi/flashinfer-python@0.7.2"
    python = [ref for ref in parts if ref.startswith("python:")]
    sglang = json.loads(text)["metadata"]["component"]["properties"]
    assert {p["name"] for p in sglang} >= {"epstack:lock:base.txt", "epstack:lock:sglang.txt"}
    assert len(python) == len({*_locked("base"), *_locked("sglang")})
    deep_ep = parts["native:deep-ep@2.0.0+local"]
    commits = {c["uid"] for c in deep_ep["pedigree"]["commits"]}  # type: ignore[index]
    assert commits == {pins.deepep_ref, pins.deepep_fmt_ref}
    assert {"name": "epstack:patch", "value": f"0001-efa-qp-cap.patch sha256:{PATCH_SHA}"} in deep_ep[
        "properties"
    ]  # type: ignore[operator]
    assert parts["native:gdrcopy@2.5.2"]["purl"] == f"pkg:github/nvidia/gdrcopy@{pins.gdrcopy_ref}"
    efa = parts[f"native:aws-efa-installer@{pins.efa_installer_version}"]
    assert efa["hashes"] == [{"alg": "SHA-256", "content": pins.efa_installer_sha256}]
    assert parts["os:libc6@2.39-0ubuntu8.6"]["purl"] == (
        "pkg:deb/ubuntu/libc6@2.39-0ubuntu8.6?arch=amd64&distro=ubuntu-24.04"
    )
    assert f"native:NCCL@{pins.nccl_version}" in parts and "native:NVSHMEM@3.4.5" in parts
    assert cdx.document(facts(tmp_path)) == text, "same facts, same bytes"


def _locked(name: str) -> list[str]:
    return [line.split("==")[0] for line in (LOCKS / f"{name}.txt").read_text().splitlines() if "==" in line
            and not line.startswith((" ", "#"))]  # fmt: skip


def test_an_ib_image_on_the_standin_says_so_and_has_no_efa_installer(tmp_path: Path) -> None:
    text = cdx.document(facts(tmp_path, target="hopper-ib", standin="ubuntu24.04-from-archive"))
    assert cdx.validate(text) == []
    parts = components(text)
    assert not any("aws-efa-installer" in ref for ref in parts)
    base = next(c for ref, c in parts.items() if ref.startswith("base-image:"))
    assert {"name": "epstack:standin", "value": "ubuntu24.04-from-archive"} in base["properties"]  # type: ignore[operator]


def test_validation_catches_a_broken_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.cdx.json"
    good.write_text(cdx.document(facts(tmp_path)))
    assert main(["image", "sbom", "--validate", str(good)]) == 0
    broken = json.loads(good.read_text())
    broken["components"][0]["type"] = "spaceship"
    bad = tmp_path / "bad.cdx.json"
    bad.write_text(json.dumps(broken))
    assert main(["image", "sbom", "--validate", str(bad)]) == 1
    assert "spaceship" in capsys.readouterr().out
