"""What a bump means, as tables: printed by `pins bump` and written as Markdown for a pull request
(`--summary FILE`) from the same rows."""

from __future__ import annotations

from dataclasses import dataclass

from epstack.pins.bump import Bump


@dataclass(frozen=True, kw_only=True)
class Section:
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def sections(bump: Bump) -> list[Section]:
    """The pins moved, the images (rebuilt or reused), the distributions each relocked lock moves."""
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
    return [pins, images, moves]


def verdict(bump: Bump) -> list[str]:
    """The lines that say whether the bump holds: refusals with their fix, else what was checked."""
    if bump.refusals:
        return [f"refused: {refusal}" for refusal in bump.refusals]
    seconds = ", ".join(f"{step} {value:.1f} s" for step, value in bump.seconds.items())
    lines = [
        f"holds: every pins rule, the relock, `pins predict` ({bump.prediction.installs} distributions for "
        f"{bump.prediction.requested}, no base pin moves; answered from {bump.prediction.source}) and "
        f"the render ({bump.rendered} files) pass ({seconds})"
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


def markdown(bump: Bump) -> str:
    """A pull request body: the bump, its verdict and every table."""
    changes = ", ".join(f"{key}={new}" for key, (_, new) in bump.changes.items())
    lines = [f"## epstack pins bump {changes}", ""]
    lines += [f"- {line}" for line in verdict(bump)]
    for section in sections(bump):
        lines += ["", f"### {section.title}", ""]
        if not section.rows:
            lines.append("(none)")
            continue
        lines.append("| " + " | ".join(section.columns) + " |")
        lines.append("|" + " --- |" * len(section.columns))
        lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in section.rows]
    return "\n".join(lines) + "\n"
