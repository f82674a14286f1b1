"""Git sources of the deepep layer, offline: `git archive` tarballs in a folder, checked against the pins.

The deepep layer builds DeepEP, its fmt submodule and GDRCopy from pinned commits. Where GitHub is out
of reach (CI, air-gapped builders) a sources folder holds `<name>-<commit>.tar.gz` made by `git archive`;
each is verified whole (epstack.image.gitarchive: every member, size caps, read to its end) and the
commit that tool writes into its pax header is compared with the pin before anything is unpacked.
render copies the matching archives into the build context (sources/), the image's builders and the
GPU host verify them again the same way (`epstack image deepep-build`, `epstack image
sources-verify`), and unpack only then. A pinned archive that is present but wrong is refused, never
replaced by a clone.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from epstack.errors import BadInput
from epstack.fabric import FABRICS
from epstack.image import gitarchive
from epstack.pins.deepepsources import GitSource, Patch, fabric_patches, git_sources

# In the build context: sources/<layer>/, one folder per layer that takes sources, each always present
# (a manifest at least), so a Dockerfile can COPY it whatever the folder held.
CONTEXT_DIR = "sources"
MANIFEST = "sources.json"


def verify(archive: Path, commit: str, key: str = "the pin") -> bytes:
    """The bytes of `archive`, verified whole to be a `git archive` of exactly `commit`; else BadInput."""
    found = gitarchive.read(archive)
    if found.commit != commit:
        raise BadInput(
            f"{archive}: holds commit {found.commit}, {key} is {commit}; "
            f"fix: git archive --format=tar.gz -o {archive.name} {commit}"
        )
    return found.data


def _pinned_archive(folder: Path, source: GitSource) -> bytes | None:
    """`source`'s archive in `folder`, verified; None only where the folder holds no archive of it.

    Present but wrong (not a regular file, unreadable, another commit, renamed) is BadInput: the build
    must not fall back to a clone."""
    wanted = folder / source.archive
    if os.path.lexists(wanted):
        return verify(wanted, source.commit, source.key)
    others = sorted(folder.glob(f"{source.name}-*.tar.gz"))
    if others:
        raise BadInput(
            f"{others[0]}: not {source.key}={source.commit}; "
            f"fix: add {source.archive} (git archive {source.commit})"
        )
    return None


def source_archives(folder: Path, pinned: Mapping[str, str]) -> dict[GitSource, bytes]:
    """The git sources' archives `folder` holds, each verified. DeepEP's and fmt's come together (a
    clone brings both): one without the other is BadInput."""
    if not folder.is_dir():
        raise BadInput(f"{folder}: no such sources folder; fix: pass a folder of `git archive` tarballs")
    found = {s: data for s in git_sources(pinned) if (data := _pinned_archive(folder, s)) is not None}
    deepep, fmt, _ = git_sources(pinned)
    if (deepep in found) != (fmt in found):
        missing = fmt if deepep in found else deepep
        raise BadInput(
            f"{folder}: holds no {missing.archive} beside the other archive; "
            f"fix: add it (git archive {missing.commit}), or remove both to clone"
        )
    return found


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


def context_files(
    folder: Path | None, base: Mapping[str, str], deepep: Mapping[str, str]
) -> dict[str, bytes]:
    """sources/base/ and sources/deepep/ of the build context, from `folder` (None: the manifests only).

    Each pinned archive or installer found is checked first. An archive of a source at another commit,
    or an installer with another sha256, is an error (the folder was made for other pins); what the
    folder lacks is left to the build, which downloads or clones it (DeepEP and fmt together)."""
    found: dict[str, dict[str, bytes | None]] = {"base": {}, "deepep": {}}
    if folder is not None:
        found["deepep"] = {s.archive: data for s, data in source_archives(folder, deepep).items()}
        found["base"] = {i.file: _installer(folder, i) for i in installers(base)}
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
