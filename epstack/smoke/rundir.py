"""The smoke's --run-dir: a run lists the files it writes there in MARKER before writing them, and a
later run removes only files a marker of this user's lists.

A reused --run-dir loses the files this run is about to write (an earlier run's results, never shown
as this run's). A file named like the smoke's (config.json, rank*.log, ...) that no marker lists is
someone else's, such as a model's config.json: the run is refused before anything is written or
removed. Processes of one launch that share the directory take turns (a lock on the directory).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from epstack.errors import BadInput
from epstack.output import write_file

MARKER = ".epstack-smoke"
_SCHEMA = "epstack-smoke-run/1"
_MARKER_LIMIT = 1024 * 1024
UPSTREAM = "upstream"  # DeepEP's own test_ep.py runs in this subdirectory
# A name the smoke writes: the rank config, each rank's log, stage, result and stage temporary.
_RUN_FILE = re.compile(
    rf"^(?:{UPSTREAM}/)?(?:all_ranks\.json|config\.json|rank\d+\.(?:json|log|stage|tmp\d+))$"
)
_STAGE_TEMPORARY = re.compile(rf"^(?P<stage>(?:{UPSTREAM}/)?rank\d+)\.tmp\d+$")


def run_files(ranks: Iterable[int], *, smoke: bool, upstream: bool) -> list[str]:
    """What one run writes into its directory: the smoke's ranks' files, DeepEP's test's log."""
    names = ["config.json", "all_ranks.json"] if smoke else []
    if smoke:
        names += [f"rank{rank}.{kind}" for rank in ranks for kind in ("json", "log", "stage")]
    if upstream:
        names.append(f"{UPSTREAM}/rank0.log")
    return names


def _listed(run_dir: Path) -> set[str]:
    """The files the marker lists; none without a marker; BadInput when it is not one of this user's."""
    marker = run_dir / MARKER
    try:
        info = os.lstat(marker)
    except FileNotFoundError:
        return set()
    names = None
    if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and info.st_size <= _MARKER_LIMIT:
        try:
            data = json.loads(marker.read_bytes())
        except ValueError:
            data = None
        names = data.get("files") if isinstance(data, dict) and data.get("schema") == _SCHEMA else None
    if not isinstance(names, list) or not all(isinstance(n, str) and _RUN_FILE.match(n) for n in names):
        raise BadInput(
            f"--run-dir {run_dir}: {MARKER} is not a list of a smoke's files written by this user; "
            "fix: pass another --run-dir"
        )
    return set(names)


def _present(run_dir: Path) -> list[str]:
    """The files in the directory (and its upstream/ folder) named like the smoke's."""
    found = [entry.name for entry in run_dir.iterdir()]
    upstream = run_dir / UPSTREAM
    if upstream.is_dir() and not upstream.is_symlink():
        found += [f"{UPSTREAM}/{entry.name}" for entry in upstream.iterdir()]
    return sorted(name for name in found if _RUN_FILE.match(name))


def _written_by(name: str, listed: set[str]) -> bool:
    """Whether `name` is a listed file, or the temporary of a listed stage file."""
    temporary = _STAGE_TEMPORARY.match(name)
    return name in listed or bool(temporary and f"{temporary['stage']}.stage" in listed)


def fresh_run_dir(run_dir: Path | None, files: list[str]) -> Path:
    """The run directory, made if new, ready for a run that writes `files`: their earlier copies
    removed and their names listed in MARKER; BadInput when it holds a file named like the smoke's
    that the smoke did not write."""
    if run_dir is None:
        return Path(tempfile.mkdtemp(prefix="epstack-smoke-"))
    try:
        fd = os.open(writable_dir(run_dir), os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            _prepare(run_dir, files)
        finally:
            os.close(fd)
    except OSError as exc:
        raise _cannot_use(run_dir, exc) from None
    return run_dir


def writable_dir(run_dir: Path) -> Path:
    """--run-dir, made (with its parents) if new; BadInput for a file, or a folder that cannot be made."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cannot_use(run_dir, exc) from None
    return run_dir


def _cannot_use(run_dir: Path, exc: OSError) -> BadInput:
    why = "a file, not a folder" if isinstance(exc, FileExistsError) else exc.strerror
    return BadInput(f"--run-dir {run_dir}: cannot use it ({why}); fix: choose a writable directory")


def _prepare(run_dir: Path, files: list[str]) -> None:
    listed, present = _listed(run_dir), _present(run_dir)
    foreign = [name for name in present if not _written_by(name, listed)]
    if foreign:
        raise BadInput(
            f"--run-dir {run_dir}: holds {foreign[0]}, which the smoke did not write; "
            "fix: pass another --run-dir (a new or empty directory)"
        )
    for name in present:
        if _written_by(name, set(files)):
            (run_dir / name).unlink()
    kept = {name for name in listed if (run_dir / name).exists()}
    text = json.dumps({"schema": _SCHEMA, "files": sorted(kept | set(files))}, indent=1) + "\n"
    write_file(run_dir / MARKER, text, what="the list of the smoke's files")
