"""Naming what changed, from the build's rows and this container's: each file added, removed, resized,
touched, chmoded or turned into a link; a folder added or removed once; a file by content; .pth first."""

from __future__ import annotations

import stat

from epstack.guard.changes import WRITTEN, Change, row_changes, shown_first, tree_changes
from epstack.guard.fingerprint import BY_CONTENT, LDCONFIG, LIBRARY_RESOLUTION, Row, Tree

FILE, EXECUTABLE, FOLDER = stat.S_IFREG | 0o644, stat.S_IFREG | 0o755, stat.S_IFDIR | 0o755
BUILT = [("mod.py", 10, 1_700_000_000, FILE), ("lib.so", 99, 1_700_000_000, FILE), (".", 0, 0, FOLDER)]


def test_each_file_added_removed_or_changed_is_named_with_how() -> None:
    now = [
        ("mod.py", 12, 1_700_000_000, FILE),
        ("new.pth", 5, 1_800_000_000, FILE),
        ("lib.so ->", 99, 1_700_000_000, EXECUTABLE),
        (".", 0, 0, stat.S_IFDIR | 0o777),
    ]
    assert row_changes("/venv/site", BUILT, now) == [
        Change(path="/venv/site", kind="mode drwxr-xr-x -> drwxrwxrwx"),
        Change(path="/venv/site/lib.so", kind="a link now, mode -rw-r--r-- -> -rwxr-xr-x"),
        Change(path="/venv/site/mod.py", kind="size 10 -> 12"),
        Change(path="/venv/site/new.pth", kind="added"),
    ]
    assert row_changes("/venv/site", now, BUILT)[-1] == Change(path="/venv/site/new.pth", kind="removed")
    touched = [("mod.py", 10, 1_700_000_001, FILE), *BUILT[1:]]
    assert row_changes("/r", BUILT, touched) == [
        Change(path="/r/mod.py", kind="mtime 2023-11-14 22:13:20 -> 2023-11-14 22:13:21")
    ]
    assert row_changes("/r", BUILT, BUILT) == []


def test_a_tree_names_folders_added_or_removed_once_and_the_files_of_those_that_differ() -> None:
    was = Tree(root="/venv", folders={".": "a", "lib": "b", "gone": "c", "gone/deep": "d"})
    now = Tree(root="/venv", folders={".": "a", "lib": "B", "new": "e", "new/deeper": "f"})
    built = {"lib": BUILT}
    current = {"lib": [*BUILT, ("evil.pth", 1, 1, FILE)]}
    assert tree_changes(was, now, built, current) == [
        Change(path="/venv/gone", kind="removed (folder)"),
        Change(path="/venv/new", kind="added (folder)"),
        Change(path="/venv/lib/evil.pth", kind="added"),
    ]
    assert tree_changes(was, now, None, current)[-1] == Change(
        path="/venv/lib", kind="changed (the build's listing of it is gone)"
    )
    unreadable = Tree(root="/venv", folders={**was.folders, "lib": "unreadable: Permission denied"})
    assert tree_changes(was, unreadable, built, {})[0] == Change(
        path="/venv/lib", kind="unreadable: Permission denied"
    )


def test_library_resolution_names_ldconfigs_entries_and_folders_as_they_are() -> None:
    line = "libz.so.1 (libc6,x86-64) => /usr/lib/libz.so.1"
    was = Tree(root=LIBRARY_RESOLUTION, folders={LDCONFIG: "a", "/usr/lib": "b"})
    now = Tree(root=LIBRARY_RESOLUTION, folders={LDCONFIG: "A", "/usr/lib": "B"})
    built: dict[str, list[Row]] = {LDCONFIG: [], "/usr/lib": []}
    current = {LDCONFIG: [(line, 0, 0, 0)], "/usr/lib": [("libz.so.1", 1, 1, FILE)]}
    assert tree_changes(was, now, built, current) == [
        Change(path="/usr/lib/libz.so.1", kind="added"),
        Change(path=f"{LDCONFIG}: {line}", kind="added"),
    ]


def test_files_by_content_are_named_by_path() -> None:
    was = Tree(root=BY_CONTENT, folders={"/etc/ld.so.preload": "absent", "/usr/bin/python3.12": "a"})
    now = Tree(root=BY_CONTENT, folders={"/etc/ld.so.preload": "b", "/usr/bin/python3.12": "c"})
    assert tree_changes(was, now, None, {}) == [
        Change(path="/etc/ld.so.preload", kind="added"),
        Change(path="/usr/bin/python3.12", kind="content (sha256)"),
    ]


def test_pth_files_come_first_each_path_once() -> None:
    changes = [
        Change(path="/a/x.py", kind=WRITTEN),
        Change(path="/a/x.py", kind="size 1 -> 2"),
        Change(path="/z/evil.pth", kind="added"),
        Change(path="/a/link.py -> /etc/target.py", kind=WRITTEN),
        Change(path="/a/link.py", kind="size 1 -> 2"),
    ]
    assert [str(c) for c in shown_first(changes)] == [
        "/z/evil.pth: added",
        f"/a/link.py -> /etc/target.py: {WRITTEN}",
        f"/a/x.py: {WRITTEN}",
    ]
