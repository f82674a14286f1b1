"""The fingerprint of the files that decide what a container runs, and the changes it shows.

Per folder, a digest of its own mode and its files' names, sizes, modes and mtimes in whole seconds (a
layer pushed and pulled keeps only those: its tar truncates them), each subfolder a folder of its own,
bytecode in __pycache__ included (the images compile every module and set PYTHONDONTWRITEBYTECODE).
One stat per file, resolved against the folder's descriptor (the listing says which entries are
folders; the walk's cost is these stats, the kernel's first lookup of each name in a new container).
The build keeps every folder's rows too (its listing), read only to name what changed in a folder
whose digest differs: the file added, removed, or its size, mtime, mode or type.

The trees: epstack's home (the venv, the tool, pins, locks, wheels, shipped JIT caches; not reports/
or sbom/, written after the record), the CUDA_HOME the JITs use, the interpreter's standard library,
/etc/python3* (Ubuntu's sitecustomize.py is a link into it), and library resolution: `ldconfig -p` and
the folders it names, without the NVIDIA driver's own libraries (a GPU host's runtime mounts them and
runs ldconfig; the start checks the driver itself). By content (sha256): the interpreter, its
libpython, and the loader's configuration.

What a digest cannot see, a file rewritten in place with its size and mtime put back, the kernel's
change time does: every write, chmod, rename or utime sets a file's ctime to now, and nothing in a
container with the default capabilities can set it back (that needs the clock, CAP_SYS_TIME). So at
start any file of those trees whose ctime is later than the container's first process started was
changed in this container.

At start on an overlayfs root the walk lists only the folders that can differ from the build's (Unpacked):
a file written in the container is copied up with every folder above it, each with a new ctime, and a
layer unpacked after the record holds every folder above its files, unpacked then too. So a folder whose
ctime is earlier than the record's, with no other file system mounted on, under or above it, was unpacked
before the record and nothing under it changed since: it keeps the build's digest, and so does every
folder under it, unlisted. This trusts that layers are unpacked in order, as docker and containerd do
(containerd's parallel unpack, `max_concurrent_unpacks` above 1, does not: EPSTACK_GUARD_WALK=full lists
every folder).
"""

from __future__ import annotations

import glob
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
from epstack.errors import EnvironmentProblem
from epstack.guard.mounts import Mounts
from epstack.guard.onecuda import cuda_home
from epstack.jit.probereport import reports_folder

# The NVIDIA driver's libraries: mounted by the container runtime on a GPU host, checked live instead.
DRIVER_LIBRARY = re.compile(
    r"^lib(cuda\.so|cudadebugger|nvidia-|nvcuvid|nvoptix|GLX_nvidia|EGL_nvidia|GLESv\w*_nvidia|vdpau_nvidia|dxcore)"
)
LIBRARY_RESOLUTION = "library resolution"  # the tree of `ldconfig -p` and the folders it names
LDCONFIG = "ldconfig -p"  # its folder in that tree: one row per entry
BY_CONTENT = "files by content"  # the interpreter and the loader's configuration, by sha256
# Read by the loader of every process; /etc/ld.so.cache and ld.so.conf.d are not here: a GPU host's
# runtime rewrites them at start, and `ldconfig -p` (library resolution) says what they resolve.
LOADER_FILES = ("/etc/ld.so.preload", "/etc/ld.so.conf")
PYTHON_CONFIG = "/etc/python3*"  # Debian's and Ubuntu's: sitecustomize.py, read at every start
LINK = " ->"  # a row's name ends so for a link to a file: the row is the file it names
SECOND = 1_000_000_000

Row = tuple[str, int, int, int]  # an entry as its folder's digest sees it: name, size, mtime (s), mode
Rows = dict[str, list[Row]]  # a tree's folders (relative; "." the root) and their rows


@dataclass(frozen=True, kw_only=True)
class Tree:
    """The fingerprint of one root: each folder's path (relative, "." the root) and its digest."""

    root: str
    folders: dict[str, str]
    skip: tuple[str, ...] = ()  # folders under root the walk leaves out
    # folders holding a link to a file outside the tree: its change copies up no folder of this one, so a
    # start that keeps the build's digests lists these again
    linked: tuple[str, ...] = ()


@dataclass(kw_only=True)
class Changes:
    """At start: the files of the walked trees changed in this container (ctime after `since`), and how many
    folders were listed of those the trees have."""

    since: float  # the container's first process started (epoch seconds)
    paths: list[str] = field(default_factory=list)
    listed: int = 0
    folders: int = 0


@dataclass(frozen=True, kw_only=True)
class Unpacked:
    """What the start keeps from the build without listing it: a folder of `trees` (the build's, by root)
    whose ctime is earlier than `before_ns`, the record's, with no file system of `mounts` on, under or
    above it, and every folder under it."""

    before_ns: int
    trees: Mapping[str, Tree]
    mounts: Mounts

    def kept(self, folder: str) -> bool:
        """The folder was unpacked before the record, and no file system is mounted on it."""
        try:
            return os.stat(folder).st_ctime_ns < self.before_ns and self.mounts.unmounted(folder)
        except OSError:
            return False


def digest(rows: list[Row]) -> str:
    """The rows sorted, in marshal's version 2 (plain values, no references to repeated ones)."""
    return hashlib.sha256(marshal.dumps(sorted(rows), 2)).hexdigest()[:16]


def _link(entry: os.DirEntry[str], folder: str, info: os.stat_result, changes: Changes | None) -> Row:
    """A link to a file counts as the file it names too, wherever that is (Ubuntu's stdlib sitecustomize.py
    is a link into /etc); a link to anything else as itself."""
    try:
        target = entry.stat()
    except OSError:
        return (entry.name + LINK, info.st_size, 0, info.st_mode)  # dangling
    if not S_ISREG(target.st_mode):
        return (entry.name, info.st_size, info.st_mtime_ns // SECOND, info.st_mode)
    if changes is not None and target.st_ctime > changes.since:
        path = f"{folder}/{entry.name}"
        changes.paths.append(f"{path} -> {os.path.realpath(path)}")
    return (entry.name + LINK, target.st_size, target.st_mtime_ns // SECOND, info.st_mode)


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


def folder_rows(folder: str, hidden: Collection[str] = ()) -> list[Row]:
    """One folder's rows (its files' and its own, "."), without `hidden` names."""
    return _scan(folder, hidden, None)[0]


def walk(
    root: Path | str,
    skip: Iterable[Path | str] = (),
    changes: Changes | None = None,
    rows: Rows | None = None,
    unpacked: Unpacked | None = None,
) -> Tree:
    """Each folder under `root` (not following links; not `skip`) and its digest; with `changes`, each
    file changed since the container started; with `rows`, each folder's rows kept there. With `unpacked`,
    a folder of its tree for `root` that it keeps has the build's digest, and so has each folder under it,
    unlisted (but those of the tree's `linked`)."""
    skipped = tuple(str(path) for path in skip)
    hidden: dict[str, set[str]] = {}
    for path in skipped:
        hidden.setdefault(os.path.dirname(path), set()).add(os.path.basename(path))
    base = str(root)
    built = unpacked.trees.get(base) if unpacked is not None else None
    folders = dict(built.folders) if built is not None else {}
    below: dict[str, list[str]] | None = None  # the build's subfolders of each, once a kept tree lists one
    listed: dict[str, bool] = {}  # each folder listed: whether it holds a link to a file outside root
    pending: list[tuple[str, str]] = [(".", base)]
    while pending:
        relative, folder = pending.pop()
        if built is not None and unpacked is not None and relative in built.folders and unpacked.kept(folder):
            continue  # unpacked before the record: the build's digests, from here down
        found, subfolders = _listed(folder, hidden, changes, folders, relative)
        listed[relative] = any(_outside(folder, name, base) for name, *_ in found)
        if rows is not None and found:
            rows[relative] = found
        now = [name if relative == "." else f"{relative}/{name}" for name in subfolders]
        if built is not None:
            below = below if below is not None else _below(built.folders)
            for gone in set(below.get(relative, ())).difference(now):
                _forget(folders, below, gone)  # the build's folder is not there now
        pending += [(name, f"{base}/{name}") for name in now]
    for relative in built.linked if built is not None else ():
        if relative in folders and relative not in listed:
            folder = os.path.normpath(os.path.join(base, relative))
            found = _listed(folder, hidden, changes, folders, relative)[0]
            listed[relative] = any(_outside(folder, name, base) for name, *_ in found)
    if changes is not None:
        changes.folders += len(folders)
    linked = tuple(sorted(relative for relative, outside in listed.items() if outside))
    return Tree(root=base, folders=folders, skip=skipped, linked=linked)


def _listed(
    folder: str,
    hidden: Mapping[str, Collection[str]],
    changes: Changes | None,
    folders: dict[str, str],
    relative: str,
) -> tuple[list[Row], list[str]]:
    """One folder listed now: its digest into `folders` (or why it is unreadable), its rows and subfolders."""
    if changes is not None:
        changes.listed += 1
    try:
        found, subfolders = _scan(folder, hidden.get(folder, ()), changes)
    except OSError as exc:
        folders[relative] = f"unreadable: {exc.strerror}"
        return [], []
    folders[relative] = digest(found)
    return found, subfolders


def _outside(folder: str, name: str, root: str) -> bool:
    """A row of `folder` for a link to a file outside `root`."""
    if not name.endswith(LINK):
        return False
    target = os.path.realpath(f"{folder}/{name.removesuffix(LINK)}")
    return not target.startswith(root.rstrip("/") + "/")


def _below(folders: Mapping[str, str]) -> dict[str, list[str]]:
    """Each folder's subfolders, by relative path ("." the root)."""
    below: dict[str, list[str]] = {name: [] for name in folders}
    for name in folders:
        if name != ".":
            below[os.path.dirname(name) or "."].append(name)
    return below


def _forget(folders: dict[str, str], below: dict[str, list[str]], relative: str) -> None:
    """A folder of the build's and every one under it dropped: the walk lists what is there now."""
    pending = [relative]
    while pending:
        name = pending.pop()
        folders.pop(name, None)
        pending += below.pop(name, ())


def library_tree(
    changes: Changes | None = None, rows: Rows | None = None, unpacked: Unpacked | None = None
) -> Tree:
    """What the loader resolves: `ldconfig -p`'s entries, and the files of each folder they name plus
    the default ones (a library dropped there without ldconfig is found too), driver libraries left out;
    with `unpacked`, a folder it keeps has the build's digest, unlisted."""
    built = unpacked.trees.get(LIBRARY_RESOLUTION) if unpacked is not None else None
    result = run("ldconfig", "-p", echo=False)
    if result.returncode != 0:
        raise EnvironmentProblem(f"ldconfig -p failed: {result.stderr.strip()}")
    lines = [line.strip() for line in result.stdout.splitlines()[1:]]
    resolved = sorted(line for line in lines if not DRIVER_LIBRARY.match(line))
    folders = {os.path.dirname(line.rsplit(" => ", 1)[-1]) for line in resolved} | {"/lib", "/usr/lib"}
    digests = {LDCONFIG: hashlib.sha256("\n".join(resolved).encode()).hexdigest()[:16]}
    if rows is not None:
        rows[LDCONFIG] = [(line, 0, 0, 0) for line in resolved]
    for folder in sorted(folders):
        if built is not None and unpacked is not None and folder in built.folders and unpacked.kept(folder):
            digests[folder] = built.folders[folder]
            continue
        if changes is not None:
            changes.listed += 1
        try:
            with os.scandir(folder) as scan:
                files = [e for e in scan if not DRIVER_LIBRARY.match(e.name) and not e.is_dir()]
            found = _rows(folder, files, changes)[0]
        except OSError as exc:
            digests[folder] = f"unreadable: {exc.strerror}"
            continue
        digests[folder] = digest(found)
        if rows is not None:
            rows[folder] = found
    if changes is not None:
        changes.folders += len(folders)
    return Tree(root=LIBRARY_RESOLUTION, folders=digests)


def content_digest(path: str) -> str:
    try:
        with open(path, "rb") as file:
            return hashlib.file_digest(file, "sha256").hexdigest()[:16]
    except FileNotFoundError:
        return "absent"
    except OSError as exc:
        return f"unreadable: {exc.strerror}"


def content_files() -> list[str]:
    """The interpreter (and its libpython, where it has one) and the loader's own configuration: the
    venv's python is a link to the interpreter, and /etc/ld.so.preload is read by every process."""
    files = [os.path.realpath(sys.executable), *LOADER_FILES]
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        files.insert(1, f"{sysconfig.get_config_var('LIBDIR')}/{sysconfig.get_config_var('INSTSONAME')}")
    return files


def content_tree(files: Iterable[str]) -> Tree:
    return Tree(root=BY_CONTENT, folders={path: content_digest(path) for path in files})


@dataclass(frozen=True, kw_only=True)
class Walked:
    """A root to walk and the folders under it left out."""

    root: str
    skip: tuple[str, ...] = ()


def roots(env: Mapping[str, str]) -> list[Walked]:
    """The trees a build records, where this environment puts them (at start: the record's own)."""
    home = env.get("EPSTACK_HOME") or str(imagepaths.EPSTACK_HOME)
    venv = env.get("VIRTUAL_ENV") or str(imagepaths.VENV)
    skip = (venv, f"{home}/reports", f"{home}/sbom", str(reports_folder()))
    walked = [Walked(root=venv), Walked(root=home, skip=skip)]
    cuda = os.path.realpath(cuda_home(env))
    if os.path.isdir(cuda):
        walked.append(Walked(root=cuda))
    walked.append(Walked(root=sysconfig.get_paths()["stdlib"]))
    walked += [Walked(root=folder) for folder in sorted(glob.glob(PYTHON_CONFIG)) if os.path.isdir(folder)]
    return walked


def fingerprint(
    walked: Iterable[Walked],
    files: Iterable[str],
    changes: Changes | None = None,
    rows: dict[str, Rows] | None = None,
    unpacked: Unpacked | None = None,
) -> tuple[Tree, ...]:
    """The trees of `walked`, library resolution and `files` by content, as this container has them; with
    `changes`, what changed in it since it started; with `rows`, each tree's rows there by root; with
    `unpacked`, the folders it keeps unlisted."""
    trees = []
    for where in walked:
        kept = rows.setdefault(where.root, {}) if rows is not None else None
        trees.append(walk(where.root, where.skip, changes, kept, unpacked))
    libraries = rows.setdefault(LIBRARY_RESOLUTION, {}) if rows is not None else None
    return (*trees, library_tree(changes, libraries, unpacked), content_tree(files))


def container_started() -> float:
    """When this container's first process started (epoch seconds): /proc/1/stat's start time in clock
    ticks after boot, plus /proc/stat's boot time."""
    fields = Path("/proc/1/stat").read_text().rsplit(")", 1)[1].split()
    boot = next(line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
    return int(boot.split()[1]) + int(fields[19]) / os.sysconf("SC_CLK_TCK")
