"""What a Python process runs beyond what its distributions vouch for: the full guard's rows.

- Startup files: each .pth in site-packages (site runs its `import` lines in every Python process), and
  a sitecustomize or usercustomize there, owned by a distribution whose RECORD hash it still has.
- Files of site-packages no distribution's RECORD owns: a stray module, package, extension or .pyc (a
  .pyc in __pycache__ counts as its source's), .pth files first. Not the venv creator's own
  (VENV_CREATOR), nor what is inside a .dist-info folder (nothing imports from there).
- Bytecode: a .pyc in __pycache__ of site-packages or of the standard library that Python would run
  without checking it against its source (unchecked-hash: the images compile with timestamps), or
  whose source hash is not its source's.
- The standard library and /etc/python3* against the nearest build record (epstack.guard.record), file
  by file; skipped where there is none.
"""

from __future__ import annotations

import base64
import hashlib
import os
import sysconfig
from collections.abc import Iterable
from fnmatch import fnmatch
from importlib import metadata
from importlib.util import source_hash
from pathlib import Path

from epstack.checkrow import Check
from epstack.guard import fingerprint
from epstack.guard.changes import shown_first, tree_changes
from epstack.guard.record import GuardRecord, current_rows, read_listing, read_record, record_path
from epstack.layers import guard_scopes
from epstack.python.distinfo import files

STARTUP = ("sitecustomize.py", "usercustomize.py")  # site imports these at every start, with the .pth
VENV_CREATOR = frozenset({"_virtualenv.pth", "_virtualenv.py"})  # `uv venv` writes them; no RECORD does
NAMED = 10  # files a row names at most
FLAG_HASH, FLAG_CHECKED = 0b01, 0b10  # a .pyc header's flags (PEP 552)


def site_folders() -> list[Path]:
    """This interpreter's site-packages folders (purelib and platlib, once each)."""
    paths = sysconfig.get_paths()
    return [Path(p) for p in dict.fromkeys((paths["purelib"], paths["platlib"])) if os.path.isdir(p)]


def owned(site: Path) -> dict[str, str]:
    """Each file under `site` some distribution's RECORD lists, and its RECORD hash ("" where none)."""
    found: dict[str, str] = {}
    for dist in metadata.distributions(path=[str(site)]):
        listed, _problem = files(dist)  # the guard's distribution rows name a broken RECORD
        for entry in listed:
            path = os.path.normpath(site / entry)
            found[path] = f"{entry.hash.mode}={entry.hash.value}" if entry.hash else ""
    return found


def pth_first(paths: Iterable[str]) -> list[str]:
    return sorted(paths, key=lambda p: (not p.endswith(".pth"), p))


def _named(shown: Iterable[str]) -> str:
    """The first NAMED of `shown`, in its order, and how many more."""
    chosen = list(shown)
    more = f" and {len(chosen) - NAMED} more" if len(chosen) > NAMED else ""
    return ", ".join(chosen[:NAMED]) + more


def _record_hash(path: str, recorded: str) -> str:
    """The file's hash as RECORD writes it, with the algorithm of `recorded` ("sha256=...")."""
    algorithm = recorded.split("=", 1)[0]
    with open(path, "rb") as file:
        value = base64.urlsafe_b64encode(hashlib.file_digest(file, algorithm).digest()).rstrip(b"=")
    return f"{algorithm}={value.decode()}"


def check_startup_files(site: Path, owners: dict[str, str]) -> Check:
    """Each .pth, sitecustomize and usercustomize of `site`: owned, and as its RECORD hashes it."""
    names = pth_first(n for n in os.listdir(site) if n.endswith(".pth") or n in STARTUP)
    wrong = []
    for name in names:
        path = str(site / name)
        if name in VENV_CREATOR:
            continue
        if path not in owners:
            wrong.append(f"{path} (no distribution owns it)")
        elif owners[path] and owners[path] != _record_hash(path, owners[path]):
            wrong.append(f"{path} (not as its RECORD hashes it)")
    return Check(
        component="Python startup files",
        expected="each .pth and sitecustomize as a distribution's RECORD has it",
        found=f"{len(wrong)} not" if wrong else f"{len(names)} as recorded",
        verdict="mismatch" if wrong else "ok",
        detail=_named(wrong) if wrong else str(site),
    )


def _unowned(site: Path, owners: dict[str, str]) -> list[str]:
    stray = []
    for folder, subfolders, names in os.walk(site):
        subfolders[:] = [s for s in subfolders if not s.endswith(".dist-info")]
        for name in names:
            path = os.path.join(folder, name)
            if path in owners or (folder == str(site) and name in VENV_CREATOR):
                continue
            if os.path.basename(folder) == "__pycache__" and name.endswith(".pyc"):
                source = os.path.join(os.path.dirname(folder), name.split(".", 1)[0] + ".py")
                if source in owners:
                    continue
            stray.append(path)
    return stray


def check_unowned(site: Path, owners: dict[str, str]) -> Check:
    stray = pth_first(_unowned(site, owners))
    return Check(
        component="site-packages (RECORD)",
        expected="every file some distribution's RECORD lists",
        found=f"{len(stray)} no RECORD lists" if stray else f"{len(owners)} files listed",
        verdict="mismatch" if stray else "ok",
        detail=_named(stray) if stray else str(site),
    )


def bytecode_problem(pyc: str) -> str:
    """Why Python would run this __pycache__ .pyc without its source vouching for it ("" if it would
    not): an unchecked-hash one, or a hash-based one whose hash is not its source's."""
    with open(pyc, "rb") as file:
        header = file.read(16)
    flags = int.from_bytes(header[4:8], "little") if len(header) == 16 else 0
    if not flags & FLAG_HASH:
        return ""  # timestamp: Python compares it with its source's mtime and size
    source = os.path.join(
        os.path.dirname(os.path.dirname(pyc)), os.path.basename(pyc).split(".", 1)[0] + ".py"
    )
    try:
        with open(source, "rb") as file:
            matches = source_hash(file.read()) == header[8:16]
    except OSError:
        return ""  # no source: Python never imports it from __pycache__
    if not flags & FLAG_CHECKED:
        return "unchecked-hash" + ("" if matches else ", not its source's hash")
    return "" if matches else "not its source's hash"


def check_bytecode(folders: Iterable[Path]) -> Check:
    wrong = []
    for root in folders:
        for folder, _subfolders, names in os.walk(root):
            if os.path.basename(folder) == "__pycache__":
                for name in names:
                    problem = bytecode_problem(os.path.join(folder, name)) if name.endswith(".pyc") else ""
                    if problem:
                        wrong.append(f"{os.path.join(folder, name)} ({problem})")
    return Check(
        component="bytecode",
        expected="each .pyc checked against its source (timestamp or checked-hash)",
        found=f"{len(wrong)} not" if wrong else "all",
        verdict="mismatch" if wrong else "ok",
        detail=_named(sorted(wrong)) if wrong else ", ".join(map(str, folders)),
    )


def _nearest_record(layer: str) -> tuple[str, GuardRecord] | None:
    for scope in reversed(guard_scopes(layer)[0]):
        if record_path(scope.name).exists():
            record = read_record(scope.name)
            if not isinstance(record, str):
                return scope.name, record
    return None


def check_recorded_python(layer: str, stdlib: str) -> Check:
    """The standard library (`stdlib`) and /etc/python3* against the nearest record of `layer` or of
    one below it."""
    component, expected = "standard library (as built)", "the files the build recorded"
    found = _nearest_record(layer)
    if found is None:
        return Check(component=component, expected=expected, found="no build record", verdict="skipped")
    name, record = found
    trees = [t for t in record.trees if t.root == stdlib or fnmatch(t.root, fingerprint.PYTHON_CONFIG)]
    listing = read_listing(record, name)
    changes = []
    for was in trees:
        now = fingerprint.walk(was.root, was.skip)
        if now != was:
            built = listing.rows.get(was.root) if listing is not None else None
            changes += tree_changes(was, now, built, current_rows(was, now))
    return Check(
        component=component,
        expected=expected,
        found=f"{len(changes)} changed" if changes else f"as the {name} build recorded",
        verdict="mismatch" if changes else "ok",
        detail=_named(map(str, shown_first(changes))) if changes else ", ".join(t.root for t in trees),
    )


def python_file_checks(layer: str) -> list[Check]:
    """The rows above, for this interpreter's site-packages and standard library."""
    rows = []
    sites = site_folders()
    stdlib = sysconfig.get_paths()["stdlib"]
    for site in sites:
        owners = owned(site)
        rows += [check_startup_files(site, owners), check_unowned(site, owners)]
    rows.append(check_bytecode([*sites, Path(stdlib)]))
    rows.append(check_recorded_python(layer, stdlib))
    return rows
