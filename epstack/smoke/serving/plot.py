"""The serve smoke's reports as PNGs (`epstack smoke plot`): one report's sweep (output tokens/s, TTFT,
ITL and end-to-end latency, p50 and p99, against concurrency), or the start-ups of several, one timeline
each (`--startup`: the phases between the milestones its server's log shows, DeepGEMM's JIT sessions
beneath). matplotlib is the `plot` extra: reports are plotted where they are read, not in the images."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from epstack.errors import BadInput, EnvironmentProblem
from epstack.output import write_file
from epstack.smoke.serving.run import ServeReport
from epstack.smoke.serving.startup import MILESTONES, Startup
from epstack.smoke.serving.sweep import Level

# (title, unit, the Level fields drawn: p50 solid, p99 dashed)
PANELS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("output throughput", "tokens/s", ("output_tokens_per_s",)),
    ("time to first token", "ms", ("ttft_p50_ms", "ttft_p99_ms")),
    ("inter-token latency", "ms", ("itl_p50_ms", "itl_p99_ms")),
    ("end-to-end latency", "ms", ("e2e_p50_ms", "e2e_p99_ms")),
)


def _title(report: ServeReport) -> str:
    run = report.runs[0] if report.runs else None
    info = run.info if run else {}
    return (
        f"epstack smoke serve: {report.profile}, TP {report.tp_size} EP {report.ep_size}, "
        f"{info.get('moe_a2a_backend', '?')} / {info.get('moe_runner_backend', '?')}, "
        f"SGLang {info.get('version', '?')}; ISL {report.isl} OSL {report.osl}, {report.verdict}"
    )


def _pyplot() -> Any:
    try:
        import matplotlib  # noqa: PLC0415 (the optional `plot` extra)

        matplotlib.use("Agg")
        from matplotlib import pyplot  # noqa: PLC0415
    except ImportError:
        raise EnvironmentProblem(
            "epstack smoke plot needs matplotlib; fix: pip install 'epstack[plot]'"
        ) from None
    return pyplot


def _png(pyplot: Any, figure: Any) -> bytes:
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=100)
    pyplot.close(figure)
    return out.getvalue()


def png(report: ServeReport, source: Path) -> bytes:
    """The sweep's PNG bytes; BadInput when the report has no sweep."""
    if not report.sweep:
        why = f"the run failed: {report.failure.kind}" if report.failure else "run with --no-sweep"
        raise BadInput(f"{source}: no sweep in this report ({why}); fix: plot a report with sweep levels")
    pyplot = _pyplot()
    levels: list[Level] = sorted(report.sweep, key=lambda level: level.concurrency)
    x = [level.concurrency for level in levels]
    figure, axes = pyplot.subplots(2, 2, figsize=(11, 7), layout="constrained")
    for ax, (title, unit, fields) in zip(axes.flat, PANELS, strict=True):
        for field, style in zip(fields, ("o-", "s--"), strict=False):
            label = field.removesuffix("_ms").replace("_", " ").replace("output tokens per s", "output")
            ax.plot(x, [getattr(level, field) for level in levels], style, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, [str(c) for c in x])
        ax.set_xlabel("concurrency")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend()
    errors = sum(level.errors for level in levels)
    figure.suptitle(f"{_title(report)}\n{sum(lv.completed for lv in levels)} requests, {errors} errors")
    return _png(pyplot, figure)


def plot(report: ServeReport, source: Path, out: Path) -> None:
    write_file(out, png(report, source), what="the sweep's plot")


def _startup(report: ServeReport, source: Path) -> tuple[Startup, float]:
    """The first server's start-up and its launch to healthy; BadInput when the report has none."""
    run = report.runs[0] if report.runs else None
    if run is None or run.startup is None or not run.startup.milestones_s:
        raise BadInput(
            f"{source}: no server start-up in this report (attached with --url, or no log read); "
            "fix: plot reports of servers `epstack smoke serve` started"
        )
    return run.startup, run.launch_to_healthy_s or max(run.startup.milestones_s.values())


def startup_png(reports: Sequence[tuple[ServeReport, Path]]) -> bytes:
    """One timeline per report, top to bottom in the order given, on one time axis."""
    starts = [(_startup(report, source), source) for report, source in reports]
    pyplot = _pyplot()
    figure, ax = pyplot.subplots(figsize=(12, 2.4 + 1.1 * len(starts)), layout="constrained")
    colors = pyplot.get_cmap("tab10").colors
    phases = [name for name, _ in MILESTONES]
    for row, ((start, healthy), source) in enumerate(starts):
        y = len(starts) - 1 - row
        previous = 0.0
        for name in phases:
            at = start.milestones_s.get(name)
            if at is None:
                continue
            color = colors[phases.index(name) % len(colors)]
            ax.broken_barh([(previous, at - previous)], (y + 0.35, 0.5), color=color, label=f"to {name}")
            previous = at
        ax.broken_barh(
            [(previous, healthy - previous)], (y + 0.35, 0.5), color="lightgrey", label="to healthy"
        )
        sessions = [(s.at_s, max(s.seconds, 0.5)) for s in start.deepgemm]
        if sessions:
            ax.broken_barh(sessions, (y + 0.05, 0.25), color="black", label="DeepGEMM JIT session")
        ax.text(healthy, y + 0.6, f" {healthy:.0f} s", va="center")
        ax.text(
            0,
            y + 0.95,
            f"{source.stem}: DeepGEMM {start.deepgemm_s} s in {len(start.deepgemm)} sessions",
            va="bottom",
        )
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    figure.legend(unique.values(), unique.keys(), loc="outside lower center", ncol=4)
    ax.set_yticks([])
    ax.set_ylim(0, len(starts) + 0.2)
    ax.set_xlabel("seconds from launch")
    ax.grid(True, axis="x", alpha=0.3)
    figure.suptitle(
        f"{_title(reports[0][0])}\nlaunch to first answer (/health_generate), by phase of the server's log"
    )
    return _png(pyplot, figure)


def plot_startup(reports: Sequence[tuple[ServeReport, Path]], out: Path) -> None:
    write_file(out, startup_png(reports), what="the start-up plot")
