"""Image references by digest: from --image, or the build manifest's entry for the pins' image.

A cluster job names its image only as REPOSITORY[:TAG]@sha256:<64 hex>, so every node runs the bytes
that were built and tested. The build manifest (`build-manifest.json`, epstack.image.buildmanifest, what
`epstack publish` writes in the CodeBuild work) gives each pushed image's registry `uri` and `digest`;
images never pushed are skipped. The image whose tag is the one the pins give it is the one used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from epstack.errors import BadInput
from epstack.image.buildmanifest import BUILD_MANIFEST
from epstack.layers import TOP
from epstack.oci import parse_reference
from epstack.pins.model import Pins


@dataclass(frozen=True, kw_only=True)
class ImageRef:
    repository: str
    tag: str
    digest: str

    @property
    def ref(self) -> str:
        """REPOSITORY[:TAG]@DIGEST: the tag is for people, the digest is what is pulled."""
        return f"{self.repository}{':' + self.tag if self.tag else ''}@{self.digest}"

    @property
    def short(self) -> str:
        """12 hex of the digest, for names derived from the image (squashfs files, DaemonSets)."""
        return self.digest.removeprefix("sha256:")[:12]


# What a serve job's printed commands name when no image was given.
PLACEHOLDER = ImageRef(repository="IMAGE", tag="", digest="sha256:" + "0" * 64)


def parse_image(text: str, *, what: str = "--image") -> ImageRef:
    """REPOSITORY[:TAG]@sha256:<64 hex>; anything without a digest is refused."""
    if "@" not in text:
        raise BadInput(
            f"{what} {text}: no digest; fix: name the image as REPOSITORY[:TAG]@sha256:<64 hex> "
            "(a tag can move, a digest cannot)"
        )
    try:
        reference = parse_reference(text.strip())
    except ValueError as exc:
        raise BadInput(
            f"{what} {text}: not an image reference ({exc}); fix: write e.g. "
            "123456789012.dkr.ecr.us-east-1.amazonaws.com/epstack:TAG@sha256:<64 hex>"
        ) from None
    return ImageRef(repository=reference.repository, tag=reference.tag, digest=reference.digest)


def read_manifest(path: Path) -> list[ImageRef]:
    """Every pushed image of a build manifest, by digest; BadInput names the file and what is wrong."""
    manifest = BUILD_MANIFEST.read(path)
    return [
        parse_image(f"{image.uri}@{image.digest}", what=f"{path}: images.{index}")
        for index, image in enumerate(manifest.images)
        if image.pushed
    ]


def image_for_tag(path: Path, tag: str) -> ImageRef:
    """The manifest's image whose tag is `tag` (the tag these pins give the image)."""
    images = read_manifest(path)
    found = [image for image in images if image.tag == tag]
    if not found:
        tags = ", ".join(sorted({image.tag for image in images})) or "none"
        raise BadInput(
            f"{path}: no image tagged {tag} (the tag these pins give it; the manifest has {tags}); "
            "fix: build and push it from these pins, or pass --image REPOSITORY@sha256:..."
        )
    if len({image.digest for image in found}) > 1:
        raise BadInput(f"{path}: two digests for tag {tag}; fix: keep the one the build pushed")
    return found[0]


def pins_target(pins: Pins, *, arch: str | None, fabric: str | None) -> tuple[str, str]:
    """(image target such as hopper-efa, fabric): arch and fabric, each defaulting to DEFAULT_TARGET's."""
    default_arch, default_fabric = pins.default_target.rsplit("-", 1)
    arch = arch or default_arch
    fabric = fabric or default_fabric
    target = f"{arch}-{fabric}"
    if target not in pins.targets:
        raise BadInput(
            f"--arch {arch} --fabric {fabric}: {target} is not a target; fix: use one of "
            f"{', '.join(pins.targets)}"
        )
    return target, fabric


def chosen_image(
    pins: Pins, target: str, *, image: str | None, manifest: Path | None, layer: str = TOP.name
) -> ImageRef:
    """The image named by --image, or the manifest's image of `layer` (a serving engine's) of `target` for
    these pins: exactly one."""
    if image and manifest:
        raise BadInput("--image and --manifest: fix: pass one of them")
    if image:
        return parse_image(image)
    if manifest:
        return image_for_tag(manifest, pins.image_tag(layer, target))
    raise BadInput(
        "no image; fix: pass --image REPOSITORY[:TAG]@sha256:<64 hex> or --manifest BUILD_MANIFEST.json"
    )
