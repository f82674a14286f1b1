"""mkdocs hook (mkdocs.yml `hooks`): the docs' pictures drawn from the committed benchmark JSON at every
build, never committed as images: the H200 serve sweep, the cold starts (H200, and the H100 run
with every GPU export and FlashInfer's modules shipped) (epstack.smoke.serving.plot),
and the JIT toolchains' first calls with empty caches against shipped ones."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

from epstack.smoke.serving import plot
from epstack.smoke.serving.run import SERVE_REPORT

REPO = Path(__file__).resolve().parents[2]
SERVE = REPO / "benchmarks" / "serve" / "results"
ELASTIC = REPO / "benchmarks" / "elastic" / "results"


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def first_calls_png() -> bytes:
    """Each toolchain's first call on the H200, empty cache against shipped, on a log axis."""
    import matplotlib  # noqa: PLC0415 (matplotlib: the test extra, the docs build's)

    matplotlib.use("Agg")
    from matplotlib import pyplot  # noqa: PLC0415

    kinds = ("empty", "shipped")
    empty, shipped = (_json(ELASTIC / f"kernels-{kind}-qwen3.json")["ranks"][0]["jit"] for kind in kinds)
    rows: list[tuple[str, float, float]] = [
        (f"DeepEP {name[6:-2].replace('_', ' ')}", empty[name], shipped[name])
        for name in ("first_dispatch_fp8_s", "first_dispatch_bf16_s", "first_combine_s")
    ]
    flashinfer = [_json(ELASTIC / f"flashinfer-{kind}.json")["first_call_s"] for kind in kinds]
    triton = [_json(ELASTIC / f"triton-{kind}.json")["launcher_s"] for kind in kinds]
    rows += [("FlashInfer sampling", flashinfer[0], flashinfer[1]), ("Triton launcher", triton[0], triton[1])]
    figure, ax = pyplot.subplots(figsize=(10, 4.6), layout="constrained")
    y = range(len(rows))
    ax.barh([i + 0.2 for i in y], [r[1] for r in rows], height=0.4, label="empty cache (compiles)")
    ax.barh([i - 0.2 for i in y], [r[2] for r in rows], height=0.4, label="shipped in the image")
    for i, (_, cold, warm) in enumerate(rows):
        ax.text(cold, i + 0.2, f" {cold:.3g} s", va="center")
        ax.text(warm, i - 0.2, f" {warm * 1000:.3g} ms", va="center")
    ax.set_yticks(list(y), [r[0] for r in rows])
    ax.set_xscale("log")
    ax.set_xlabel("seconds of the first call (log)")
    ax.set_xlim(right=max(r[1] for r in rows) * 10)  # room for the labels
    figure.legend(loc="outside lower center", ncol=2)
    ax.set_title("First call on an H200: JIT caches empty against shipped (benchmarks/elastic/results)")
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=100)
    pyplot.close(figure)
    return out.getvalue()


def on_files(files: Files, config: Any) -> Files:
    sweep = SERVE / "serve-h200.json"
    cold = [SERVE / "cold-start-sampled" / name for name in ("empty.json", "shipped.json", "warm.json")]
    h100 = [SERVE / "cold-start-h100-shipped" / name for name in ("empty.json", "shipped.json", "warm.json")]
    pictures = {
        "images/serve-sweep.png": plot.png(SERVE_REPORT.read(sweep), sweep),
        "images/cold-start.png": plot.startup_png([(SERVE_REPORT.read(path), path) for path in cold]),
        "images/cold-start-h100.png": plot.startup_png([(SERVE_REPORT.read(path), path) for path in h100]),
        "images/first-calls.png": first_calls_png(),
    }
    for uri, content in pictures.items():
        files.append(File.generated(config, uri, content=content))
    return files
