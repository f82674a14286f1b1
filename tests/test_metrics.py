"""epstack.metrics and `epstack cluster metrics`: each report kind's verdict as OpenMetrics text, read back
with prometheus_client's OpenMetrics parser (strict: it refuses a missing `# EOF`, a bad escape, a
sample without its TYPE)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from epstack import imagepaths, metrics
from epstack.commands.main import main
from epstack.errors import BadInput
from epstack.pins.load import load_pins
from tests.conftest import PINS

DIGEST = "sha256:" + "4f" * 32
IMAGE = f"registry.example/epstack:t@{DIGEST}"
GUARD = {
    "schema": "guard-report/1",
    "pins": str(imagepaths.PINS / "deepep.pins.env"),
    "layer": "deepep",
    "checks": [
        {"component": "nccl", "verdict": "ok"},
        {"component": "deep_ep", "verdict": "ok"},
        {"component": "torch", "verdict": "mismatch"},
    ],
    "ok": False,
}
SERVE = {"schema": "serve-smoke/1", "verdict": "pass", "checks": [{"component": "backend", "verdict": "ok"}]}
ELASTIC = {"command": [], "launch": {}, "config": {}, "verdict": "pass", "exit_code": 0}


def _samples(text: str) -> dict[tuple[str, str], Any]:
    """(sample name, verdict label) -> the sample, from the strict parser."""
    return {
        (sample.name, sample.labels.get("verdict", "")): sample
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _metrics(tmp_path: Path, report: dict[str, Any], *extra: str) -> str:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    out = tmp_path / "epstack.prom"
    assert (
        main(["cluster", "metrics", "--report", str(path), "--pins", str(PINS), "--out", str(out), *extra])
        == 0
    )
    return out.read_text()


def test_guard_report_as_openmetrics_with_digest_and_pins_hash(tmp_path: Path) -> None:
    text = _metrics(tmp_path, GUARD, "--image", IMAGE)
    samples = _samples(text)
    passed = samples[("epstack_report_passed", "")]
    pins = load_pins(PINS)
    target = pins.default_target
    assert passed.value == 0
    assert passed.labels == {
        "report": "guard",
        "image_digest": DIGEST,
        "pins_hash": pins.layer_hash("deepep", target),  # the guard's layer, as its image tag ends
        "layer": "deepep",
    }
    assert samples[("epstack_report_checks", "ok")].value == 2
    assert samples[("epstack_report_checks", "mismatch")].value == 1


@pytest.mark.parametrize(("report", "kind"), [(SERVE, "serve_smoke"), (ELASTIC, "elastic_smoke")])
def test_smoke_reports_pass(tmp_path: Path, report: dict[str, Any], kind: str) -> None:
    samples = _samples(_metrics(tmp_path, report))
    passed = samples[("epstack_report_passed", "")]
    assert passed.value == 1 and passed.labels["report"] == kind
    assert passed.labels["image_digest"] == ""  # no --image: the label is empty, as Prometheus reads absent
    assert len(passed.labels["pins_hash"]) == 12


def test_label_values_are_escaped_for_the_parser() -> None:
    verdict = metrics.Verdict(report="guard", passed=True, rows={'a"b\\c\nd': 1}, layer="x")
    text = metrics.openmetrics(verdict, image_digest="", pins_hash="h")
    assert _samples(text)[("epstack_report_checks", 'a"b\\c\nd')].value == 1


def test_the_parser_would_refuse_a_text_without_eof() -> None:
    """The control: the strict parser is what catches a broken exposition."""
    text = metrics.openmetrics(
        metrics.Verdict(report="guard", passed=True, rows={}), image_digest="", pins_hash="h"
    )
    with pytest.raises(ValueError):
        list(text_string_to_metric_families(text.replace("# EOF\n", "")))


@pytest.mark.parametrize("content", ["{}", "[1]", '{"schema": "guard-report/2", "ok": true}', "not json"])
def test_not_a_report_is_one_line_naming_the_file(tmp_path: Path, content: str) -> None:
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(BadInput, match=rf"^{path}: not .*; fix: pass"):
        metrics.read_verdict(path)


def test_bad_report_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("{}")
    out = tmp_path / "out.prom"
    assert main(["cluster", "metrics", "--report", str(path), "--pins", str(PINS), "--out", str(out)]) == 2
    assert not out.exists()
