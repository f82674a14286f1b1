"""What changed since the build, file by file: the build's fingerprint and rows against this container's.

A folder whose digest differs is listed again and its rows compared with the build's: each file added,
removed, or changed in size, mtime, mode or type is one Change naming its path. A folder added or
removed is named once (not each file in it); a file by content, and a file whose ctime says it was
written in this container, likewise. A .pth file (site runs its import lines in every Python process)
comes first, so it is always among those shown.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from stat import filemode

from epstack.guard.fingerprint import BY_CONTENT, LDCONFIG, LIBRARY_RESOLUTION, LINK, Row, Rows, Tree

WRITTEN = "written in this container (its ctime is later than the container's first process)"


@dataclass(frozen=True, kw_only=True)
class Change:
    """A file or folder that is not as the build left it, and how."""

    path: str
    kind: str  # "added", "removed", "size 10 -> 12", "mode ...", "content (sha256)", WRITTEN, ...

    def __str__(self) -> str:
        return f"{self.path}: {self.kind}"


def shown_first(changes: Iterable[Change]) -> list[Change]:
    """Each path once (the first way it was seen), .pth files first, then by path."""
    seen: dict[str, Change] = {}
    for change in changes:
        seen.setdefault(change.path.split(" -> ")[0], change)
    return sorted(seen.values(), key=lambda c: (not c.path.endswith(".pth"), c.path))


def _when(seconds: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))


def _row_kind(was: Row, now: Row) -> str:
    parts = []
    if was[0].endswith(LINK) != now[0].endswith(LINK):
        parts.append("a link now" if now[0].endswith(LINK) else "no longer a link")
    if was[1] != now[1]:
        parts.append(f"size {was[1]} -> {now[1]}")
    if was[2] != now[2]:
        parts.append(f"mtime {_when(was[2])} -> {_when(now[2])}")
    if was[3] != now[3]:
        parts.append(f"mode {filemode(was[3])} -> {filemode(now[3])}")
    return ", ".join(parts)


def row_changes(folder: str, was: list[Row], now: list[Row]) -> list[Change]:
    """The files of one folder (its path `folder`) added, removed or changed between two listings."""

    def by_name(rows: list[Row]) -> dict[str, Row]:
        return {row[0].removesuffix(LINK): row for row in rows}

    before, after = by_name(was), by_name(now)
    changes = []
    for name in sorted(before.keys() | after.keys()):
        path = folder if name == "." else f"{folder}/{name}" if folder else name
        if name not in before:
            changes.append(Change(path=path, kind="added"))
        elif name not in after:
            changes.append(Change(path=path, kind="removed"))
        elif before[name] != after[name]:
            changes.append(Change(path=path, kind=_row_kind(before[name], after[name])))
    return changes


def _outermost(folders: Iterable[str]) -> list[str]:
    """The folders none of whose parents is among them."""
    chosen = set(folders)
    return sorted(f for f in chosen if not any(f.startswith(f"{other}/") for other in chosen if other != "."))


def _path(root: str, relative: str) -> str:
    return (
        os.path.normpath(os.path.join(root, relative))
        if root not in (BY_CONTENT, LIBRARY_RESOLUTION)
        else relative
    )


def tree_changes(was: Tree, now: Tree, built: Rows | None, current: Mapping[str, list[Row]]) -> list[Change]:
    """What differs between the build's tree and this container's: `built` the build's rows of it (None:
    the listing is gone), `current` this container's rows of each folder whose digest differs."""
    changes: list[Change] = []
    only_was = [f for f in was.folders if f not in now.folders]
    only_now = [f for f in now.folders if f not in was.folders]
    if was.root == BY_CONTENT:
        return [
            Change(path=path, kind=_content_kind(was.folders.get(path), now.folders.get(path)))
            for path in sorted(was.folders.keys() | now.folders.keys())
            if was.folders.get(path) != now.folders.get(path)
        ]
    changes += [Change(path=_path(was.root, f), kind="removed (folder)") for f in _outermost(only_was)]
    changes += [Change(path=_path(was.root, f), kind="added (folder)") for f in _outermost(only_now)]
    for folder in sorted(
        f for f in was.folders.keys() & now.folders.keys() if was.folders[f] != now.folders[f]
    ):
        path = _path(was.root, folder)
        if now.folders[folder].startswith("unreadable"):
            changes.append(Change(path=path, kind=now.folders[folder]))
        elif built is None or folder not in built:
            changes.append(Change(path=path, kind="changed (the build's listing of it is gone)"))
        elif folder not in current:
            changes.append(Change(path=path, kind="changed (unreadable now)"))
        elif folder == LDCONFIG:
            entries = row_changes("", built[folder], current[folder])
            changes += [Change(path=f"{LDCONFIG}: {entry.path}", kind=entry.kind) for entry in entries]
        else:
            changes += row_changes(path, built[folder], current[folder])
    return changes


def _content_kind(was: str | None, now: str | None) -> str:
    if was in (None, "absent"):
        return "added"
    if now in (None, "absent"):
        return "removed"
    return now if now.startswith("unreadable") else "content (sha256)"
