"""The build's record of a passing guard: what a container start compares before it trusts the build.

guard-layer.sh writes it (`epstack guard --record`) once a layer's guard passed, beside the report:
the digests of the pins file and of that report, the environment variables that decide what the guard
sees, and a stat fingerprint of the files that decide it. At start (`epstack guard --at-start`) a
record equal to the container's own facts means the build's proof holds; the first difference is named
in one line, and the full guard runs.

The fingerprint is, per folder, a digest of its entries' names, sizes, modes and mtimes in whole
seconds (a layer pushed and pulled keeps only those: its tar truncates them), over epstack's home (the
venv, the tool, pins, locks, wheels; not reports/ or sbom/, written after the record), the CUDA_HOME
the JITs use, and library resolution: `ldconfig -p` and the folders it names, without the NVIDIA
driver's own libraries (a GPU host's runtime mounts them and runs ldconfig; the start checks the driver
itself). __pycache__ folders are left out: Python may write them under any import (PYTHONDONTWRITEBYTECODE
unset), and a stale one is never loaded (its header names its source's mtime and size).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from epstack import imagepaths
from epstack.cmd import run
from epstack.document import Schema
from epstack.errors import BadInput, EnvironmentProblem
from epstack.guard.jitprobe import STEERING, reports_folder
from epstack.guard.libraries import LoadedRuntime, loaded_cuda_runtime
from epstack.guard.onecuda import cuda_home

# What decides the guard's rows besides the files: the loader's and Python's search paths, the JITs'
# compilers (STEERING), NCCL's plugins, and where epstack reads its pins, locks, reports. Not
# EP_JIT_CACHE_DIR: its row is checked at every start (the entrypoint moves it off a read-only root).
DECIDING_ENV = (
    *("LD_PRELOAD", "LD_LIBRARY_PATH", "PATH", "VIRTUAL_ENV"),
    *("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONUSERBASE"),
    *STEERING,
    *("NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN", "NCCL_ENV_PLUGIN"),
    *("EPSTACK_HOME", "EPSTACK_PINS", "EPSTACK_LOCKS", "EPSTACK_REPORTS"),
)
# The NVIDIA driver's libraries: mounted by the container runtime on a GPU host, checked live instead.
DRIVER_LIBRARY = re.compile(
    r"^lib(cuda\.so|cudadebugger|nvidia-|nvcuvid|nvoptix|GLX_nvidia|EGL_nvidia|GLESv\w*_nvidia|vdpau_nvidia|dxcore)"
)
SKIPPED_FOLDERS = frozenset({"__pycache__"})
LIBRARY_RESOLUTION = "library resolution"  # the tree of `ldconfig -p` and the folders it names


@dataclass(frozen=True, kw_only=True)
class Tree:
    """The fingerprint of one root: each folder's path (relative, "." the root) and its digest."""

    root: str
    folders: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class GuardRecord:
    layer: str
    pins: str
    pins_sha256: str
    locks: str  # "" without --locks / $EPSTACK_LOCKS
    report: str  # the passing report this record vouches for
    report_sha256: str
    env: dict[str, str]  # DECIDING_ENV as the build set them; unset ones absent
    cuda_runtime: LoadedRuntime  # the libcudart the build guard's `import torch` mapped
    trees: tuple[Tree, ...]

    def to_json(self) -> str:
        return GUARD_RECORD.dumps(self)


GUARD_RECORD = Schema(
    name="guard-record",
    version=1,
    model=GuardRecord,
    what="an epstack guard build record",
    fix="rebuild the image (guard-layer.sh writes it)",
)


def record_path(layer: str) -> Path:
    return reports_folder() / f"{layer}.record.json"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def deciding_env(env: Mapping[str, str]) -> dict[str, str]:
    """DECIDING_ENV as set in `env`; LD_LIBRARY_PATH without the driver stub's own folder (cuda-stub.sh
    makes a new one each time, and a driver, when there is one, is checked live)."""
    found = {key: env[key] for key in DECIDING_ENV if key in env}
    stub = env.get("EPSTACK_CUDA_STUB")
    if stub and "LD_LIBRARY_PATH" in found:
        target = os.path.realpath(stub)
        kept = [
            p for p in found["LD_LIBRARY_PATH"].split(":") if os.path.realpath(f"{p}/libcuda.so.1") != target
        ]
        found["LD_LIBRARY_PATH"] = ":".join(kept)
    return found


def _digest(entries: list[tuple[str, int, int, int]]) -> str:
    return hashlib.sha256(repr(sorted(entries)).encode()).hexdigest()[:16]


def _entry(entry: os.DirEntry[str]) -> tuple[str, int, int, int]:
    """A folder's entry as its digest sees it; a folder's own size and mtime move whenever anything is
    written in it, so only its name and mode count (its files are digested on their own)."""
    info = entry.stat(follow_symlinks=False)
    if stat.S_ISDIR(info.st_mode):
        return (entry.name + "/", 0, 0, info.st_mode)
    return (entry.name, info.st_size, info.st_mtime_ns // 1_000_000_000, info.st_mode)


def _scan(folder: str, hidden: frozenset[str]) -> tuple[str, list[str]]:
    """A folder's digest and its subfolders' names, without `hidden` names. Scanned through a descriptor,
    so each entry's stat resolves one name, not its whole path again (the walk's cost, in overlayfs)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with os.scandir(descriptor) as scan:
                entries = [_entry(entry) for entry in scan if entry.name not in hidden]
        finally:
            os.close(descriptor)
    except OSError as exc:
        return f"unreadable: {exc.strerror}", []
    return _digest(entries), [name[:-1] for name, *_ in entries if name.endswith("/")]


def walk(root: Path, skip: Iterable[Path] = ()) -> Tree:
    """Each folder under `root` (not following links; not __pycache__, not `skip`) and its digest."""
    hidden: dict[str, set[str]] = {}
    for path in skip:
        hidden.setdefault(str(path.parent), set()).add(path.name)
    folders: dict[str, str] = {}
    pending = [(".", str(root))]
    while pending:
        relative, folder = pending.pop()
        folders[relative], subfolders = _scan(folder, SKIPPED_FOLDERS | hidden.get(folder, set()))
        pending += [
            (name if relative == "." else f"{relative}/{name}", f"{folder}/{name}") for name in subfolders
        ]
    return Tree(root=str(root), folders=folders)


def library_tree() -> Tree:
    """What the loader resolves: `ldconfig -p`'s entries, and the files of each folder they name plus
    the default ones (a library dropped there without ldconfig is found too), driver libraries left out."""
    result = run("ldconfig", "-p", echo=False)
    if result.returncode != 0:
        raise EnvironmentProblem(f"ldconfig -p failed: {result.stderr.strip()}")
    lines = [line.strip() for line in result.stdout.splitlines()[1:]]
    resolved = sorted(line for line in lines if not DRIVER_LIBRARY.match(line))
    folders = {os.path.dirname(line.rsplit(" => ", 1)[-1]) for line in resolved} | {"/lib", "/usr/lib"}
    digests = {"ldconfig -p": hashlib.sha256("\n".join(resolved).encode()).hexdigest()[:16]}
    for folder in sorted(folders):
        try:
            with os.scandir(folder) as scan:
                files = [e for e in scan if not DRIVER_LIBRARY.match(e.name) and not e.is_dir()]
            digests[folder] = _digest([_entry(e) for e in files])
        except OSError as exc:
            digests[folder] = f"unreadable: {exc.strerror}"
    return Tree(root=LIBRARY_RESOLUTION, folders=digests)


def fingerprint(env: Mapping[str, str]) -> tuple[Tree, ...]:
    """Every tree the record covers, as this container has them."""
    home = Path(env.get("EPSTACK_HOME") or imagepaths.EPSTACK_HOME)
    venv = Path(env.get("VIRTUAL_ENV") or imagepaths.VENV)
    reports = (home / "reports", home / "sbom", reports_folder())
    trees = [walk(venv), walk(home, skip=(venv, *reports))]
    cuda = Path(os.path.realpath(cuda_home(env)))
    if cuda.is_dir():
        trees.append(walk(cuda))
    return (*trees, library_tree())


def make_record(
    *, layer: str, pins: Path, locks: Path | None, report: Path, env: Mapping[str, str]
) -> GuardRecord:
    """The record of this process's passing guard (its `import torch` mapped the runtime it names)."""
    return GuardRecord(
        layer=layer,
        pins=str(pins),
        pins_sha256=sha256(pins),
        locks=str(locks or ""),
        report=str(report.absolute()),
        report_sha256=sha256(report),
        env=deciding_env(env),
        cuda_runtime=loaded_cuda_runtime(Path("/proc/self/maps").read_text()),
        trees=fingerprint(env),
    )


def read_record(layer: str) -> GuardRecord | str:
    """The layer's record, or why there is none to trust."""
    path = record_path(layer)
    if not path.exists():
        return f"no build record {path}"
    try:
        return GUARD_RECORD.read(path)
    except BadInput as exc:
        return str(exc)


def _tree_change(was: Tree, now: Tree) -> str:
    changed = sorted(
        folder
        for folder in was.folders.keys() | now.folders.keys()
        if was.folders.get(folder) != now.folders.get(folder)
    )
    if not changed:
        return ""
    first = changed[0] if was.root == LIBRARY_RESOLUTION else os.path.join(was.root, changed[0])
    what = f"{len(changed)} folder{'s' if len(changed) > 1 else ''}"
    return f"{what} changed in {was.root} since the build (first: {os.path.normpath(first)})"


def what_changed(
    record: GuardRecord, *, layer: str, pins: Path, locks: Path | None, env: Mapping[str, str]
) -> str:
    """The first difference between the record and this container, in words; "" when there is none."""
    asked = {"layer": layer, "pins": str(pins), "locks": str(locks or "")}
    recorded = {"layer": record.layer, "pins": record.pins, "locks": record.locks}
    for key, value in asked.items():
        if value != recorded[key]:
            return (
                f"the build recorded --{key} {recorded[key] or '(none)'}, this start has {value or '(none)'}"
            )
    for path, digest in ((pins, record.pins_sha256), (Path(record.report), record.report_sha256)):
        try:
            if sha256(path) != digest:
                return f"{path} differs from the build's"
        except OSError as exc:
            return f"{path}: {exc.strerror}"
    now = deciding_env(env)
    for key in sorted(now.keys() | record.env.keys()):
        if now.get(key) != record.env.get(key):
            return f"{key}={now.get(key, '(unset)')}, the build had {record.env.get(key, '(unset)')}"
    trees = {tree.root: tree for tree in fingerprint(env)}
    if trees.keys() != {tree.root for tree in record.trees}:
        return f"the trees fingerprinted differ: {', '.join(sorted(trees))} now"
    return next(filter(None, (_tree_change(was, trees[was.root]) for was in record.trees)), "")
