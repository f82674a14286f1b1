"""The Triton kernels SGLang compiles at its first forward, shipped in an image: exported from a GPU run,
unpacked by digest, checked.

Triton 3.8 compiles each @triton.jit kernel at its first launch into $TRITON_CACHE_DIR (default
$TRITON_HOME/.triton/cache): triton/compiler/compiler.py hashes triton_key() (its version and sources),
the kernel's source, the backend (`ptxas --version` whole and the arch; the wheel bundles its ptxas),
the options and the cache-invalidating variables into <key>/ (52 base32 characters,
runtime/cache.py), writes each stage there (<name>.source, .ttir, .ttgir, .llir, .ptx, .cubin, the
<name>.json metadata), then, last, `__grp__<name>.json`: {"child_paths": {file: path}}. A load
(FileCacheManager.get_group) takes the entry only when that group file is there and every path it
lists exists; those paths are absolute, <TRITON_CACHE_DIR>/<key>/<file>, so an entry loads only under
the TRITON_CACHE_DIR it was compiled in. So a published entry, the one exported, is a <key>/ folder
whose group file lists a <name>.json and a <name>.cubin, every file it lists there, each named
<this cache>/<key>/<file>. Triton's C launcher (triton.py; `cuda_utils`, written without a group
file) is never one: the image ships it already.

The kernels depend on the model's shapes, so a serve run in the image makes them (`epstack smoke
serve`, its TRITON_CACHE_DIR the image's): `epstack jit export --toolchain triton-kernels` packs the
published entries with their key, the kernels layer unpacks them by sha256 into
imagepaths.JIT/triton_kernels, and the entrypoint copies them into $TRITON_CACHE_DIR at start, each
entry whole or not at all (never into a cache moved to TMPDIR: their group files name the image's).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from epstack import imagepaths
from epstack.checkrow import Check
from epstack.errors import BadInput
from epstack.jit import (
    export,
    triton,
    tritonserve,  # noqa: PLW0406 (this module, as the Placed toolchain its guard row reads: mypy checks it)
)
from epstack.jit.deepep import arch_difference
from epstack.jit.install import CacheHome
from epstack.jit.placed import placed_rows
from epstack.jit.shipped import cache_file

NAME = "triton-kernels"
TITLE = "Triton"
TOOL = "triton_kernels"
AGAIN = "`epstack jit export --toolchain triton-kernels` after a serve run"
SHIPPED = Path(imagepaths.JIT) / TOOL
GROUP = "__grp__"  # the prefix of an entry's group file, written after every file it lists
# An entry's folder, the key in base32 (runtime/cache.py _base32), and a file in it: [__grp__]<name>.<stage>.
_KEY = r"[A-Z2-7]{52}"
_FILE = r"(?:__grp__)?[A-Za-z_][A-Za-z0-9_]*\.(?:source|ttir|ttgir|llir|ptx|cubin|json)"
_ENTRY_FILE = re.compile(f"{_KEY}/{_FILE}")
COLD_S = "6.0 s of the tiny profile's 39.0 s cold start on an H100, every other cache shipped"
COMPONENT = "JIT cache Triton kernels"
GUARD_SCOPES: tuple[str, ...] = ("sglang", "vllm")
CHECKED_AT_START = True  # where its kernels are: copied into its cache at start, or not


@dataclass(frozen=True, kw_only=True)
class CacheKey:
    """What Triton's cache key covers that an image can name, the folder its group files name, and the
    device the kernels were compiled on."""

    triton: str  # triton's version: triton_key() starts with it, and its wheel's ptxas goes with it
    cache_dir: str  # the TRITON_CACHE_DIR they were compiled in: their group files name it
    arch: str  # the device's compute capability, "9.0"
    device: str
    sm_count: int


@dataclass(frozen=True, kw_only=True)
class TritonKernelCache(export.KernelFiles):
    key: CacheKey


KIND = export.kind(
    tool=TOOL,
    manifest=TritonKernelCache,
    name="triton-kernel-cache",
    title="Triton",
    again=AGAIN,
    file_pattern=_ENTRY_FILE,
)
cache_dir = triton.cache_dir  # the folder Triton compiles into, its launcher's too
HOME = CacheHome(
    variable="TRITON_CACHE_DIR",
    default=cache_dir,
    name=TOOL,
    entries=("*",),  # <key>
    what="Triton's launcher and kernels go to",
    copy_when_moved=False,  # its group files name the image's folder: moved, Triton compiles them there
)


def group_files(folder: Path, cache: Path) -> list[str] | None:
    """The files of the entry in `folder` as Triton loads it from `cache` (FileCacheManager.get_group):
    its group file's name and each file it lists, when every path it lists is a file there, named
    <cache>/<key>/<file> as Triton names them, and a <name>.json and .cubin are among them; else None."""
    groups = sorted(folder.glob(f"{GROUP}*.json"))
    if not re.fullmatch(_KEY, folder.name) or len(groups) != 1 or groups[0].is_symlink():
        return None
    try:
        listed = json.loads(groups[0].read_text()).get("child_paths")
    except (ValueError, AttributeError, OSError):
        return None
    name = groups[0].name.removeprefix(GROUP).removesuffix(".json")
    if not isinstance(listed, dict) or not {f"{name}.json", f"{name}.cubin"} <= set(listed):
        return None
    for file, path in listed.items():
        here = folder / str(file)
        named = re.fullmatch(_FILE, str(file)) and path == f"{cache}/{folder.name}/{file}"
        if not named or here.is_symlink() or not here.is_file():
            return None
    return [groups[0].name, *listed]


def published(root: Path) -> list[Path]:
    """The published entries under a cache root, as Triton would load them from there."""
    return sorted(entry for entry in root.glob("*") if not entry.is_symlink() and group_files(entry, root))


def cache_files(root: Path) -> dict[str, bytes]:
    """Every file of the published entries, as Triton names them: <key>/<file>."""
    return {
        f"{entry.name}/{file}": (entry / file).read_bytes()
        for entry in published(root)
        for file in sorted(group_files(entry, root) or ())
    }


def pack(root: Path, key: CacheKey) -> tuple[bytes, TritonKernelCache]:
    """The export archive (byte-identical for the same kernels) and its manifest, `key` naming `root`
    as the folder they were compiled in."""
    files = cache_files(root)
    if not files:
        raise BadInput(
            f"{root}: no published Triton kernels (<key>/__grp__<name>.json and every file it lists) to "
            "export; fix: serve once on this GPU with TRITON_CACHE_DIR set to this folder (`epstack smoke "
            "serve`)"
        )
    manifest = TritonKernelCache(
        key=replace(key, cache_dir=str(root)), files=tuple(cache_file(p, d) for p, d in files.items())
    )
    return export.pack(KIND, manifest, files), manifest


def image_key(env: Mapping[str, str]) -> CacheKey:
    """This install's side of the key, read without a GPU (arch, device and SM count left empty)."""
    here = triton.installed_version()
    return CacheKey(triton=here, cache_dir=str(cache_dir(env)), arch="", device="", sm_count=0)


def install_differences(key: CacheKey, archs: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """Everything that keeps an export's kernels from loading here (archs: the image's); a version this
    install cannot name is not compared."""
    here = image_key(env)
    found = [arch_difference(key.arch, archs)]
    if here.triton and key.triton != here.triton:
        found.append(f"triton {key.triton} != {here.triton}")
    if key.cache_dir != here.cache_dir:
        found.append(f"TRITON_CACHE_DIR {key.cache_dir} != {here.cache_dir} (Triton's group files name it)")
    return [d for d in found if d]


def install(manifest: TritonKernelCache, files: Mapping[str, bytes], into: Path = SHIPPED) -> None:
    """The kernels into a new folder `into`, readable by every user, their manifest and sums beside."""
    export.install(KIND, manifest, files, into, held="Triton kernels")


def read_manifest(into: Path = SHIPPED) -> TritonKernelCache | None:
    manifest: TritonKernelCache | None = export.read_manifest(KIND, into)
    return manifest


def compiled_since(root: Path, manifest: TritonKernelCache | None) -> list[str]:
    """The published entries in a live cache that the shipped manifest does not list: what Triton
    compiled there."""
    shipped = set(manifest.entries) if manifest else set()
    return [entry.name for entry in published(root) if entry.name not in shipped]


def placed(cache: Path, entry: str) -> bool:
    """Whether Triton loads `entry` from `cache`: its group file whole, naming that folder."""
    return group_files(cache / entry, cache) is not None


def made_with(key: CacheKey) -> str:
    return f"triton {key.triton}"


def guard_rows(env: Mapping[str, str], archs: Sequence[str], *, verify_bytes: bool = True) -> list[Check]:
    """Its shipped kernels' guard row: epstack.jit.placed's, given this module."""
    return placed_rows(tritonserve, env, archs, verify_bytes=verify_bytes)
