"""What the deepep layer builds from, as pinned values: its git sources (a repository and a commit
each) and DeepEP's patch series (URL#sha256, applied in order). The pins read them here, and so does
epstack.image.sources, which finds and verifies their archives in a sources folder."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from epstack.errors import shown
from epstack.fabric import FABRICS


@dataclass(frozen=True, kw_only=True)
class GitSource:
    """One git source of the deepep layer: its archive name, pins key and where it is cloned from."""

    name: str  # archive prefix: DeepEP, fmt, gdrcopy
    key: str  # pins.env key holding the commit
    repo: str
    commit: str

    @property
    def archive(self) -> str:
        return f"{self.name}-{self.commit}.tar.gz"


@dataclass(frozen=True, kw_only=True)
class Patch:
    """A patch to DeepEP, pinned by URL and sha256; the sources folder may hold it by file name."""

    url: str
    sha256: str

    @property
    def file(self) -> str:
        return self.url.rsplit("/", 1)[-1]

    def __str__(self) -> str:
        return f"{self.url}#sha256={self.sha256}"


_PATCH = re.compile(r"^(?P<url>https://\S+?)#sha256=(?P<sha256>[0-9a-f]{64})$")


def parse_patches(value: str) -> tuple[Patch, ...]:
    """DEEPEP_PATCHES_<FABRIC>: `none`, or comma-separated `https://...#sha256=<64 hex>` applied in order.
    ValueError (with the fix) on anything else, an empty member or a file name used twice."""
    if value == "none":
        return ()
    patches = []
    for member in value.split(","):
        match = _PATCH.match(member.strip())
        if not match:
            raise ValueError(
                f"{shown(member.strip())} is not a pinned patch; fix: write https://...#sha256=<64 hex>, "
                "comma-separated, or none"
            )
        patches.append(Patch(url=match["url"], sha256=match["sha256"]))
    names = [patch.file for patch in patches]
    for index, name in enumerate(names):
        if name in names[:index]:
            raise ValueError(f"two patches named {shown(name)}; fix: list each patch once")
    return tuple(patches)


def fabric_patches(pinned: Mapping[str, str], fabric: str) -> tuple[Patch, ...]:
    """The patches a deepep layer of `fabric` applies (its DEEPEP_PATCHES_<FABRIC> pin)."""
    return parse_patches(pinned.get(FABRICS[fabric].patches_key, "none"))


def git_sources(pinned: Mapping[str, str]) -> tuple[GitSource, ...]:
    """The deepep layer's git sources, from a pins mapping (pins.env or a layer pins file)."""
    return (
        GitSource(name="DeepEP", key="DEEPEP_REF", repo=pinned["DEEPEP_REPO"], commit=pinned["DEEPEP_REF"]),
        GitSource(
            name="fmt",
            key="DEEPEP_FMT_REF",
            repo="https://github.com/fmtlib/fmt.git",
            commit=pinned["DEEPEP_FMT_REF"],
        ),
        GitSource(
            name="gdrcopy",
            key="GDRCOPY_REF",
            repo="https://github.com/NVIDIA/gdrcopy.git",
            commit=pinned["GDRCOPY_REF"],
        ),
    )
