"""Output directories epstack owns: it writes only where it may, and replaces what it made atomically.

An output is either a new path, an empty directory of the running user's, or a directory epstack made
before for this user: it holds MARKER, which lists every entry epstack wrote with its sha256, and it
holds nothing else and nothing changed since. A name alone proves nothing: anything else is refused
before a byte is written: the checkout or a directory above it, the inputs (templates, scripts, the
package, the pins file, a sources folder) or anything inside or above them, an existing file or
device, another user's directory (even empty, even for root), a directory epstack did not make or
that holds what epstack did not write, a symlink, a mount point. A file output (write_file) is never
a file the command reads (check_writable with its inputs), through a link or a hard link either.

Replacing works on a staging sibling that is swapped in with one renameat2(RENAME_EXCHANGE): a
reader, or a kill at any moment, sees the old tree or the new one, never neither. Concurrent writers
to the same parent take turns on a lock of that parent directory. Staging left by a killed run is
removed by the next one.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from epstack.errors import BadInput, EnvironmentProblem
from epstack.marker import MARKER, foreign_entry, marked, planned, tree, write_marker

_STAGING = ".epstack-staging-"
_AT_FDCWD = -100
# What a path the user chose can do wrong (rather than the machine: a full disk, an I/O error).
_BAD_PATH = frozenset(
    {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.ENOENT, errno.EEXIST, errno.EISDIR}
    | {errno.ENXIO, errno.ELOOP, errno.ENAMETOOLONG, errno.ETXTBSY}
)
_RENAME_EXCHANGE = 2


def _within(inner: Path, outer: Path) -> bool:
    """Whether `inner` is `outer` or inside it, by their absolute paths or with links resolved."""
    return any(
        a == b or a.is_relative_to(b)
        for a, b in (
            (Path(os.path.abspath(inner)), Path(os.path.abspath(outer))),
            (Path(os.path.realpath(inner)), Path(os.path.realpath(outer))),
        )
    )


def _overlaps(path: Path, other: Path) -> bool:
    return _within(path, other) or _within(other, path)


def _is_stale_staging(path: Path) -> bool:
    """A staging directory a killed run of this user's left: nothing but (part of) a marker, or only
    entries its marker lists (files may be half-written)."""
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        return False
    listed, entries = marked(path), tree(path)
    return not entries or (listed is not None and set(entries) <= set(listed))


def _remove_staging(staging: Path) -> None:
    """Remove a staging directory, its marker last: a kill midway leaves one the next run knows."""
    with contextlib.suppress(OSError):
        for entry in staging.iterdir():
            if entry.name == MARKER:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    shutil.rmtree(staging, ignore_errors=True)


def check_output(value: str, *, checkout: Path, inputs: Sequence[Path]) -> Path:
    """The absolute output path when epstack may write there; BadInput (one line, with a fix) if not."""
    try:
        return _check_output(value, checkout=checkout, inputs=inputs)
    except OSError as exc:  # a name too long, a loop of links, a directory we may not search
        raise BadInput(
            f"{value}: cannot use it as an output ({exc.strerror}); fix: choose another path"
        ) from None


def _check_output(value: str, *, checkout: Path, inputs: Sequence[Path]) -> Path:
    if not value.strip():
        raise BadInput("--out-dir is empty; fix: name a new directory, e.g. --out-dir build/render")
    out = Path(value)
    if out.is_symlink():
        raise BadInput(f"{out} is a symlink; fix: pass the directory it points to, or a new path")
    path = Path(os.path.abspath(out))
    if _within(checkout, path):
        raise BadInput(
            f"{out} is the checkout or a directory above it; fix: write to a new directory, "
            "e.g. --out-dir build/render"
        )
    for source in inputs:
        if _overlaps(path, source):
            raise BadInput(
                f"{out} is, holds or is inside {source}, an input of epstack; fix: write to a new directory"
            )
    if not path.exists():
        return path
    if not path.is_dir():
        raise BadInput(f"{out} exists and is not a directory; fix: remove it or choose a new path")
    if os.path.ismount(path):
        raise BadInput(f"{out} is a mount point; fix: write to a new directory inside it")
    owner = path.stat().st_uid
    if owner != os.geteuid():
        raise BadInput(
            f"{out} belongs to uid {owner}, not to this user (uid {os.geteuid()}); "
            "fix: run as its owner, or choose a new path"
        )
    if not any(path.iterdir()):
        return path
    listed = marked(path)
    if listed is None:
        raise BadInput(
            f"{out} is a non-empty directory epstack did not make; fix: choose a new or empty directory"
        )
    foreign = foreign_entry(path, listed)
    if foreign is not None:
        raise BadInput(
            f"{out}: {foreign} is not what epstack wrote there (added or changed since); "
            f"fix: move it out of {out}, or choose a new directory"
        )
    return path


@contextlib.contextmanager
def parent_lock(parent: Path) -> Iterator[None]:
    """One writer at a time per parent directory (flock on the directory itself; nothing left behind)."""
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step; False where the kernel or filesystem cannot."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    status = renameat2(_AT_FDCWD, bytes(a), _AT_FDCWD, bytes(b), _RENAME_EXCHANGE)
    if status == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _mark_output(root: Path, entries: dict[str, str]) -> None:
    """Make a staging directory an ordinary one whose marker lists what epstack wrote there (so a later
    run of this user's may replace it, and only while it holds nothing else)."""
    root.chmod(0o777 & ~_umask())  # mkdtemp makes 0700; an output is an ordinary directory
    write_marker(root, entries)


def _move_into_place(staging: Path, out: Path) -> None:
    """Make the directory `staging` the whole of `out` (which check_output allowed) in one step; the
    tree that was at `out`, if any, is left at `staging` for the caller to remove."""
    if not out.exists():
        staging.rename(out)
    elif not _exchange(staging, out):
        # No atomic swap here (an old kernel, NFS): a short window with the old tree set aside.
        old = out.parent / f".{out.name}{_STAGING}old"
        out.rename(old)
        staging.rename(out)
        old.rename(staging)


def _write_tree(root: Path, files: Mapping[str, bytes], executable: Sequence[str]) -> None:
    _mark_output(root, planned(files))  # first: a killed run's staging is known by it
    executable_mode = 0o777 & ~_umask()
    for relative, content in sorted(files.items()):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        if relative in executable:
            path.chmod(executable_mode)


def cannot_write(out: Path, exc: OSError) -> BadInput | EnvironmentProblem:
    """A path the user chose that cannot hold a directory is bad input; a full disk is the machine's."""
    if exc.errno in _BAD_PATH:
        return BadInput(f"{out}: cannot write there ({exc.strerror}); fix: choose a writable path")
    return EnvironmentProblem(f"{out}: cannot write ({exc.strerror}); fix: free space on that filesystem")


def staging_beside(out: Path, *, prefix: str) -> Path:
    """A new empty directory beside `out` (its parent made if need be) to build an output in, then
    install_output; a path that cannot hold it is one line of error, not a traceback."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=prefix, dir=out.parent))
    except OSError as exc:
        raise cannot_write(out, exc) from None


def install_output(staging: Path, out: Path) -> None:
    """Mark `staging` as epstack's and make it the whole of `out` in one step (what was at `out` is
    left at `staging`, for the caller to remove)."""
    try:
        _mark_output(staging, tree(staging))
        _move_into_place(staging, out)
    except OSError as exc:
        raise cannot_write(out, exc) from None


def replace_output(out: Path, files: Mapping[str, bytes], *, executable: Sequence[str] = ()) -> None:
    """Write `files` (relative path -> bytes) as the whole of `out`, which check_output has allowed."""
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(
            f"{out}: cannot create {parent} ({exc.strerror}); fix: choose a writable path"
        ) from None
    with parent_lock(parent):
        for stale in parent.glob(f".{out.name}{_STAGING}*"):
            if _is_stale_staging(stale):
                _remove_staging(stale)
        staging = staging_beside(out, prefix=f".{out.name}{_STAGING}")
        try:
            _write_tree(staging, files, executable)
            _move_into_place(staging, out)
        except OSError as exc:
            raise cannot_write(out, exc) from None
        finally:
            _remove_staging(staging)


# A file name that means standard output: `--json -`.
STDOUT = Path("-")


def write_file(path: Path, text: str | bytes, *, what: str) -> None:
    """A file the user named (--json, --report, --out FILE), written whole: a new or regular file gets a
    sibling swapped in (readers see the old text or the new; a file replaced keeps its mode), a device
    such as /dev/stdout is written to, and so is STDOUT (`-`). A directory, a FIFO nobody reads or a
    path that cannot hold a file is BadInput naming `what`; a full disk is an EnvironmentProblem."""
    if path == STDOUT:
        sys.stdout.write(text if isinstance(text, str) else text.decode())
        return
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: cannot write {what} there ({exc}); fix: choose a writable path") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise BadInput(f"{path} is a directory; fix: name a file for {what}, e.g. {path / 'report.json'}")
    try:
        if mode is not None and not stat.S_ISREG(mode):
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "wb") as device:
                device.write(_encoded(text))
            return
        target = Path(os.path.realpath(path))
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, staging = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(_encoded(text))
            os.chmod(staging, replacement_mode(target))
            os.replace(staging, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(staging)
    except OSError as exc:
        raise cannot_write(path, exc) from None


def replacement_mode(target: Path) -> int:
    """The mode of a file that replaces `target`: the one it has (read-only stays read-only), else a new
    file's (0666 less the umask)."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


def _encoded(text: str | bytes) -> bytes:
    return text.encode() if isinstance(text, str) else text


def _as_input(path: Path, source: Path) -> str | None:
    """How writing `path` would write over an input `source`: "is" (the same file, through a link or
    a hard link included) or "is inside" (a folder); None when it would not."""
    try:
        if path.exists() and source.exists() and path.samefile(source):
            return "is"
    except (OSError, ValueError):
        return None
    return "is inside" if _within(path, source) else None


def check_writable(path: Path, *, what: str, inputs: Sequence[Path] = ()) -> None:
    """Before any work: BadInput unless `path` can take a file (not a directory, and its nearest
    existing ancestor a writable directory), so a run never ends unable to write its report, and
    unless it is none of the command's `inputs` (files it reads, folders it reads from). STDOUT can."""
    if path == STDOUT:
        return
    for source in inputs:
        relation = _as_input(path, source)
        if relation:
            raise BadInput(
                f"{path}: {relation} {source}, which this command reads; fix: write {what} to another file"
            )
    try:
        if path.is_dir():
            raise BadInput(f"{path} is a directory; fix: name a file for {what}, e.g. {path / 'report.json'}")
        existing = next(p for p in (path.parent.absolute(), *path.parent.absolute().parents) if p.exists())
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: cannot write {what} there ({exc}); fix: choose a writable path") from None
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise BadInput(
            f"{path}: {existing} is not a writable directory; fix: choose a writable path for {what}"
        )
