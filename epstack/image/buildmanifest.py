"""The build manifest (build-manifest.json): every image a build made, where `epstack publish` pushed
it and by which digest; what `epstack cluster` reads to name an image by digest."""

from __future__ import annotations

from dataclasses import dataclass

from epstack.document import Schema


@dataclass(frozen=True, kw_only=True)
class ManifestImage:
    """One image of the build: where it went and what it was built from."""

    layer: str
    stage: str
    tag: str  # local reference, repository:tag
    uri: str  # registry reference by tag ("" when not pushed)
    digest: str  # manifest digest in the registry ("" when not pushed)
    pins_hash: str  # 12 hex of the layer's pins (the tag's suffix)
    standin: bool
    pushed: bool
    guard_ok: bool
    guard_checks: int


@dataclass(frozen=True, kw_only=True)
class BuildManifest:
    target: str
    registry: str
    source_revision: str
    pins_sha256: str
    images: tuple[ManifestImage, ...]


BUILD_MANIFEST = Schema(
    name="build-manifest",
    version=1,
    model=BuildManifest,
    what="a build manifest (epstack publish push)",
    fix="pass the build-manifest.json that `epstack publish push` of this epstack wrote",
)
