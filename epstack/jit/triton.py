"""Triton's C launcher, compiled by the image build for the folders GPU nodes mount the driver in, and
shipped in the image.

A process's first Triton kernel launch builds `cuda_utils` (triton/backends/nvidia/driver.c: gcc,
Python.h, libcuda.so.1; 0.7-0.9 s) into $TRITON_CACHE_DIR/<key>/. The key hashes the source, the
platform and the library folders, among them the folder of the node's libcuda.so.1 as Triton finds
it (`libcuda_dirs`). A build has only the driver stub, so it compiles the launcher once for each
folder in LIBCUDA_DIRS (TRITON_LIBCUDA_PATH naming it, the stub to link against) and ships them under
imagepaths.JIT with a manifest; the entrypoint copies them into the writable TRITON_CACHE_DIR, where
the node's own key finds its launcher. A node whose driver is elsewhere builds its own at first
launch, as it would without these; the guard's row (`guard_rows`, in the base scope) says which.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

from epstack import imagepaths
from epstack.checkrow import Check
from epstack.cmd import run
from epstack.document import Schema
from epstack.errors import EpstackError
from epstack.jit.compiles import epstack_python
from epstack.jit.install import CacheHome
from epstack.jit.shipped import (
    CacheFile,
    changed_files,
    install_folder,
    manifest_beside,
    none_shipped,
    sha256_hex,
)

SHIPPED = Path(imagepaths.JIT) / "triton"
NAME = "triton"
TITLE = "Triton"
COMPONENT = f"JIT cache {TITLE} launcher"
GUARD_SCOPES: tuple[str, ...] = ("base",)
CHECKED_AT_START = True  # the launcher against the folder of the driver mounted now
# Where a container sees libcuda.so.1 on GPU nodes, as Triton names the folder:
LIBCUDA_DIRS = (
    # the NVIDIA Container Toolkit (Docker, containerd, CRI-O, enroot) mounts it into the image's
    # library folder and runs ldconfig, which lists it under /lib on Ubuntu (merged /usr)
    "/lib/x86_64-linux-gnu",
    # GKE's driver installer mounts it here, found through the image's LD_LIBRARY_PATH
    "/usr/local/nvidia/lib64",
)
LAUNCH_S = "0.7-0.9 s"  # what the build of the launcher costs a process's first launch (gcc, measured)


@dataclass(frozen=True, kw_only=True)
class Launcher:
    libcuda_dir: str  # the folder it was built for
    file: CacheFile  # <key>/cuda_utils.<ext>, relative to the cache folder


@dataclass(frozen=True, kw_only=True)
class ShippedLaunchers:
    triton: str  # triton's version
    launchers: tuple[Launcher, ...]


TRITON_LAUNCHERS = Schema(
    name="triton-launchers",
    version=1,
    model=ShippedLaunchers,
    what="a Triton launcher manifest",
    fix="rebuild the image: its base guard step ships them (`epstack jit probe --ship`)",
)


def installed_version() -> str:
    """triton's version here ("" when it is not installed)."""
    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return ""


def libcuda_dirs(ldconfig: str, env: Mapping[str, str]) -> list[str]:
    """The folders of libcuda.so.1 as Triton finds them (triton/backends/nvidia/driver.py libcuda_dirs):
    TRITON_LIBCUDA_PATH; else each folder `ldconfig -p` lists it in; else the LD_LIBRARY_PATH
    folders that hold it."""
    if env.get("TRITON_LIBCUDA_PATH"):
        return [env["TRITON_LIBCUDA_PATH"]]
    found = [os.path.dirname(line.split()[-1]) for line in ldconfig.splitlines() if "libcuda.so.1" in line]
    if not found and env.get("LD_LIBRARY_PATH"):
        found = [
            folder
            for folder in env["LD_LIBRARY_PATH"].split(":")
            if os.path.exists(os.path.join(folder, "libcuda.so.1"))
        ]
    return found


def node_libcuda_dirs(env: Mapping[str, str]) -> list[str]:
    """libcuda_dirs on this machine, now ([] where ldconfig does not run)."""
    try:
        listed = run("/sbin/ldconfig", "-p", echo=False, timeout=30).stdout
    except (EpstackError, OSError):
        listed = ""
    return libcuda_dirs(listed, env)


def build(cache: Path, stub: str, work: Path) -> list[Launcher]:
    """In `cache`, the launcher for each folder of LIBCUDA_DIRS, each built by a process of its own
    (Triton finds the folder once per process) into an empty cache of its own, linked against the
    driver stub `stub`; folders that give one key share its launcher."""
    shim = work / "lib"
    shim.mkdir()
    for name in ("libcuda.so.1", "libcuda.so"):  # -l:libcuda.so.1 (Triton 3.8), -lcuda (older ones)
        (shim / name).symlink_to(stub)
    launchers: list[Launcher] = []
    for index, folder in enumerate(LIBCUDA_DIRS):
        own = work / f"cache-{index}"
        env = {
            **os.environ,
            "TRITON_CACHE_DIR": str(own),
            "TRITON_LIBCUDA_PATH": folder,
            "LIBRARY_PATH": str(shim),
        }
        result = run(*epstack_python("epstack.jit.compiles", "child_main"), "triton-launcher", work, env=env)
        made = list(own.glob("*/cuda_utils*"))
        if result.returncode != 0 or len(made) != 1:
            why = result.stderr.strip()[-2000:]
            raise EpstackError(f"Triton's launcher for libcuda.so.1 in {folder} did not build: {why}")
        relative = made[0].relative_to(own)
        file = next((item.file for item in launchers if item.file.path == relative.as_posix()), None)
        if file is None:  # the first build of a key is the one shipped (builds differ in their bytes)
            (cache / relative.parent).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(made[0], cache / relative)
            data = made[0].read_bytes()
            file = CacheFile(path=relative.as_posix(), sha256=sha256_hex(data), bytes=len(data))
        launchers.append(Launcher(libcuda_dir=folder, file=file))
    return launchers


def ship(cache: Path, launchers: list[Launcher], into: Path = SHIPPED) -> ShippedLaunchers:
    """The launchers built in `cache` into a new folder `into`, readable by every user, the manifest
    beside."""
    manifest = ShippedLaunchers(triton=installed_version(), launchers=tuple(launchers))

    def fill(staging: Path) -> None:
        for launcher in launchers:
            target = staging / launcher.file.path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(cache / launcher.file.path, target)
            target.chmod(0o755)

    refusal = "already holds Triton launchers; fix: ship into a new image layer"
    files = {launcher.file.path: launcher.file for launcher in launchers}.values()
    install_folder(into, TRITON_LAUNCHERS.dumps(manifest), files, fill, refusal=refusal)
    return manifest


def read_manifest(into: Path = SHIPPED) -> ShippedLaunchers | None:
    path = manifest_beside(into)
    return TRITON_LAUNCHERS.read(path) if path.is_file() else None


def cache_dir(env: Mapping[str, str]) -> Path:
    """Triton's cache folder as it reads it (triton/knobs.py cache_knobs): TRITON_CACHE_DIR, else
    $TRITON_HOME/.triton/cache, TRITON_HOME defaulting to ~."""
    home = Path(env.get("TRITON_HOME") or env.get("HOME", "~")).expanduser()
    return Path(env.get("TRITON_CACHE_DIR") or home / ".triton" / "cache")


HOME = CacheHome(
    variable="TRITON_CACHE_DIR",
    default=cache_dir,
    name=SHIPPED.name,
    entries=("*",),  # one folder per launcher key
    what="Triton's launcher and kernels go to",
)


FIX = "rebuild the image: its base guard step builds and ships it (`jit probe --ship`)"


def guard_rows(
    env: Mapping[str, str], archs: Sequence[str], folder: Path = SHIPPED, *, verify_bytes: bool = True
) -> list[Check]:
    """Triton's shipped launchers: intact (`verify_bytes`), made for this triton, and whether the
    folder this node's libcuda.so.1 is in (as Triton finds it) is one they were built for."""
    manifest = read_manifest(folder)
    expected = f"Triton's launcher for libcuda.so.1 in {' or '.join(LIBCUDA_DIRS)}"
    if manifest is None:
        return [
            none_shipped(COMPONENT, expected, f"a process's first kernel launch builds it ({LAUNCH_S})", FIX)
        ]
    built_for = [launcher.libcuda_dir for launcher in manifest.launchers]
    row = Check(
        component=COMPONENT,
        expected=expected,
        found=f"triton {manifest.triton}: {', '.join(built_for)}",
        verdict="ok",
    )
    broken = changed_files(folder, [item.file for item in manifest.launchers]) if verify_bytes else []
    if broken:
        return [replace(row, verdict="mismatch", detail=f"{broken[0]} missing or changed", fix=FIX)]
    here = installed_version()
    if manifest.triton != here:
        detail = f"built for triton {manifest.triton}, here {here}: a first launch builds another"
        return [replace(row, verdict="mismatch", detail=detail, fix=FIX)]
    if env.get("EPSTACK_CUDA_STUB"):
        return [replace(row, detail="no driver mounted here: a GPU node's is checked at its start")]
    return [_placement(row, manifest, env)]


def _placement(row: Check, manifest: ShippedLaunchers, env: Mapping[str, str]) -> Check:
    """The row as this node's Triton will find its launcher: built for its driver's folder, copied in."""
    dirs = node_libcuda_dirs(env)
    launcher = next((item for item in manifest.launchers if [item.libcuda_dir] == dirs), None)
    if launcher is None:
        return replace(
            row,
            verdict="warn",
            detail=f"libcuda.so.1 in {', '.join(dirs) or 'no folder'} here: a process's first kernel launch "
            f"builds its launcher ({LAUNCH_S})",
        )
    cache = cache_dir(env)
    if not (cache / launcher.file.path).is_file():
        return replace(
            row,
            verdict="warn",
            detail=f"the one for {launcher.libcuda_dir} is not in {cache}: a first launch builds it",
            fix="start through the image's entrypoint, which copies it there",
        )
    return replace(row, detail=f"the one for {launcher.libcuda_dir} in {cache}")
