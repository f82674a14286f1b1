"""`epstack pins bump KEY=VALUE...`: what moving some pins means, proven before anything is written.

The pins file is rewritten in memory (pins.file.rewrite: every comment and line kept) into a staging
folder beside it (epstack.journal.staging), with a copy of the locks; there every pins rule runs,
`epstack pins lock`'s relock resolves only the locks the change makes stale (the others stay
byte-identical), `pins predict` asks whether a plain install of SGLang would move a base pin, and the
build context is rendered. Only a bump that passes all of it is applied: the locks and the pins file
replaced as one commit (epstack.journal.commit), so a kill at any moment leaves the old pins and locks
or the new ones, and its uv runs die with it.
What it costs and changes is derived, nothing run: the bytes a node pulls from the sizes in the last
build report (`epstack build --report`), the guard rows from the pins and locks that move.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from epstack.bump.upstream import change_links
from epstack.errors import BadInput, shown
from epstack.image.build import BUILD_REPORT, BuildReport
from epstack.image.render import plan_checkout, write_plan
from epstack.inputs import read_text
from epstack.journal import commit
from epstack.layers import GUARD_SCOPES, LAYER_NAMES, LAYERS, layer_named, venv_locks
from epstack.pins.file import rewrite
from epstack.pins.load import load_pins
from epstack.pins.model import Pins
from epstack.python.lock import Installable, Move, Resolver, lock_specs, relock, stale_locks, write_locks
from epstack.python.lockfile import LockFile, lock_path
from epstack.python.predict import Prediction, predict_pins
from epstack.python.releases import index_pins, missing_release
from epstack.python.resolve import Unresolvable, check_installable, compile_requirements
from epstack.suggest import did_you_mean


@dataclass(frozen=True, kw_only=True)
class Image:
    """One image of one target, tagged before and after the bump."""

    target: str
    layer: str
    before: str
    after: str

    @property
    def reused(self) -> bool:
        return self.before == self.after


@dataclass(frozen=True, kw_only=True)
class Pull:
    """The bytes a node pulls for one rebuilt image (None: unknown), and how they were estimated."""

    target: str
    layer: str
    size: int | None
    basis: str


@dataclass(frozen=True, kw_only=True)
class GuardRow:
    """A guard row whose expected value follows a moved pin (epstack.layers.GuardScope.keys)."""

    scope: str
    row: str  # the distribution checked, else the pins key
    key: str
    before: str
    after: str


@dataclass(frozen=True, kw_only=True)
class LockRows:
    """The distributions whose `guard --locks` row in a layer's image expects another version."""

    layer: str
    distributions: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Bump:
    """A bump resolved, predicted and rendered in staging; nothing written yet."""

    path: Path
    locks_dir: Path
    changes: dict[str, tuple[str, str]]  # key -> (before, after)
    text: str  # the new pins file
    locks: dict[str, LockFile]  # the relocked locks by name (the others are kept as they are)
    kept: tuple[str, ...]
    moves: tuple[Move, ...]
    images: tuple[Image, ...]
    prediction: Prediction
    refusals: tuple[str, ...]  # why it must not be applied, each with its fix
    rendered: int  # files in the rendered build context
    build_report: str  # where the sizes come from, or why there are none and the command that makes them
    pulls: tuple[Pull, ...]  # each rebuilt image's pull; empty without a build report
    guard_rows: tuple[GuardRow, ...]
    lock_rows: tuple[LockRows, ...]
    links: tuple[tuple[str, str], ...] = ()  # (what, URL): release notes and compare views
    seconds: dict[str, float] = field(default_factory=dict)  # lock, predict, render


def parse_assignments(assignments: Sequence[str], pins: Pins, path: Path) -> dict[str, str]:
    """KEY=VALUE arguments -> {KEY: VALUE}; BadInput for a malformed one, an unknown key, a repeat."""
    known = pins.as_env()
    values: dict[str, str] = {}
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        if not sep or not key:
            raise BadInput(f"{shown(assignment)}: not KEY=VALUE; fix: write e.g. SGLANG_VERSION=0.5.24")
        if key not in known:
            hint = did_you_mean(key, known) or "see docs/reference/pins.md#keys"
            raise BadInput(f"{key}: not a key of {path}; fix: {hint}")
        if key in values:
            raise BadInput(f"{key} is given twice; fix: bump each key once")
        if known[key] == value:
            raise BadInput(f"{key} is already {shown(value, quote=False)} in {path}; fix: give a new value")
        values[key] = value
    return values


def plan_bump(
    path: Path,
    locks: Path,
    assignments: Sequence[str],
    *,
    staging: Path,
    resolver: Resolver = compile_requirements,
    installable: Installable = check_installable,
    build_report: Path | None = None,
) -> Bump:
    """Prove the bump in `staging` (epstack.journal.staging). BadInput (nothing written outside it) for
    an unknown key, a value no rule accepts, a release the index does not have or a build report that
    is not one; Unresolvable when the bumped pins do not resolve together."""
    report = BUILD_REPORT.read(build_report) if build_report else None
    before = load_pins(path)
    values = parse_assignments(assignments, before, path)
    text = rewrite(read_text(path, what="a pins file"), values)
    staged = staging / "pins.env"
    staged.write_text(text)
    after = _load_staged(staged, path)
    read_back = after.as_env()
    for key, value in values.items():
        if read_back[key] != value:
            raise BadInput(
                f"{key}={shown(value)} reads back as {shown(read_back[key])}; "
                f"fix: write {key}={shown(read_back[key], quote=False)}"
            )
    staged_locks = staging / "locks"
    staged_locks.mkdir()
    for spec in lock_specs(before):
        if lock_path(locks, spec.name).is_file():
            shutil.copy2(lock_path(locks, spec.name), lock_path(staged_locks, spec.name))
    seconds: dict[str, float] = {}
    start = time.monotonic()
    try:
        run = relock(after, staged_locks, resolver=resolver, installable=installable, pins_path=staged)
    except BadInput as exc:  # NCCL_VERSION against the NCCL the bumped torch requires itself
        raise BadInput(str(exc).replace(str(staged), f"{path} (bumped)")) from None
    except Unresolvable as exc:
        raise _missing(after, values, str(exc)) or Unresolvable(
            f"the bumped pins do not resolve, nothing written: {exc}"
        ) from None
    write_locks(run, staged_locks)
    seconds["lock"] = time.monotonic() - start
    start = time.monotonic()
    prediction = predict_pins(after, staged_locks, resolver)  # named as the locks it writes, not staging's
    prediction = replace(prediction, source=prediction.source.replace(str(staged_locks), f"{locks} (bumped)"))
    seconds["predict"] = time.monotonic() - start
    start = time.monotonic()
    plan = plan_checkout(after, path, locks=staged_locks)
    write_plan(plan, staging / "render")
    seconds["render"] = time.monotonic() - start
    stale = stale_locks(after, staged_locks)
    if stale:  # relock leaves none; a lock it could not make fresh is a bug, said plainly
        raise AssertionError(f"after relock: {'; '.join(map(str, stale))}")
    images = _images(before, after)
    changes = {key: (before.as_env()[key], value) for key, value in values.items()}
    return Bump(
        path=path,
        locks_dir=locks,
        changes=changes,
        text=text,
        locks=run.locks,
        kept=tuple(run.kept),
        moves=tuple(run.moves),
        images=images,
        prediction=prediction,
        refusals=_refusals(after, prediction),
        rendered=len(plan.files),
        build_report=f"{build_report} (target {report.target})" if report else NO_BUILD_REPORT,
        pulls=_pulls(images, report) if report else (),
        guard_rows=_guard_rows(after, changes),
        lock_rows=_lock_rows(run.moves),
        links=change_links(read_back, changes),
        seconds=seconds,
    )


def _load_staged(staged: Path, path: Path) -> Pins:
    """The bumped pins, every rule run; a problem is reported against the user's file."""
    try:
        return load_pins(staged)
    except BadInput as exc:
        raise BadInput(str(exc).replace(str(staged), f"{path} (bumped)")) from None


def _missing(pins: Pins, values: dict[str, str], reason: str) -> BadInput | None:
    """BadInput when uv failed because a bumped release is not on the index."""
    for key, distribution in index_pins(pins).items():
        if key in values and missing_release(reason, distribution, values[key]):
            return BadInput(
                f"{key}={values[key]}: the package index has no {distribution} {values[key]}; "
                f"fix: pick a released version (epstack pins outdated lists the newest)"
            )
    return None


def _refusals(pins: Pins, prediction: Prediction) -> tuple[str, ...]:
    """Each base pin a plain install of SGLang would move, with the fix."""
    keys = {distribution: key for key, distribution in index_pins(pins).items()}
    return tuple(
        f"{move}; fix: pin {keys[move.package]}={move.resolved} too, or an SGLANG_VERSION that accepts "
        f"{move.package} {move.pinned}"
        for move in prediction.moves
    )


def _images(before: Pins, after: Pins) -> tuple[Image, ...]:
    """Every image of the bumped targets; a target new to the bump has no tag before ("")."""
    return tuple(
        Image(
            target=target,
            layer=layer,
            before=before.image_tag(layer, target) if target in before.targets else "",
            after=after.image_tag(layer, target),
        )
        for target in after.targets
        for layer in LAYER_NAMES
    )


NO_BUILD_REPORT = (
    "no build report given; fix: `epstack build TARGET --report FILE` writes one (`make image` builds "
    "without), then pins bump --build-report FILE"
)


def _pulls(images: tuple[Image, ...], report: BuildReport) -> tuple[Pull, ...]:
    """Per rebuilt image, the bytes its own layers add: its size in the report less the size of the
    image it is built on (a node holds that one if reused; else that one's row counts it)."""
    sizes = {
        built.ref.rsplit(":", 1)[1]: built.size
        for built in report.built
        if built.stage == layer_named(built.layer).stages[-1]
    }
    tags = {(image.target, image.layer): image.before for image in images}
    pulls = []
    for image in (image for image in images if not image.reused):
        on = layer_named(image.layer).on
        lower = sizes.get(tags.get((image.target, on), "")) if on else None
        size, basis = sizes.get(image.before), f"its size in the build report less its {on} image's"
        if size is None:
            built = "from other pins" if image.target == report.target else f"of {report.target}"
            basis = (
                f"not in the build report (a build {built}); fix: epstack build {image.target} --report FILE"
            )
        elif lower is None:
            basis = "its whole size in the build report (an upper bound: the CUDA base's layers included)"
        else:
            size -= lower
        pulls.append(Pull(target=image.target, layer=image.layer, size=size, basis=basis))
    return tuple(pulls)


def _guard_rows(pins: Pins, changes: dict[str, tuple[str, str]]) -> tuple[GuardRow, ...]:
    """The rows of each guard scope that read a moved pin, named as the guard names them."""
    distributions = index_pins(pins)
    return tuple(
        GuardRow(scope=scope.name, row=distributions.get(key, key), key=key, before=old, after=new)
        for scope in GUARD_SCOPES
        for key, (old, new) in changes.items()
        if key in scope.keys
    )


def _lock_rows(moves: Sequence[Move]) -> tuple[LockRows, ...]:
    """Per layer image, the distributions its venv's locks move (the guard's --locks rows)."""
    rows = []
    for layer in LAYERS:
        moved = sorted({move.package for move in moves if move.lock in venv_locks(layer.name)})
        if moved:
            rows.append(LockRows(layer=layer.name, distributions=tuple(moved)))
    return tuple(rows)


def bump_texts(bump: Bump) -> dict[Path, str]:
    """What applying the bump writes: each relocked lock's text, and the pins file's."""
    locks = {lock_path(bump.locks_dir, name): lock.text for name, lock in bump.locks.items()}
    return {**locks, bump.path: bump.text}


def apply_bump(bump: Bump, staging: Path) -> list[Path]:
    """The relocked locks and the pins file, replaced as one commit through `staging`; the files."""
    return commit(staging, bump_texts(bump))
