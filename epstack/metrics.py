"""epstack's verdicts as OpenMetrics text: a guard, elastic smoke or serve smoke report (the JSON each
writes with --json) as gauges a Prometheus can scrape, e.g. from node_exporter's textfile collector.

Every sample carries the report kind, the image digest and the pins hash (the layer hash that ends the
image tag) as labels, so a dashboard tells which image and which pins passed. Standard library only;
tests/test_metrics.py reads the output back with prometheus_client's OpenMetrics parser.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epstack.errors import BadInput
from epstack.inputs import parse_json, read_text

PREFIX = "epstack_report"


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """What a report says, whatever wrote it: its kind, pass or not, and its check rows' verdicts."""

    report: str  # guard | elastic_smoke | serve_smoke
    passed: bool
    rows: dict[str, int]  # verdict -> number of check rows
    layer: str = ""  # the guard's layer (base, deepep, sglang)


def _rows(checks: Any) -> dict[str, int]:
    counts = Counter(str(row.get("verdict")) for row in checks if isinstance(row, dict))
    return dict(sorted(counts.items()))


def verdict_of(data: object, source: Path) -> Verdict:
    """The verdict of a parsed report; BadInput naming the file when it is none of the three."""
    if isinstance(data, dict):
        schema = data.get("schema")
        if schema == "guard-report/1" and isinstance(data.get("ok"), bool):
            layer = str(data.get("layer", ""))
            return Verdict(report="guard", passed=data["ok"], rows=_rows(data.get("checks", [])), layer=layer)
        if schema == "serve-smoke/1" and data.get("verdict") in ("pass", "fail"):
            rows = _rows(data.get("checks", []))
            return Verdict(report="serve_smoke", passed=data["verdict"] == "pass", rows=rows)
        if schema is None and {"launch", "config", "verdict"} <= data.keys():
            return Verdict(report="elastic_smoke", passed=data["verdict"] == "pass", rows={})
    raise BadInput(
        f"{source}: not a guard, elastic smoke or serve smoke report; fix: pass the file `epstack guard "
        "--json`, `epstack smoke elastic --json` or `epstack smoke serve --json` wrote"
    )


def read_verdict(path: Path) -> Verdict:
    text = read_text(path, what="a report")
    try:
        data = parse_json(text)
    except ValueError as exc:
        raise BadInput(f"{path}: {exc}; fix: pass a --json report") from None
    return verdict_of(data, path)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in labels.items()) + "}"


def openmetrics(verdict: Verdict, *, image_digest: str, pins_hash: str) -> str:
    """The verdict as an OpenMetrics exposition: pass (1/0) and the check rows by verdict; `# EOF` last."""
    labels = {"report": verdict.report, "image_digest": image_digest, "pins_hash": pins_hash}
    if verdict.layer:
        labels["layer"] = verdict.layer
    lines = [
        f"# HELP {PREFIX}_passed 1 when the report's verdict is a pass, else 0.",
        f"# TYPE {PREFIX}_passed gauge",
        f"{PREFIX}_passed{_labels(labels)} {int(verdict.passed)}",
    ]
    if verdict.rows:
        lines += [
            f"# HELP {PREFIX}_checks The report's check rows, by verdict.",
            f"# TYPE {PREFIX}_checks gauge",
        ]
        lines += [
            f"{PREFIX}_checks{_labels(labels | {'verdict': name})} {count}"
            for name, count in verdict.rows.items()
        ]
    return "\n".join([*lines, "# EOF"]) + "\n"
