"""The build's record of a passing guard: what a container start compares before it trusts the build.

guard-layer.sh writes it (`epstack image guard --record`) once a layer's guard passed, beside the report:
the digests of the pins file and of that report, the environment variables that decide what the guard
sees, a stat fingerprint of the files that decide it, and the sha256 of the interpreter and the loader's
own configuration. At start (`epstack image guard --at-start`) a record equal to the container's own facts,
and no file of those trees changed in this container, means the build's proof holds; the first
difference is named in one line, and the full guard runs.

The fingerprint is, per folder, a digest of its own mode and its files' names, sizes, modes and mtimes
in whole seconds (a layer pushed and pulled keeps only those: its tar truncates them), each subfolder a
folder of its own: one stat per file, resolved against the folder's descriptor (the listing says which
entries are folders; the walk's cost is these stats, the kernel's first lookup of each name in a new
container). It covers epstack's home (the venv, the tool, pins, locks, wheels, shipped JIT caches; not
reports/ or sbom/, written after the record), the CUDA_HOME the JITs use, the interpreter's standard
library, and library resolution: `ldconfig -p` and the folders it names, without the NVIDIA driver's
own libraries (a GPU host's runtime mounts them and runs ldconfig; the start checks the driver itself).
What that cannot see, a file rewritten in place with its size and mtime put back, the kernel's change
time does: every write, chmod, rename or utime sets a file's ctime to now, and nothing in a container
with the default capabilities can set it back (that needs the clock, CAP_SYS_TIME). So at start any
file of those trees whose ctime is later than the container's first process started was changed in
this container. __pycache__ is not fingerprinted (Python may write it under any import), but the
images compile every module and set PYTHONDONTWRITEBYTECODE: a bytecode file changed in this container
is foreign, and Python would run it (an unchecked-hash .pyc whatever its source says; any other whose
header matches its source).
"""

from __future__ import annotations

import hashlib
import marshal
import math
import os
import re
import sys
import sysconfig
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISLNK, S_ISREG

from epstack import imagepaths
from epstack.cmd import run
from epstack.document import Schema
from epstack.errors import BadInput, EnvironmentProblem
from epstack.guard.libraries import LoadedRuntime, loaded_cuda_runtime
from epstack.guard.onecuda import cuda_home
from epstack.jit.probe import STEERING
from epstack.jit.probereport import reports_folder

# What decides the guard's rows besides the files: what the loader loads (glibc's UNSECURE_ENVVARS,
# sysdeps/generic/unsecvars.h, the variables it drops for setuid programs because they steer loading,
# less those that only print, resolve hosts or name temporary and time-zone folders; and
# LD_ASSUME_KERNEL of ld.so(8)), what Python imports and which bytecode it runs (`python3 --help-env`,
# and PYTHONUSERBASE of the site module), the JITs' compilers (STEERING), NCCL's plugins and the one
# vLLM's gate loads, and where epstack reads its pins, locks, reports. Not EP_JIT_CACHE_DIR: its row
# is checked at every start (the entrypoint moves it off a read-only root).
LOADER_ENV = (
    *("LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "LD_ASSUME_KERNEL", "LD_BIND_NOT", "LD_DYNAMIC_WEAK"),
    *("LD_HWCAP_MASK", "LD_ORIGIN_PATH", "LD_PROFILE", "LD_USE_LOAD_BIAS", "GLIBC_TUNABLES"),
    *("GCONV_PATH", "GETCONF_DIR", "LOCPATH", "NLSPATH"),
)
PYTHON_ENV = (
    *("PYTHONPATH", "PYTHONHOME", "PYTHONPLATLIBDIR", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONUSERBASE"),
    *("PYTHONPYCACHEPREFIX", "PYTHONOPTIMIZE", "PYTHONSTARTUP", "PYTHONBREAKPOINT", "PYTHONWARNINGS"),
)
DECIDING_ENV = (
    *LOADER_ENV,
    *("PATH", "VIRTUAL_ENV"),
    *PYTHON_ENV,
    *STEERING,
    *("NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN", "NCCL_ENV_PLUGIN"),
    "VLLM_NCCL_SO_PATH",  # the libnccl vLLM's deepep_v2 gate loads (guard.vllm)
    *("EPSTACK_HOME", "EPSTACK_PINS", "EPSTACK_LOCKS", "EPSTACK_REPORTS"),
)
# The NVIDIA driver's libraries: mounted by the container runtime on a GPU host, checked live instead.
DRIVER_LIBRARY = re.compile(
    r"^lib(cuda\.so|cudadebugger|nvidia-|nvcuvid|nvoptix|GLX_nvidia|EGL_nvidia|GLESv\w*_nvidia|vdpau_nvidia|dxcore)"
)
SKIPPED_FOLDERS = frozenset({"__pycache__"})
LIBRARY_RESOLUTION = "library resolution"  # the tree of `ldconfig -p` and the folders it names
BY_CONTENT = "files by content"  # the interpreter and the loader's configuration, by sha256
# Read by the loader of every process; /etc/ld.so.cache and ld.so.conf.d are not here: a GPU host's
# runtime rewrites them at start, and `ldconfig -p` (library resolution) says what they resolve.
LOADER_FILES = ("/etc/ld.so.preload", "/etc/ld.so.conf")


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
    version=2,
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


Row = tuple[str, int, int, int]  # an entry as its folder's digest sees it: name, size, mtime (s), mode
SECOND = 1_000_000_000


def _digest(rows: list[Row]) -> str:
    """The rows sorted, in marshal's version 2 (plain values, no references to repeated ones)."""
    return hashlib.sha256(marshal.dumps(sorted(rows), 2)).hexdigest()[:16]


@dataclass(kw_only=True)
class Changes:
    """At start: the files of the walked trees changed in this container (ctime after `since`)."""

    since: float  # the container's first process started (epoch seconds)
    paths: list[str] = field(default_factory=list)


def _link(entry: os.DirEntry[str], folder: str, info: os.stat_result, changes: Changes | None) -> Row:
    """A link to a file counts as the file it names too, wherever that is (Ubuntu's stdlib sitecustomize.py
    is a link into /etc); a link to anything else as itself."""
    try:
        target = entry.stat()
    except OSError:
        return (entry.name + " ->", info.st_size, 0, info.st_mode)  # dangling
    if not S_ISREG(target.st_mode):
        return (entry.name, info.st_size, info.st_mtime_ns // SECOND, info.st_mode)
    if changes is not None and target.st_ctime > changes.since:
        path = f"{folder}/{entry.name}"
        changes.paths.append(f"{path} -> {os.path.realpath(path)}")
    return (entry.name + " ->", target.st_size, target.st_mtime_ns // SECOND, info.st_mode)


def _rows(
    folder: str, entries: Iterable[os.DirEntry[str]], changes: Changes | None
) -> tuple[list[Row], list[str]]:
    """The files' rows and the subfolders' names; with `changes`, each file changed since the start. A
    subfolder is no row (its size, mtime and ctime move whenever anything is written in it): the walk
    digests it on its own, its mode included."""
    since = changes.since if changes is not None else math.inf
    changed = changes.paths if changes is not None else []
    rows: list[Row] = []
    subfolders: list[str] = []
    for entry in entries:  # the walk's loop: one stat per file, a path only for a changed one
        if entry.is_dir(follow_symlinks=False):  # the listing's file type: no stat
            subfolders.append(entry.name)
            continue
        info = entry.stat(follow_symlinks=False)
        mode = info.st_mode
        if info.st_ctime > since:
            changed.append(f"{folder}/{entry.name}")
        if S_ISLNK(mode):
            rows.append(_link(entry, folder, info, changes))
        else:
            rows.append((entry.name, info.st_size, info.st_mtime_ns // SECOND, mode))
    return rows, subfolders


def _scan(folder: str, hidden: Collection[str], changes: Changes | None) -> tuple[list[Row], list[str]]:
    """A folder's rows, its own mode as ".", and its subfolders, without `hidden` names. Scanned through a
    descriptor, so each entry's stat resolves one name, not its whole path again (the walk's cost, in
    overlayfs)."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:  # each entry's stat resolves against the descriptor: keep it open until they are done
        with os.scandir(descriptor) as scan:
            rows, subfolders = _rows(folder, (entry for entry in scan if entry.name not in hidden), changes)
        return [*rows, (".", 0, 0, os.fstat(descriptor).st_mode)], subfolders
    finally:
        os.close(descriptor)


def walk(root: Path, skip: Iterable[Path] = (), changes: Changes | None = None) -> Tree:
    """Each folder under `root` (not following links; not __pycache__, not `skip`) and its digest; with
    `changes`, each file changed since the container started, bytecode in __pycache__ included (such a
    folder, None its relative path, is scanned for that alone)."""
    hidden: dict[str, set[str]] = {}
    for path in skip:
        hidden.setdefault(str(path.parent), set()).add(path.name)
    folders: dict[str, str] = {}
    pending: list[tuple[str | None, str]] = [(".", str(root))]
    while pending:
        relative, folder = pending.pop()
        try:
            rows, subfolders = _scan(folder, hidden.get(folder, ()), changes)
        except OSError as exc:
            if relative is not None:
                folders[relative] = f"unreadable: {exc.strerror}"
            continue
        if relative is None:
            continue
        folders[relative] = _digest(rows)
        for name in subfolders:
            if name not in SKIPPED_FOLDERS:
                pending.append((name if relative == "." else f"{relative}/{name}", f"{folder}/{name}"))
            elif changes is not None:
                pending.append((None, f"{folder}/{name}"))
    return Tree(root=str(root), folders=folders)


def library_tree(changes: Changes | None = None) -> Tree:
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
            digests[folder] = _digest(_rows(folder, files, changes)[0])
        except OSError as exc:
            digests[folder] = f"unreadable: {exc.strerror}"
    return Tree(root=LIBRARY_RESOLUTION, folders=digests)


def content_tree() -> Tree:
    """The interpreter (and its libpython, where it has one) and the loader's own configuration, by
    sha256: the venv's python is a link to it, and /etc/ld.so.preload is read by every process."""
    files = [os.path.realpath(sys.executable), *LOADER_FILES]
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        files.insert(1, f"{sysconfig.get_config_var('LIBDIR')}/{sysconfig.get_config_var('INSTSONAME')}")
    digests: dict[str, str] = {}
    for path in files:
        try:
            digests[path] = sha256(Path(path))[:16]
        except FileNotFoundError:
            digests[path] = "absent"
        except OSError as exc:
            digests[path] = f"unreadable: {exc.strerror}"
    return Tree(root=BY_CONTENT, folders=digests)


def fingerprint(env: Mapping[str, str], changes: Changes | None = None) -> tuple[Tree, ...]:
    """Every tree the record covers, as this container has them; with `changes`, what changed in it."""
    home = Path(env.get("EPSTACK_HOME") or imagepaths.EPSTACK_HOME)
    venv = Path(env.get("VIRTUAL_ENV") or imagepaths.VENV)
    reports = (home / "reports", home / "sbom", reports_folder())
    trees = [walk(venv, changes=changes), walk(home, skip=(venv, *reports), changes=changes)]
    cuda = Path(os.path.realpath(cuda_home(env)))
    if cuda.is_dir():
        trees.append(walk(cuda, changes=changes))
    trees.append(walk(Path(sysconfig.get_paths()["stdlib"]), changes=changes))
    return (*trees, library_tree(changes), content_tree())


def container_started() -> float:
    """When this container's first process started (epoch seconds): /proc/1/stat's start time in clock
    ticks after boot, plus /proc/stat's boot time."""
    fields = Path("/proc/1/stat").read_text().rsplit(")", 1)[1].split()
    boot = next(line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
    return int(boot.split()[1]) + int(fields[19]) / os.sysconf("SC_CLK_TCK")


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
    first = changed[0] if was.root in (LIBRARY_RESOLUTION, BY_CONTENT) else os.path.join(was.root, changed[0])
    noun = "file" if was.root == BY_CONTENT else "folder"
    what = f"{len(changed)} {noun}{'s' if len(changed) > 1 else ''}"
    return f"{what} changed in {was.root} since the build (first: {os.path.normpath(first)})"


def _inputs_change(
    record: GuardRecord, *, layer: str, pins: Path, locks: Path | None, env: Mapping[str, str]
) -> str:
    """What the start was asked, the pins and report it reads, and the deciding variables."""
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
    return ""


def _files_change(record: GuardRecord, env: Mapping[str, str]) -> str:
    """The trees against the build's, then any of their files changed since the container started."""
    changes = Changes(since=container_started())
    trees = {tree.root: tree for tree in fingerprint(env, changes)}
    if trees.keys() != {tree.root for tree in record.trees}:
        return f"the trees fingerprinted differ: {', '.join(sorted(trees))} now"
    changed = next(filter(None, (_tree_change(was, trees[was.root]) for was in record.trees)), "")
    if changed or not changes.paths:
        return changed
    count = len(changes.paths)
    return (
        f"{count} file{'s' if count > 1 else ''} changed in this container since it started "
        f"(first: {sorted(changes.paths)[0]}; its ctime is later than the container's first process)"
    )


def what_changed(
    record: GuardRecord, *, layer: str, pins: Path, locks: Path | None, env: Mapping[str, str]
) -> str:
    """The first difference between the record and this container, in words; "" when there is none."""
    return _inputs_change(record, layer=layer, pins=pins, locks=locks, env=env) or _files_change(record, env)
