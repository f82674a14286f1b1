"""The serve smoke's sweep as one PNG: output tokens/s, TTFT, ITL and end-to-end latency (p50 and p99)
against concurrency, from the JSON report (`epstack smoke plot`). matplotlib is the `plot` extra: the
report is plotted where it is read, not in the images."""

from __future__ import annotations

import io
from pathlib import Path

from epstack.errors import BadInput, EnvironmentProblem
from epstack.output import write_file
from epstack.smoke.serving.run import ServeReport
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


def png(report: ServeReport, source: Path) -> bytes:
    """The plot's PNG bytes; BadInput when the report has no sweep."""
    if not report.sweep:
        why = f"the run failed: {report.failure.kind}" if report.failure else "run with --no-sweep"
        raise BadInput(f"{source}: no sweep in this report ({why}); fix: plot a report with sweep levels")
    try:
        import matplotlib  # noqa: PLC0415 (the optional `plot` extra)

        matplotlib.use("Agg")
        from matplotlib import pyplot  # noqa: PLC0415
    except ImportError:
        raise EnvironmentProblem(
            "epstack smoke plot needs matplotlib; fix: pip install 'epstack[plot]'"
        ) from None
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
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=100)
    pyplot.close(figure)
    return out.getvalue()


def plot(report: ServeReport, source: Path, out: Path) -> None:
    write_file(out, png(report, source), what="the sweep's plot")
