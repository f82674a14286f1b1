"""The build's record of a passing guard: what a container start compares before it trusts the build.

guard-layer.sh writes it (`epstack image guard --record`) once a layer's guard passed, beside the report:
the digests of the pins file and of that report, the variables that decide what runs (their values as
the build set them; epstack.guard.environment), the fingerprint of the files that decide it
(epstack.guard.fingerprint), and the CUDA runtime the build's `import torch` mapped. Beside it, the
listing (every folder's rows, to name a change) and hold-env's file of the build's values of the
refused variables; the record holds the listing's sha256.

At start (`epstack image guard --at-start`), `file_changes` names every file or folder of those trees that is
not as the build left it, each build file (the record, its listing, the report, the pins) changed, and
every file written in this container: any of them refuses the start (epstack.guard.start).
"""

from __future__ import annotations

import gzip
import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from epstack.document import Schema
from epstack.errors import BadInput
from epstack.guard.changes import WRITTEN, Change, shown_first, tree_changes
from epstack.guard.environment import deciding, held_file, held_file_text
from epstack.guard.fingerprint import (
    BY_CONTENT,
    LIBRARY_RESOLUTION,
    Changes,
    Row,
    Rows,
    Tree,
    Unpacked,
    Walked,
    content_files,
    fingerprint,
    folder_rows,
    library_tree,
    roots,
)
from epstack.guard.libraries import LoadedRuntime, loaded_cuda_runtime
from epstack.guard.mounts import OVERLAY, Mounts
from epstack.jit.probereport import reports_folder
from epstack.output import write_file


@dataclass(frozen=True, kw_only=True)
class GuardRecord:
    layer: str
    pins: str
    pins_sha256: str
    locks: str  # "" without --locks / $EPSTACK_LOCKS
    report: str  # the passing report this record vouches for
    report_sha256: str
    env: dict[str, str]  # epstack.guard.environment's judged variables as the build set them
    cuda_runtime: LoadedRuntime  # the libcudart the build guard's `import torch` mapped
    trees: tuple[Tree, ...]
    listing_sha256: str  # of listing_path(layer): every folder's rows

    def to_json(self) -> str:
        return GUARD_RECORD.dumps(self)


GUARD_RECORD = Schema(
    name="guard-record",
    version=4,
    model=GuardRecord,
    what="an epstack guard build record",
    fix="rebuild the image (guard-layer.sh writes it)",
)


@dataclass(frozen=True, kw_only=True)
class Listing:
    """Every folder's rows, by tree root then folder (as Tree.folders names them)."""

    rows: dict[str, dict[str, list[Row]]]


GUARD_LISTING = Schema(
    name="guard-listing",
    version=1,
    model=Listing,
    what="an epstack guard build listing",
    fix="rebuild the image (guard-layer.sh writes it)",
)


def record_path(layer: str) -> Path:
    return reports_folder() / f"{layer}.record.json"


def listing_path(layer: str) -> Path:
    return reports_folder() / f"{layer}.listing.json.gz"


def sha256(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def write_record(*, layer: str, pins: Path, locks: Path | None, report: Path, env: Mapping[str, str]) -> None:
    """The record of this process's passing guard (its `import torch` mapped the runtime it names), its
    listing and hold-env's file, the record last."""
    rows: dict[str, Rows] = {}
    trees = fingerprint(roots(env), content_files(), rows=rows)
    listing = gzip.compress(GUARD_LISTING.dumps(Listing(rows=rows)).encode(), mtime=0)
    write_file(listing_path(layer), listing, what="the guard's build listing")
    built = deciding(env)
    write_file(held_file(reports_folder()), held_file_text(built), what="hold-env's variables")
    record = GuardRecord(
        layer=layer,
        pins=str(pins),
        pins_sha256=sha256(pins),
        locks=str(locks or ""),
        report=str(report.absolute()),
        report_sha256=sha256(report),
        env=built,
        cuda_runtime=loaded_cuda_runtime(Path("/proc/self/maps").read_text()),
        trees=trees,
        listing_sha256=hashlib.sha256(listing).hexdigest(),
    )
    write_file(record_path(layer), record.to_json(), what="the guard's build record")


def read_record(layer: str) -> GuardRecord | str:
    """The layer's record, or why there is none to trust."""
    path = record_path(layer)
    if not path.exists():
        return f"no build record {path}"
    try:
        return GUARD_RECORD.read(path)
    except BadInput as exc:
        return str(exc)


def read_listing(record: GuardRecord, layer: str) -> Listing | None:
    """The record's listing, or None where it is gone or not the one the record names."""
    try:
        data = listing_path(layer).read_bytes()
        if hashlib.sha256(data).hexdigest() != record.listing_sha256:
            return None
        return GUARD_LISTING.loads(gzip.decompress(data).decode(), listing_path(layer))
    except (OSError, BadInput, EOFError, gzip.BadGzipFile):
        return None


def _walked(trees: Iterable[Tree]) -> list[Walked]:
    return [Walked(root=t.root, skip=t.skip) for t in trees if t.root not in (BY_CONTENT, LIBRARY_RESOLUTION)]


def current_rows(was: Tree, now: Tree) -> dict[str, list[Row]]:
    """This container's rows of each folder of `now` whose digest differs from the build's."""
    if was.root == LIBRARY_RESOLUTION:
        rows: Rows = {}
        library_tree(rows=rows)
        return rows
    rows = {}
    for folder in (f for f in was.folders.keys() & now.folders.keys() if was.folders[f] != now.folders[f]):
        path = os.path.normpath(os.path.join(was.root, folder))
        try:
            rows[folder] = folder_rows(
                path, [os.path.basename(s) for s in was.skip if os.path.dirname(s) == path]
            )
        except OSError:
            continue  # tree_changes names it as changed
    return rows


def build_file_changes(record: GuardRecord, layer: str, since: float) -> list[Change]:
    """The build's own files: its pins and report against their sha256, hold-env's file as the record's
    variables make it, and none of the record's files written in this container."""
    changes = []
    held = held_file(reports_folder())
    try:
        if held.read_bytes() != held_file_text(record.env):
            changes.append(Change(path=str(held), kind="content (not the record's variables)"))
    except OSError as exc:
        changes.append(Change(path=str(held), kind=f"unreadable: {exc.strerror}"))
    for path, digest in (
        (Path(record.pins), record.pins_sha256),
        (Path(record.report), record.report_sha256),
    ):
        try:
            if sha256(path) != digest:
                changes.append(Change(path=str(path), kind="content (sha256)"))
        except OSError as exc:
            changes.append(Change(path=str(path), kind=f"unreadable: {exc.strerror}"))
    for path in (record_path(layer), listing_path(layer), held, Path(record.report)):
        try:
            if path.stat().st_ctime > since:
                changes.append(Change(path=str(path), kind=WRITTEN))
        except OSError:
            pass  # the report's absence is named above; the listing's where a change needs it
    return changes


def unpacked_before_record(record: GuardRecord, layer: str, mounts: Mounts) -> Unpacked | None:
    """What the start may keep from the build unlisted (epstack.guard.fingerprint): on an overlayfs root,
    the folders unpacked before the record with nothing mounted on, under or above them."""
    if mounts.root_type != OVERLAY:
        return None
    try:
        before = record_path(layer).stat().st_ctime_ns
    except OSError:
        return None
    return Unpacked(before_ns=before, trees={tree.root: tree for tree in record.trees}, mounts=mounts)


def file_changes(record: GuardRecord, layer: str, since: float, unpacked: Unpacked | None = None) -> Walk:
    """Every file or folder of the record's trees not as the build left it, each written in this
    container since `since` (the container's first process), and the build's own files changed; with
    `unpacked`, the folders it keeps are the build's, unlisted."""
    changes = Changes(since=since)
    files = [path for tree in record.trees if tree.root == BY_CONTENT for path in tree.folders]
    now = {tree.root: tree for tree in fingerprint(_walked(record.trees), files, changes, unpacked=unpacked)}
    found = build_file_changes(record, layer, since)
    differing = [was for was in record.trees if was != now.get(was.root)]
    listing = read_listing(record, layer) if differing else None
    for was in differing:
        built = listing.rows.get(was.root) if listing is not None else None
        found += tree_changes(was, now[was.root], built, current_rows(was, now[was.root]))
    found += [Change(path=path, kind=WRITTEN) for path in changes.paths]
    return Walk(changes=tuple(shown_first(found)), listed=changes.listed, folders=changes.folders)


@dataclass(frozen=True, kw_only=True)
class Walk:
    """What the start's walk found changed, and how many folders of the trees it listed."""

    changes: tuple[Change, ...]
    listed: int
    folders: int


def inputs_change(record: GuardRecord, *, layer: str, pins: Path, locks: Path | None) -> str:
    """What the start was asked that differs from what the build recorded ("" where nothing does)."""
    asked = {"layer": layer, "pins": str(pins), "locks": str(locks or "")}
    recorded = {"layer": record.layer, "pins": record.pins, "locks": record.locks}
    for key, value in asked.items():
        if value != recorded[key]:
            return (
                f"the build recorded --{key} {recorded[key] or '(none)'}, this start has {value or '(none)'}"
            )
    return ""
