"""Every Python distribution in a venv against the locks of its layer: missing, extra, other version.

The expected set is the union of the layer's locks (epstack.layers.venv_locks) plus, in the layers
that hold it (Layer.holds_deep_ep), the deep_ep wheel built from DEEPEP_REF, at the version its
manifest (deepep-source.json) records: the one distribution no PyPI lock can hold. pip and uv are
locked in the base lock like any other. Only the venv's own site-packages count: epstack's tool,
appended to sys.path from imagepaths.TOOL, is not part of the application.
"""

from __future__ import annotations

import sysconfig
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Literal

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from epstack import layers
from epstack.deepepmanifest import DEEPEP_MANIFEST, MANIFEST_NAME
from epstack.errors import BadInput
from epstack.python.lockfile import expected_distributions

Verdict = Literal["ok", "missing", "extra", "other version"]
DEEP_EP = "deep-ep"


@dataclass(frozen=True, kw_only=True)
class Distribution:
    """One distribution, as locked and as installed; "" where it is not."""

    name: str  # canonical
    locked: str
    installed: str
    source: str  # the lock file (or manifest) that expects it; "" for an extra one

    @property
    def verdict(self) -> Verdict:
        if not self.installed:
            return "missing"
        if not self.locked:
            return "extra"
        return "ok" if _same(self.locked, self.installed) else "other version"


def _same(locked: str, installed: str) -> bool:
    try:
        return Version(locked) == Version(installed)
    except InvalidVersion:
        return locked == installed


def venv_paths() -> list[str]:
    """The running interpreter's site-packages (purelib and platlib)."""
    paths = sysconfig.get_paths()
    return list(dict.fromkeys([paths["purelib"], paths["platlib"]]))


def installed(paths: Iterable[str]) -> dict[str, str]:
    """{canonical name: version} of the distributions under `paths` (the first found wins, as import)."""
    found: dict[str, str] = {}
    for dist in metadata.distributions(path=list(paths)):
        name = dist.name  # the metadata's Name header, None where it has none
        if name:
            found.setdefault(canonicalize_name(name), dist.version)
    return found


def built_deep_ep(manifest: Path) -> str:
    """The deep_ep wheel's version from its manifest ("" when the manifest is missing or unreadable:
    the guard's deep_ep source row says why)."""
    try:
        return DEEPEP_MANIFEST.read(manifest).wheel_version
    except BadInput:
        return ""


def expected(layer: str, locks: Path, manifest: Path) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """{name: (version, source)} the layer's venv must hold exactly, and the files it comes from."""
    result, files = expected_distributions(locks, layer)
    if layers.layer_named(layer).holds_deep_ep:
        result[DEEP_EP] = (built_deep_ep(manifest) or "as built", MANIFEST_NAME)
        files.append(str(manifest))
    return result, files


def compare(want: Mapping[str, tuple[str, str]], have: Mapping[str, str]) -> list[Distribution]:
    """One entry per distribution locked or installed, sorted by name."""
    rows = []
    for name in sorted({*want, *have}):
        version, source = want.get(name, ("", ""))
        found = have.get(name, "")
        if name == DEEP_EP and version == "as built" and found:
            version = found  # no manifest to compare with: its own guard row fails instead
        rows.append(Distribution(name=name, locked=version, installed=found, source=source))
    return rows
