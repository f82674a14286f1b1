"""A `git archive` tarball, verified whole before render copies it or a builder unpacks it.

`git archive --format=tar.gz` writes gzip around one tar: a pax global header whose `comment` is the
commit, then directories, regular files and symbolic links (a submodule is an empty directory) under
relative, normal names, each once, then zeros to the end of a 10240-byte record. A verified archive
holds nothing else. The stream is read to its end (gzip's CRC and length; a tar cut short, or data after
its end-of-archive blocks, is refused). Each member goes through tarfile's `data` extraction filter
(absolute or escaping names and links, devices and FIFOs), and what that filter lets through but git
never writes is refused too: hard links, other member types, `.`, `..` or `//` in a name, a name given
twice, a member under a symbolic link, a link that climbs (`..`) out of another link (the link chains
behind the 2025 filter bypasses, CVE-2025-4517). The file is stat'ed before it is opened (a FIFO is
never read) and read once: the bytes checked are the bytes used.
"""

from __future__ import annotations

import gzip
import io
import os
import posixpath
import stat
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from epstack.boundedtar import BoundedTar
from epstack.errors import BadInput, shown

# Caps, far above the pinned archives (DeepEP, fmt, gdrcopy: at most 151 members and 1.4 MB, unpacking to
# at most 3.2 MB, 1.8 to 5.6 times their size) and far below what would hurt a builder.
MAX_ARCHIVE_BYTES = 128 << 20  # the file, held in memory: the bytes render copies are the bytes checked
MAX_MEMBERS = 10_000  # 66 times fmt's 151; tarfile keeps every member's header in memory
MAX_UNPACKED_BYTES = 512 << 20  # the tar inside, padding included: 160 times fmt's
MAX_RATIO = 50  # unpacked / packed: the pinned pack 1.8-5.6:1, zeros about 1000:1 (a gzip bomb)
RATIO_FLOOR = 16 << 20  # the ratio counts past this: a tiny repository's padding alone packs 50:1
MAX_READ = 1 << 20  # one read of headers (a pax header of a 4096-byte path is about 4 KB)

# What `git archive` names the commit it archived (a pax global header).
_COMMIT_HEADER = "comment"
_FIX = "fix: make it with `git archive --format=tar.gz` of the pinned commit"
_GIT_MEMBER_TYPES = (tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE)
_FILTER_REASONS: dict[type[tarfile.FilterError], str] = {
    tarfile.AbsolutePathError: "is an absolute path",
    tarfile.OutsideDestinationError: "leaves the archive's folder",
    tarfile.SpecialFileError: "is a device, FIFO or other special file",
    tarfile.AbsoluteLinkError: "links to an absolute path",
    tarfile.LinkOutsideDestinationError: "links outside the archive's folder",
}
_FILE_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


@dataclass(frozen=True, kw_only=True)
class GitArchive:
    """A verified `git archive` tarball: the commit its header names, and its bytes as checked."""

    commit: str
    data: bytes


def read(path: Path) -> GitArchive:
    """The archive at `path`, verified whole; BadInput naming the first problem and the fix."""
    data = _file_bytes(path)
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as unzipped:
            limit = min(MAX_UNPACKED_BYTES, max(RATIO_FLOOR, MAX_RATIO * len(data)))
            stream = BoundedTar(
                unzipped,
                limit=limit,
                max_read=MAX_READ,
                past_limit=f"{path}: unpacks to more than {limit} bytes (the cap: {MAX_RATIO} times its "
                f"{len(data)} bytes, at least {RATIO_FLOOR}, at most {MAX_UNPACKED_BYTES}); {_FIX}",
                long_read=f"{path}: a tar header of more than {MAX_READ} bytes; {_FIX}",
            )
            with tarfile.TarFile(fileobj=stream) as tar:
                commit = _verified_members(tar, path)
                _check_end(tar, stream, path)
    except (OSError, EOFError, zlib.error, tarfile.TarError) as exc:
        raise BadInput(f"{path}: not a readable tar archive ({exc}); {_FIX}") from None
    return GitArchive(commit=commit, data=data)


def _file_bytes(path: Path) -> bytes:
    """The bytes of the regular file at `path` (or a link to one), stat'ed before it is opened."""
    try:
        status = path.stat()
        kind, data = stat.S_IFMT(status.st_mode), b""
        if kind == stat.S_IFREG and status.st_size <= MAX_ARCHIVE_BYTES:
            with open(path, "rb", opener=lambda name, flags: os.open(name, flags | os.O_NONBLOCK)) as file:
                kind = stat.S_IFMT(os.fstat(file.fileno()).st_mode)  # swapped since the stat?
                if kind == stat.S_IFREG:
                    data = file.read(MAX_ARCHIVE_BYTES + 1)
    except OSError as exc:
        raise BadInput(
            f"{path}: cannot be read ({exc.strerror}); fix: make it a readable `git archive` tarball"
        ) from None
    if kind != stat.S_IFREG:
        what = _FILE_KINDS.get(kind, "not a regular file")
        raise BadInput(f"{path}: {what}, not a `git archive` tarball; fix: put the tarball itself there")
    if status.st_size > MAX_ARCHIVE_BYTES or len(data) > MAX_ARCHIVE_BYTES:
        raise BadInput(f"{path}: more than {MAX_ARCHIVE_BYTES} bytes, not a source archive; {_FIX}")
    return data


def _verified_members(tar: tarfile.TarFile, path: Path) -> str:
    """Check every member and the links between them; the commit of the archive's one commit header."""
    first_commit = None
    names: set[str] = set()
    symlinks: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="epstack-archive-") as empty:
        for count, member in enumerate(tar, start=1):
            if first_commit is None:
                first_commit = _commit(tar, path)
            if count > MAX_MEMBERS:
                raise BadInput(f"{path}: more than {MAX_MEMBERS} members, not a source archive; {_FIX}")
            problem = _member_problem(member, empty) or ("is given twice" if member.name in names else "")
            if problem:
                raise BadInput(f"{path}: member {shown(member.name)} {problem}; {_FIX}")
            names.add(member.name)
            if member.issym():
                symlinks[member.name] = member.linkname
    commit = _commit(tar, path)
    if commit != first_commit:
        raise BadInput(f"{path}: names two commits ({first_commit}, then {commit}); {_FIX}")
    _check_links(names, symlinks, path)
    return commit


def _commit(tar: tarfile.TarFile, path: Path) -> str:
    commit = str(tar.pax_headers.get(_COMMIT_HEADER, ""))
    if not commit:
        raise BadInput(f"{path}: holds no commit (not made by `git archive` of a commit); {_FIX}")
    return commit


def _member_problem(member: tarfile.TarInfo, empty: str) -> str:
    """Why `member` on its own cannot come from `git archive` ("" if it can); `empty`: an empty folder."""
    if member.name.startswith("/"):  # the data filter strips the slash instead
        return "is an absolute path"
    try:
        tarfile.data_filter(member, empty)
    except tarfile.FilterError as exc:
        return _FILTER_REASONS.get(type(exc), str(exc))
    if member.type not in _GIT_MEMBER_TYPES:
        kind = "a hard link" if member.islnk() else f"of tar type {member.type!r}"
        return f"is {kind} (git archive writes only files, directories and symbolic links)"
    if member.name == "." or posixpath.normpath(member.name) != member.name:
        return "is not a normal path (`.`, `..` or `//` in it)"
    return ""


def _check_links(names: set[str], symlinks: dict[str, str], path: Path) -> None:
    """No member lies under a symbolic link; no link climbs (`..`) out of another link."""
    for name in names:
        under = next((str(p) for p in Path(name).parents if str(p) in symlinks), None)
        if under:
            raise BadInput(
                f"{path}: member {shown(name)} lies under the symbolic link {shown(under)}; {_FIX}"
            )
    for link, target in symlinks.items():
        walked, through_link = posixpath.dirname(link), False
        for part in target.split("/"):
            if part == ".." and through_link:
                raise BadInput(
                    f"{path}: member {shown(link)} links to {shown(target)}, climbing out of another link; "
                    f"{_FIX}"
                )
            walked = posixpath.normpath(posixpath.join(walked, part))
            through_link = through_link or walked in symlinks


def _check_end(tar: tarfile.TarFile, stream: BoundedTar, path: Path) -> None:
    """The listing ended at an end-of-archive block, and zeros follow it to the end of the gzip."""
    ended = stream.tell() == tar.offset + tarfile.BLOCKSIZE and not stream.last.strip(b"\0")
    if not ended:
        raise BadInput(f"{path}: cut short or corrupt at byte {tar.offset} of its tar; {_FIX}")
    padding = 0
    while chunk := stream.read(MAX_READ):
        if chunk.strip(b"\0"):
            raise BadInput(f"{path}: holds data after the end of its tar; {_FIX}")
        padding += len(chunk)
    if padding < tarfile.BLOCKSIZE:
        raise BadInput(f"{path}: cut short (one end-of-archive block of two); {_FIX}")
