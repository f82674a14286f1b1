"""Git sources of the deepep layer, offline: `git archive` tarballs in a folder, checked against the pins.

The deepep layer builds DeepEP, its fmt submodule and GDRCopy from pinned commits. Where GitHub is out
of reach (CI, air-gapped builders) a sources folder holds `<name>-<commit>.tar.gz` made by `git archive`;
the commit that tool writes into the archive's pax header is compared with the pin before anything is
unpacked. render copies the matching archives into the build context (sources/), the image scripts and
the GPU host check them again with `epstack sources verify`, and unpack only then.
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from epstack.errors import BadInput
from epstack.fabric import FABRICS

# In the build context: sources/<layer>/, one folder per layer that takes sources, each always present
# (a manifest at least), so a Dockerfile can COPY it whatever the folder held.
CONTEXT_DIR = "sources"
MANIFEST = "sources.json"
# What `git archive` names the commit it archived (a pax global header).
_COMMIT_HEADER = "comment"


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
                f"{member.strip()!r} is not a pinned patch; fix: write https://...#sha256=<64 hex>, "
                "comma-separated, or none"
            )
        patches.append(Patch(url=match["url"], sha256=match["sha256"]))
    names = [patch.file for patch in patches]
    if len(set(names)) != len(names):
        raise ValueError(f"two patches named {names[0]!r}; fix: list each patch once")
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


def archive_commit(archive: Path) -> str:
    """The commit `git archive` recorded in `archive`, read from its first header only."""
    try:
        with tarfile.open(archive) as tar:
            return str(tar.pax_headers.get(_COMMIT_HEADER, ""))
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise BadInput(
            f"{archive}: not a readable tar archive ({exc}); fix: make it with `git archive`"
        ) from None


def verify(archive: Path, commit: str, key: str = "the pin") -> None:
    """BadInput unless `archive` is a `git archive` of exactly `commit`."""
    found = archive_commit(archive)
    if found != commit:
        what = f"commit {found}" if found else "no commit (not made by `git archive` of a commit)"
        raise BadInput(
            f"{archive}: holds {what}, {key} is {commit}; "
            f"fix: git archive --format=tar.gz -o {archive.name} {commit}"
        )


@dataclass(frozen=True, kw_only=True)
class Installer:
    """A download a layer may take from the sources folder instead, checked by its pinned sha256."""

    file: str
    key: str  # pins.env key of its sha256
    sha256: str


def installers(pinned: Mapping[str, str]) -> tuple[Installer, ...]:
    """The base layer's downloads: the EFA installer, for EFA targets."""
    if "EFA_INSTALLER_VERSION" not in pinned:
        return ()
    file = f"aws-efa-installer-{pinned['EFA_INSTALLER_VERSION']}.tar.gz"
    return (Installer(file=file, key="EFA_INSTALLER_SHA256", sha256=pinned["EFA_INSTALLER_SHA256"]),)


def _installer(folder: Path, installer: Installer) -> bytes | None:
    path = folder / installer.file
    if not path.is_file():
        return None
    data = path.read_bytes()
    check_sha256(data, installer.sha256, str(path), installer.key)
    return data


def patch_bytes(folder: Path | None, patch: Patch) -> bytes | None:
    """The patch from `folder` by file name, checked against its sha256; None when the folder lacks it."""
    path = folder / patch.file if folder else None
    if path is None or not path.is_file():
        return None
    data = path.read_bytes()
    check_sha256(data, patch.sha256, str(path), "its pin")
    return data


def check_sha256(data: bytes, sha256: str, what: str, key: str) -> None:
    """BadInput unless `data` hashes to the pinned `sha256` (`key` names the pin)."""
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise BadInput(f"{what}: sha256 {digest}, {key} is {sha256}; fix: use the pinned file")


def _archive(folder: Path, source: GitSource) -> bytes | None:
    wanted = folder / source.archive
    if not wanted.is_file():
        others = sorted(folder.glob(f"{source.name}-*.tar.gz"))
        if others:
            raise BadInput(
                f"{others[0]}: not {source.key}={source.commit}; "
                f"fix: add {source.archive} (git archive {source.commit})"
            )
        return None
    verify(wanted, source.commit, source.key)
    return wanted.read_bytes()


def context_files(
    folder: Path | None, base: Mapping[str, str], deepep: Mapping[str, str]
) -> dict[str, bytes]:
    """sources/base/ and sources/deepep/ of the build context, from `folder` (None: the manifests only).

    Each pinned archive or installer found is checked first. An archive of a source at another commit,
    or an installer with another sha256, is an error (the folder was made for other pins); what the
    folder lacks is left to the build, which downloads or clones it."""
    if folder is not None and not folder.is_dir():
        raise BadInput(f"{folder}: no such sources folder; fix: pass a folder of `git archive` tarballs")
    found: dict[str, dict[str, bytes | None]] = {"base": {}, "deepep": {}}
    if folder is not None:
        found["base"] = {i.file: _installer(folder, i) for i in installers(base)}
        found["deepep"] = {s.archive: _archive(folder, s) for s in git_sources(deepep)}
        for fabric in FABRICS:
            found["deepep"] |= {p.file: patch_bytes(folder, p) for p in fabric_patches(deepep, fabric)}
    files: dict[str, bytes] = {}
    for layer, entries in found.items():
        listed = []
        for name, data in entries.items():
            if data is not None:
                files[f"{CONTEXT_DIR}/{layer}/{name}"] = data
                listed.append({"file": name, "sha256": hashlib.sha256(data).hexdigest()})
        files[f"{CONTEXT_DIR}/{layer}/{MANIFEST}"] = (json.dumps({"files": listed}, indent=2) + "\n").encode()
    return files
