"""The kernels layer: a built sglang image plus the kernels exported on a GPU (each toolchain of
epstack.jit.registry.EXPORTED: DeepEP's, DeepGEMM's, SGLang's own, Triton's), each unpacked by its sha256,
then guarded (images/kernels/Dockerfile.j2, `epstack jit layer`)."""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epstack import __version__, imagepaths
from epstack.errors import BadInput, shown
from epstack.image.engine import DockerEngine
from epstack.image.render import templates
from epstack.oci import Reference, parse_reference, tag_problem

STAGE = "kernels"


@dataclass(frozen=True, kw_only=True)
class LayerExport:
    """One export the layer unpacks: its toolchain's folder name, manifest, bytes and digest."""

    tool: str  # deep_ep, deep_gemm, sglang_jit, triton_kernels
    manifest: Any  # e.g. deepep.KernelCache: a key, files, kernels, bytes
    data: bytes
    sha256: str

    @property
    def archive(self) -> str:
        return f"{self.tool}-kernels.tar.gz"


def _reference(image: str) -> Reference:
    try:
        return parse_reference(image)
    except ValueError as exc:
        raise BadInput(
            f"--image {shown(image)}: not an image reference ({exc}); fix: e.g. epstack:TAG"
        ) from None


def exports_digest(sha256s: Sequence[str]) -> str:
    """The exports' digest: one export's own, or the sha256 of their digests in order."""
    return sha256s[0] if len(sha256s) == 1 else hashlib.sha256(" ".join(sha256s).encode()).hexdigest()


def kernels_tag(image: str, sha256s: Sequence[str]) -> str:
    """The image's repository, its tag + `-kernels-<12 hex of the exports' digest>` (a digest ref: that
    tag alone)."""
    reference = _reference(image)
    tag = f"{reference.tag + '-' if reference.tag else ''}kernels-{exports_digest(sha256s)[:12]}"
    problem = tag_problem(tag)
    if problem:
        raise BadInput(f"--image {image}: the kernels layer's tag {tag}: {problem}; fix: name one with --tag")
    return f"{reference.repository}:{tag}"


def _one_line(what: str, value: str) -> None:
    """Text from the export lands in the Dockerfile's comments: one line, or it could be an instruction."""
    if not value.isprintable():
        raise BadInput(
            f"{what} {shown(value)} is not one line of printable text, so not written into the kernels "
            "layer's Dockerfile; fix: export the kernels again from the image on a GPU"
        )


def dockerfile(*, image: str, image_id: str, exports: Sequence[LayerExport]) -> str:
    _reference(image)
    tools = [e.tool for e in exports]
    if len(set(tools)) != len(tools):
        raise BadInput(f"two exports of {tools[0]}'s kernels; fix: one --export per toolchain")
    for item in exports:
        for what, value in (
            ("the export's device", item.manifest.key.device),
            ("the export's arch", item.manifest.key.arch),
            ("the export's nvcc", getattr(item.manifest.key, "nvcc", "")),  # Triton's keys have none
        ):
            _one_line(what, value)
    return (
        templates()
        .get_template(f"{STAGE}/Dockerfile.j2")
        .render(
            image=image,
            image_id=image_id,
            exports=exports,
            sha256=exports_digest([e.sha256 for e in exports]),
            paths=imagepaths,
            epstack_version=__version__,
        )
    )


def build_kernels_layer(engine: DockerEngine, *, image: str, exports: Sequence[LayerExport], tag: str) -> str:
    """Build the layer over `image` as `tag`; its image ID."""
    with tempfile.TemporaryDirectory(prefix="epstack-kernels-") as folder:
        context = Path(folder)
        image_id = engine.image_id(image)
        (context / "Dockerfile").write_text(dockerfile(image=image, image_id=image_id, exports=exports))
        for item in exports:
            (context / item.archive).write_bytes(item.data)
        engine.build(context=context, dockerfile="Dockerfile", stage=STAGE, tag=tag, args={}, labels={})
    return engine.image_id(tag)
