"""The marker of a directory epstack wrote: MARKER lists every entry it wrote there, files by their
sha256, so a later run of the same user's knows the directory as its own by more than a name (the
marker's content, its owner, and a tree that holds nothing else and nothing changed)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path

MARKER = ".epstack-output"
_SCHEMA = "epstack-output/1"
_LIMIT = 16 * 1024 * 1024

Entries = dict[str, str]  # relative path -> "dir", "sha256 <hex>", "link <target>" or "mode <octal>"


def _fingerprint(path: Path) -> str:
    """What one entry of a tree is: a directory, a file by its content, a link by its target."""
    mode = os.lstat(path).st_mode
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return f"link {os.readlink(path)}"
    if stat.S_ISREG(mode):
        with path.open("rb") as file:
            return f"sha256 {hashlib.file_digest(file, 'sha256').hexdigest()}"
    return f"mode {stat.S_IFMT(mode):o}"


def tree(root: Path) -> Entries:
    """Every entry under `root` (links not followed) but the marker, with its fingerprint."""
    entries: Entries = {}
    for directory, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = Path(directory, name)
            relative = path.relative_to(root).as_posix()
            if relative != MARKER:
                entries[relative] = _fingerprint(path)
    return entries


def planned(files: Mapping[str, bytes]) -> Entries:
    """The entries writing `files` makes: each file by its content, each folder above it."""
    entries: Entries = {}
    for relative, content in files.items():
        path = Path(relative)
        entries |= {parent.as_posix(): "dir" for parent in path.parents[:-1]}
        entries[path.as_posix()] = f"sha256 {hashlib.sha256(content).hexdigest()}"
    return entries


def marked(root: Path) -> Entries | None:
    """The entries MARKER in `root` lists, when it is a regular file of this user's in epstack's format
    (the user's own directory); None for anything else."""
    marker = root / MARKER
    try:
        info = os.lstat(marker)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_size > _LIMIT:
            return None
        data = json.loads(marker.read_bytes())
    except (OSError, ValueError):
        return None
    entries = data.get("entries") if isinstance(data, dict) and data.get("schema") == _SCHEMA else None
    if not isinstance(entries, dict) or not all(isinstance(v, str) for v in entries.values()):
        return None
    return entries


def foreign_entry(root: Path, marked: Entries) -> str | None:
    """The first entry of `root` that is not as the marker lists it (added or changed since epstack
    wrote it); None when the tree is all epstack's (an entry removed since is fine)."""
    entries = tree(root)
    return next((relative for relative in sorted(entries) if marked.get(relative) != entries[relative]), None)


def write_marker(root: Path, entries: Entries) -> None:
    """Write the marker of `root`, listing `entries`."""
    (root / MARKER).write_text(json.dumps({"schema": _SCHEMA, "entries": entries}, sort_keys=True))
