"""Image references by digest: from --image, or the build manifest's entry for the pins' image.

A cluster job names its image only as REPOSITORY[:TAG]@sha256:<64 hex>, so every node runs the bytes
that were built and tested. The build manifest (`build-manifest.json`, what `epstack publish` writes
in the CodeBuild work) is {"images": [...]} (or a bare list), each image with its registry reference
in `uri` (or `ref`, or `repository` and `tag`) and `digest`; images never pushed (empty digest) are
skipped. The entry whose tag is the one the pins give the image is the one used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epstack.errors import BadInput
from epstack.inputs import read_text
from epstack.oci import parse_reference


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


def _entry_ref(entry: Any, where: str) -> ImageRef | None:
    """The entry's image by digest; None for an image the build did not push (no digest)."""
    if not isinstance(entry, dict):
        raise BadInput(f"{where}: not an object; fix: each image is {{'uri': ..., 'digest': ...}}")
    digest = entry.get("digest")
    ref = entry.get("uri") or entry.get("ref")
    if not ref and entry.get("repository"):
        ref = f"{entry['repository']}:{entry.get('tag', '')}".rstrip(":")
    if digest == "" and "pushed" in entry:
        return None
    if not isinstance(ref, str) or not ref or not isinstance(digest, str):
        raise BadInput(f"{where}: needs 'uri' (or 'ref') and 'digest'; fix: regenerate it")
    name, at, own = ref.partition("@")
    if at and own != digest:
        raise BadInput(f"{where}: ref {ref} and digest {digest} disagree; fix: regenerate the manifest")
    return parse_image(f"{name}@{digest}", what=where)


def read_manifest(path: Path) -> list[ImageRef]:
    """Every image in a build manifest; BadInput names the file and the entry that is wrong."""
    text = read_text(path, what="the build manifest the build wrote")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}: not a JSON build manifest ({exc}); fix: pass the build's manifest") from None
    images = document.get("images") if isinstance(document, dict) else document
    if not isinstance(images, list) or not images:
        raise BadInput(f"{path}: no images list; fix: pass the build's manifest (a list of images)")
    refs = [_entry_ref(entry, f"{path}: images[{i}]") for i, entry in enumerate(images)]
    return [ref for ref in refs if ref is not None]


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
