"""Several files replaced as one commit (the pins file and its locks): a kill leaves the old set or the new;
and one run at a time from reading them to that commit (`exclusive`).

A run stages in a folder of its own beside one of the files (`staging`), held (flock) while it runs.
To commit, it writes a journal there naming every file, then each new text as a sibling of the file it
replaces (the same folder, so the same filesystem), then the journal again, marked committed: that
rename is the commit. The siblings are renamed into place, and the folder removed. A run killed before
the commit leaves the old files; one killed after it, some renamed and some not. The next run's
`staging`, before anything is read, removes what a killed run staged, or renames the rest into place
once it had committed.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from epstack.errors import BadInput, printable
from epstack.output import cannot_write, parent_lock, replacement_mode

_JOURNAL = "journal.json"
_LOCK = "lock"  # flock'ed by the run that stages in the folder, while it runs
_STAGING = ".epstack-commit-"
_NEW = ".epstack-new-"  # a new text's sibling: .<name>.epstack-new-<the folder's token>


def _prefix(first: Path) -> str:
    return f".{first.name}{_STAGING}"


def _held(folder: Path) -> int | None:
    """An fd holding the lock of `folder`, a folder of this user's; None when a live run holds it, or
    it is gone, a link or another user's (whose journal must not move this user's files)."""
    try:
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            return None
        fd = os.open(folder / _LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _read_journal(folder: Path) -> tuple[bool, dict[Path, Path]]:
    """The journal in `folder`: whether it committed, and each file's new sibling ({} without one)."""
    try:
        journal = json.loads((folder / _JOURNAL).read_text())
        return journal["committed"], {Path(target): Path(staged) for target, staged in journal["files"]}
    except (OSError, ValueError, KeyError, TypeError):  # none yet: nothing staged outside the folder
        return False, {}


def _write_journal(folder: Path, staged: Mapping[Path, Path], *, committed: bool) -> None:
    text = json.dumps({"committed": committed, "files": [[str(t), str(s)] for t, s in staged.items()]})
    (folder / f"{_JOURNAL}.new").write_text(text)
    os.replace(folder / f"{_JOURNAL}.new", folder / _JOURNAL)


def _finish(folder: Path) -> None:
    """A killed run's folder: its siblings renamed into place if it committed, else removed; then it."""
    committed, staged = _read_journal(folder)
    for target, sibling in staged.items():
        if committed and sibling.exists():
            os.replace(sibling, target)
        else:
            sibling.unlink(missing_ok=True)
    shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def staging(first: Path) -> Iterator[Path]:
    """A new folder beside `first` for this run alone, removed at the end; what killed runs left beside
    it is finished first. BadInput when `first`'s folder cannot take it."""
    try:
        with parent_lock(first.parent):
            for stale in first.parent.glob(f"{glob.escape(_prefix(first))}*"):
                _finish_unheld(stale)
            folder = Path(tempfile.mkdtemp(prefix=_prefix(first), dir=first.parent))
            held = _held(folder)
    except OSError as exc:
        raise BadInput(
            f"{first}: cannot stage its new version beside it ({exc.strerror}); fix: make its folder writable"
        ) from None
    try:
        yield folder
    finally:
        if not _read_journal(folder)[0]:  # a commit cut short by an error: the next run finishes it
            shutil.rmtree(folder, ignore_errors=True)
        if held is not None:
            os.close(held)


def _finish_unheld(folder: Path) -> None:
    """_finish a folder no live run holds."""
    held = _held(folder)
    if held is not None:
        try:
            _finish(folder)
        finally:
            os.close(held)


def commit(folder: Path, texts: Mapping[Path, str]) -> list[Path]:
    """Replace each file with its text as one commit, staged in `folder` (from `staging`); the files."""
    targets = {Path(os.path.realpath(path)): text for path, text in texts.items()}
    token = folder.name.rsplit(_STAGING, 1)[1]
    staged = {target: target.with_name(f".{target.name}{_NEW}{token}") for target in targets}
    try:
        _write_journal(folder, staged, committed=False)
        for target, text in targets.items():
            staged[target].write_text(text)
            staged[target].chmod(replacement_mode(target))
        _write_journal(folder, staged, committed=True)
    except OSError as exc:
        for sibling in staged.values():
            sibling.unlink(missing_ok=True)
        raise cannot_write(next(iter(texts)), exc) from None
    try:
        for target, sibling in staged.items():
            os.replace(sibling, target)
        (folder / _JOURNAL).unlink()
    except OSError as exc:
        raise cannot_write(target, exc) from None
    return list(texts)


def _holder(fd: int) -> str:
    """Who holds the flock on `fd`'s file, as /proc/locks and /proc/PID/cmdline say: "pid N: COMMAND"."""
    info = os.fstat(fd)
    key = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == key:
                words = Path(f"/proc/{fields[4]}/cmdline").read_bytes().split(b"\0")
                command = printable(" ".join(word.decode(errors="replace") for word in words if word))
                return f"pid {fields[4]}: {command[:200]}"
    except OSError:
        pass
    return "another process"


@contextlib.contextmanager
def exclusive(path: Path, *, what: str) -> Iterator[None]:
    """`path` held by this run alone while the block runs (flock on the file itself): a second run is
    refused, naming the first. A commit that replaces `path` ends the hold for the next run, which then
    reads the new file. A path that cannot be opened is left to whoever reads it to report."""
    while True:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise BadInput(
                f"{path}: another {what} is moving it ({holder}); fix: wait for it to end, then run again"
            ) from None
        try:  # the file locked is still the one at `path` (not replaced between the open and the lock)
            held = os.path.samestat(os.fstat(fd), os.stat(path))
        except OSError:
            held = False
        if held:
            break
        os.close(fd)
    try:
        yield
    finally:
        os.close(fd)
