"""What a bump means, as tables: printed by `pins bump` and written as Markdown for a pull request
(`--summary FILE`) from the same rows."""

from __future__ import annotations

import re
from dataclasses import dataclass

from epstack.bump.plan import NO_BUILD_REPORT, Bump
from epstack.layers import TOP, engine_layers


@dataclass(frozen=True, kw_only=True)
class Section:
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def sections(bump: Bump) -> list[Section]:
    """The pins moved, the images (rebuilt or reused), the distributions each relocked lock moves, the
    bytes a node pulls and the guard rows that change."""
    pins = Section(
        title=f"pins ({bump.path})",
        columns=("key", "before", "after"),
        rows=tuple((key, old, new) for key, (old, new) in bump.changes.items()),
    )
    images = Section(
        title="images: a new tag is rebuilt, an equal one reused",
        columns=("target", "layer", "tag before", "tag after"),
        rows=tuple(
            (image.target, image.layer, image.before or "(new)", "reused" if image.reused else image.after)
            for image in bump.images
        ),
    )
    kept = f"; kept byte-identical: {', '.join(f'{name}.txt' for name in bump.kept)}" if bump.kept else ""
    moves = Section(
        title=f"locks relocked: {', '.join(f'{name}.txt' for name in bump.locks) or 'none'}{kept}",
        columns=("lock", "distribution", "before", "after"),
        rows=tuple((m.lock, m.package, m.before or "(added)", m.after or "(removed)") for m in bump.moves),
    )
    return [pins, images, moves, _pull_section(bump), *_guard_sections(bump)]


def _gigabytes(size: int | None) -> str:
    return "unknown" if size is None else f"{size / 1e9:.2f} GB"


def _pull_section(bump: Bump) -> Section:
    """Each rebuilt image's pull, then per target the sum: what `docker pull` of its served image fetches."""
    if bump.build_report == NO_BUILD_REPORT:
        return Section(
            title="bytes a node pulls",
            columns=("target", "pull", "why"),
            rows=(("every target", "unknown", NO_BUILD_REPORT),),
        )
    rows = [(pull.target, pull.layer, _gigabytes(pull.size), pull.basis) for pull in bump.pulls]
    targets: dict[str, list[int | None]] = {}
    served = engine_layers(TOP.name)  # a node pulls the default engine's image and the layers below it
    for pull in bump.pulls:
        if pull.layer in served:
            targets.setdefault(pull.target, []).append(pull.size)
    for target, sizes in targets.items():
        total = None if None in sizes else sum(size or 0 for size in sizes)
        rows.append(
            (
                target,
                "a node's pull",
                _gigabytes(total),
                f"the sum of its rows above: `docker pull` of its {TOP.name} image",
            )
        )
    return Section(
        title=f"bytes a node pulls, estimated from {bump.build_report}",
        columns=("target", "image", "pull", "estimated as"),
        rows=tuple(rows),
    )


def _guard_sections(bump: Bump) -> list[Section]:
    """The guard rows whose expected value follows a moved pin, and the lock rows that move."""
    pinned = Section(
        title="guard rows that follow a moved pin (epstack guard --layer SCOPE)",
        columns=("scope", "row", "expected before", "expected after"),
        rows=tuple((row.scope, f"{row.row} ({row.key})", row.before, row.after) for row in bump.guard_rows),
    )
    locked = Section(
        title="guard lock rows that move (epstack guard --locks, in each layer's image)",
        columns=("layer", "rows", "distributions"),
        rows=tuple(
            (each.layer, str(len(each.distributions)), ", ".join(each.distributions))
            for each in bump.lock_rows
        ),
    )
    return [pinned, locked]


def verdict(bump: Bump, *, timed: bool = True) -> list[str]:
    """The lines that say whether the bump holds: refusals with their fix, else what was checked (and,
    `timed`, how long each step took)."""
    if bump.refusals:
        return [f"refused: {refusal}" for refusal in bump.refusals]
    seconds = ", ".join(f"{step} {value:.1f} s" for step, value in bump.seconds.items())
    lines = [
        f"holds: every pins rule, the relock, `pins predict` ({bump.prediction.installs} distributions for "
        f"{bump.prediction.requested}, no base pin moves; answered from {bump.prediction.source}) and "
        f"the render ({bump.rendered} files) pass" + (f" ({seconds})" if timed else "")
    ]
    lines += [
        f"note: {move.package} {move.resolved} brings its own deep_ep ({move.reason}); the sglang lock "
        "excludes it, as before"
        for move in bump.prediction.deep_ep
    ]
    return lines


def _cell(text: str) -> str:
    """A Markdown table cell showing `text` literally."""
    return "`" + text.replace("`", "'").replace("|", "\\|") + "`" if text else ""


def short(text: str) -> str:
    """Digests and commit hashes cut to 12 hex digits (tables and titles; reports keep them whole)."""
    return re.sub(r"\b([0-9a-f]{12})[0-9a-f]{28,52}\b", r"\1", text)


def title(bump: Bump) -> str:
    """A pull request's or commit's title: each pin moved, before and after."""
    return "pins: " + ", ".join(
        f"{key} {short(old)} -> {short(new)}" for key, (old, new) in bump.changes.items()
    )


def markdown(bump: Bump) -> str:
    """A pull request body: the bump, its verdict, where upstream says what it brings, every table; the
    same bump gives the same text (no timings), so a pull request already saying it is left alone."""
    changes = ", ".join(f"{key}={new}" for key, (_, new) in bump.changes.items())
    lines = [f"## epstack pins bump {changes}", ""]
    lines += [f"- {line}" for line in verdict(bump, timed=False)]
    if bump.links:
        lines += ["", "### upstream: what it brings", ""]
        lines += [f"- [{what}]({url})" for what, url in bump.links]
    for section in sections(bump):
        lines += ["", f"### {section.title}", ""]
        if not section.rows:
            lines.append("(none)")
            continue
        lines.append("| " + " | ".join(section.columns) + " |")
        lines.append("|" + " --- |" * len(section.columns))
        lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in section.rows]
    return "\n".join(lines) + "\n"
