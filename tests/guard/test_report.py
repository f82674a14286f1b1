"""The guard's JSON report: what `epstack guard --json` writes and `epstack publish` reads back."""

from __future__ import annotations

import json
from pathlib import Path

from epstack.checkrow import Check
from epstack.guard.report import GUARD_REPORT, GuardReport
from epstack.python.closure import Distribution

OK = Check(component="torch", expected="2.14.1", found="2.14.1", verdict="ok", layer="base")
OVERRIDE = Check(
    component="torch requires nvidia-nccl-cu13",
    expected="2.30.7 (pinned)",
    found="==2.28.9",
    verdict="override (pinned)",
    fix="not shown in the report",
    detail="pins.env installs nvidia-nccl-cu13 2.30.7 on purpose",
    layer="base",
)
MISSING = Check(
    component="sglang", expected="0.5.23", found="not installed", verdict="missing", layer="sglang"
)


def test_the_report_is_ok_only_when_no_row_failed() -> None:
    assert GuardReport(pins=Path("pins.env"), layer="base", checks=(OK, OVERRIDE)).ok is True
    assert GuardReport(pins=Path("pins.env"), layer="all", checks=(OK, MISSING, OVERRIDE)).ok is False
    assert GuardReport(pins=Path("pins.env"), layer="all", checks=()).ok is True


def test_the_json_holds_each_row_its_verdict_and_the_distributions(tmp_path: Path) -> None:
    distributions = (
        Distribution(name="torch", locked="2.14.1", installed="2.14.1", source="base.lock"),
        Distribution(name="sglang", locked="0.5.23", installed="", source="sglang.lock"),
    )
    report = GuardReport(
        pins=Path("/image/sglang.pins.env"), layer="all", checks=(OK, MISSING), distributions=distributions
    )
    document = json.loads(report.to_json())
    assert document == {
        "schema": "guard-report/1",
        "pins": "/image/sglang.pins.env",
        "layer": "all",
        "checks": [
            {
                "component": "torch",
                "expected": "2.14.1",
                "found": "2.14.1",
                "verdict": "ok",
                "detail": "",
                "layer": "base",
            },
            {
                "component": "sglang",
                "expected": "0.5.23",
                "found": "not installed",
                "verdict": "missing",
                "detail": "",
                "layer": "sglang",
            },
        ],
        "ok": False,
        "distributions": [
            {
                "name": "torch",
                "locked": "2.14.1",
                "installed": "2.14.1",
                "source": "base.lock",
                "verdict": "ok",
            },
            {
                "name": "sglang",
                "locked": "0.5.23",
                "installed": "",
                "source": "sglang.lock",
                "verdict": "missing",
            },
        ],
    }
    path = tmp_path / "guard.json"
    path.write_text(report.to_json())
    assert GUARD_REPORT.read(path) == report


def test_a_report_without_distributions_writes_none_and_keeps_the_fields_order() -> None:
    document = json.loads(GuardReport(pins=Path("p.env"), layer="base", checks=(OVERRIDE,)).to_json())
    assert "distributions" not in document and document["ok"] is True
    assert list(document["checks"][0]) == ["component", "expected", "found", "verdict", "detail", "layer"]
    assert document["checks"][0]["verdict"] == "override (pinned)"
