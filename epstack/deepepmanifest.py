"""The deep_ep source manifest (deepep-source.json): where the deep_ep wheel came from, written by
`epstack image deepep-build` beside the wheel and read by the guard, the closure and the SBOM."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from epstack import imagepaths
from epstack.document import Schema

MANIFEST_NAME = "deepep-source.json"


def manifest_path() -> Path:
    """The image's deep_ep manifest; EPSTACK_DEEPEP_MANIFEST names another (a bare host, tests)."""
    return Path(os.environ.get("EPSTACK_DEEPEP_MANIFEST") or imagepaths.WHEELS / MANIFEST_NAME)


@dataclass(frozen=True, kw_only=True)
class LinkedLibrary:
    root: str  # what DeepEP's setup.py takes as EP_<NAME>_ROOT_DIR
    library: str  # the file linked and set as rpath
    version: str


@dataclass(frozen=True, kw_only=True)
class DeepepManifest:
    """Where the deep_ep wheel came from, as the guard reads it."""

    repo: str
    commit: str
    fmt_commit: str
    torch_cuda_arch_list: str
    source: str  # "archive <file>" or "git <repo>"
    patches: tuple[str, ...]  # URL#sha256=... of each patch applied, in order
    nccl: LinkedLibrary
    nvshmem_root: str
    cc: str
    cxx: str
    wheel: str

    @property
    def wheel_version(self) -> str:
        """The version in the wheel's file name ("" when it is not a wheel's name)."""
        try:
            _, version, _, _ = parse_wheel_filename(self.wheel)
        except InvalidWheelFilename:
            return ""
        return str(version)


DEEPEP_MANIFEST = Schema(
    name="deepep-manifest",
    version=1,
    model=DeepepManifest,
    what="a deep_ep source manifest",
    fix="rebuild the deepep layer (or run `epstack image deepep-build`) with this epstack",
)
