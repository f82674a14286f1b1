"""At container start (`epstack image jit-install`, run by scripts/image/jit-caches.sh): the JIT caches the
image ships, each a read-only folder $EPSTACK_HOME/jit/<name> with its sha256sum list beside it, into the
writable caches the toolchains read.

Each toolchain module declares its cache as HOME (a CacheHome); epstack.jit.registry lists them. Only
the files the list names are copied, with their timestamps (ninja reads FlashInfer's), into a staging
folder in the writable cache, and checked there: a cache whose bytes differ is not copied, said (the
guard then names the change). Each entry (a kernel, a module, a key's folder) is then renamed from
staging into its place, so a process starting beside this one never reads half of one; one already
there is kept. Copies, not links: a cache a node shares between pods of other images holds no link into
this one, and every user can read them. A cache folder that cannot be written (a read-only root, as
enroot mounts it by default) moves to ${TMPDIR:-/tmp}/epstack/<name>, said, its variable exported
(the toolchains after it that read the same variable, Triton's kernels after its launcher, follow it);
where TMPDIR cannot be written either, the start stops in one line."""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from epstack import imagepaths
from epstack.jit.shipped import sha256_hex, sums_beside

# One line of a sha256sum list as epstack.jit.shipped writes it: `<sha256>  ./<path>`.
_SUM_LINE = re.compile(r"([0-9a-f]{64})  (\S.*)")


@dataclass(frozen=True, kw_only=True)
class CacheHome:
    """A toolchain's writable cache and what of its shipped folder goes there."""

    variable: str  # the variable the toolchain reads its cache folder from: "EP_JIT_CACHE_DIR"
    default: Callable[[Mapping[str, str]], Path]  # the folder it uses, as it reads the environment
    name: str  # its shipped folder under $EPSTACK_HOME/jit, and under ${TMPDIR:-/tmp}/epstack
    entries: tuple[str, ...]  # globs relative to the cache, each match renamed whole: "cache/kernel.*"
    what: str  # the message's "<what> <folder>" when the cache moves: "DeepEP's kernels compile into"
    copy_when_moved: bool = True  # False where a moved cache cannot use the copy (absolute paths inside)
    always: bool = False  # choose (and move) the cache even when the image ships nothing for it


def install(
    homes: Sequence[CacheHome], env: Mapping[str, str], say: Callable[[str], None]
) -> dict[str, str] | None:
    """Each shipped cache of `homes` into its writable one; the variables moved to TMPDIR and their
    folders, or None where a cache and TMPDIR both cannot be written (said in one line)."""
    jit = Path(env.get("EPSTACK_HOME") or imagepaths.EPSTACK_HOME) / imagepaths.JIT.name
    moved: dict[str, str] = {}
    for home in homes:
        shipped = jit / home.name
        if not (home.always or shipped.is_dir()):
            continue
        named = home.default(env)
        if home.variable in moved:  # a cache another toolchain's shipped folder moved already (Triton's)
            cache: Path | None = Path(moved[home.variable])
        else:
            cache = named if _writable(named) else _moved(home, named, env, say)
        if cache is None:
            return None
        if cache != named:
            moved[home.variable] = str(cache)
        if shipped.is_dir() and (home.copy_when_moved or cache == named):
            copy(shipped, cache, home.entries, say)
    return moved


def _moved(home: CacheHome, named: Path, env: Mapping[str, str], say: Callable[[str], None]) -> Path | None:
    """${TMPDIR:-/tmp}/epstack/<name>, said, for a cache `named` that cannot be written; None, said in one
    line, where that cannot be written either."""
    tmpdir = env.get("TMPDIR") or "/tmp"
    cache = Path(tmpdir) / "epstack" / home.name
    unwritable = f"epstack: {home.variable}={named} cannot be written (a read-only root?)"
    if not _writable(cache):
        say(
            f"{unwritable}, nor TMPDIR={tmpdir} ({cache}); "
            f"fix: set TMPDIR or {home.variable} to a writable folder"
        )
        return None
    say(f"{unwritable}; {home.what} {cache}")
    return cache


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)


def copy(shipped: Path, cache: Path, entries: Sequence[str], say: Callable[[str], None]) -> None:
    """The files `shipped`'s list names, staged in `cache` and checked; then each entry the `entries`
    globs match, renamed into `cache` where none is yet. Bytes that differ from the list: nothing
    copied, said."""
    staged = Path(tempfile.mkdtemp(prefix=".epstack.", dir=cache))
    try:
        if not _stage(shipped, staged):
            say(
                f"epstack: {shipped} differs from its sha256 list {sums_beside(shipped)}, so it is not "
                f"copied into {cache}; the guard names the change"
            )
            return
        _readable_by_all(staged)  # mkdtemp's 0700 and the umask would hide entries from other users
        for pattern in entries:
            for relative in sorted(glob.glob(pattern, root_dir=staged)):
                _place(staged / relative, cache / relative)
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def _stage(shipped: Path, staged: Path) -> bool:
    """The files `shipped`'s sha256 list names copied into `staged`, timestamps kept; whether the list
    is there, well formed, and every copy matches it."""
    sums = sums_beside(shipped)
    lines = sums.read_text().splitlines() if sums.is_file() else []
    listed = [_SUM_LINE.fullmatch(line) for line in lines]
    if not listed:
        return False
    for line in listed:
        if line is None:
            return False
        relative = PurePosixPath(line[2])
        if relative.is_absolute() or ".." in relative.parts:
            return False
        source, target = shipped / relative, staged / relative
        if not source.is_file():
            return False
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
        if sha256_hex(target.read_bytes()) != line[1]:
            return False
    return True


def _readable_by_all(root: Path) -> None:
    """chmod -R a+rX: every file readable, every folder (and executable file) searchable by every user."""
    for path in (root, *root.rglob("*")):
        mode = path.stat().st_mode
        searchable = stat.S_ISDIR(mode) or mode & 0o111
        path.chmod(stat.S_IMODE(mode) | 0o444 | (0o111 if searchable else 0))


def _place(entry: Path, target: Path) -> None:
    """`entry` renamed whole to `target`, never over one already there."""
    if target.exists() or target.is_symlink():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):  # one made beside this process meanwhile: it is kept
        os.rename(entry, target)
