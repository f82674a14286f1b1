"""The kernels layer: a built sglang image plus DeepEP's kernels exported on a GPU (epstack.jitcache),
unpacked by their sha256 and guarded (images/kernels/Dockerfile.j2, `epstack jit layer`)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from epstack import __version__, imagepaths
from epstack.errors import BadInput, shown
from epstack.image.engine import DockerEngine
from epstack.image.oci import Reference, parse_reference, tag_problem
from epstack.image.render import templates
from epstack.jitcache import KernelCache

STAGE = "kernels"
ARCHIVE = "deep_ep-kernels.tar.gz"


def _reference(image: str) -> Reference:
    try:
        return parse_reference(image)
    except ValueError as exc:
        raise BadInput(
            f"--image {shown(image)}: not an image reference ({exc}); fix: e.g. epstack:TAG"
        ) from None


def kernels_tag(image: str, sha256: str) -> str:
    """The image's repository, its tag + `-kernels-<12 hex of the export>` (a digest ref: that tag alone)."""
    reference = _reference(image)
    tag = f"{reference.tag + '-' if reference.tag else ''}kernels-{sha256[:12]}"
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


def dockerfile(*, image: str, image_id: str, manifest: KernelCache, sha256: str) -> str:
    _reference(image)
    for what, value in (
        ("the export's device", manifest.key.device),
        ("the export's arch", manifest.key.arch),
        ("the export's nvcc", manifest.key.nvcc),
    ):
        _one_line(what, value)
    return (
        templates()
        .get_template(f"{STAGE}/Dockerfile.j2")
        .render(
            image=image,
            image_id=image_id,
            manifest=manifest,
            sha256=sha256,
            archive=ARCHIVE,
            paths=imagepaths,
            epstack_version=__version__,
        )
    )


def build_kernels_layer(
    engine: DockerEngine, *, image: str, manifest: KernelCache, data: bytes, sha256: str, tag: str
) -> str:
    """Build the layer over `image` as `tag`; its image ID."""
    with tempfile.TemporaryDirectory(prefix="epstack-kernels-") as folder:
        context = Path(folder)
        image_id = engine.image_id(image)
        (context / "Dockerfile").write_text(
            dockerfile(image=image, image_id=image_id, manifest=manifest, sha256=sha256)
        )
        (context / ARCHIVE).write_bytes(data)
        engine.build(context=context, dockerfile="Dockerfile", stage=STAGE, tag=tag, args={}, labels={})
    return engine.image_id(tag)
