"""One row type and one verdict vocabulary for the guard, the doctor and publish: a verdict that fails
one of them fails all of them, and a warning fails none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_args

import pytest

from epstack.aws.publish import junit
from epstack.checkrow import FAILED, Check, Verdict
from epstack.commands.doctor import format_table
from epstack.doctor.report import Report
from epstack.guard.report import GUARD_REPORT, GuardReport

FAILING = ("mismatch", "missing", "extra", "fail")


@pytest.mark.parametrize("verdict", get_args(Verdict))
def test_a_verdict_fails_the_guard_the_doctor_and_publish_alike(verdict: Verdict) -> None:
    """An `extra` distribution (in no lock) fails the guard, so it fails its JUnit case too; the doctor's
    `fail` fails wherever the row is read."""
    check = Check(component="nvidia-cuda-cccl", expected="in no lock", found="13.3.5.0.6", verdict=verdict)
    assert check.failed == (verdict in FAILING) == (verdict in FAILED)
    guard = GuardReport(pins=Path("pins.env"), layer="base", checks=(check,))
    assert guard.ok is not check.failed
    read_back = GUARD_REPORT.loads(guard.to_json(), "base.json")
    assert read_back.checks == (check,) and read_back.ok is guard.ok
    assert ("<failure" in junit({"epstack:base": read_back.checks})) == check.failed
    doctor = Report(root="/", cuda="13.0", checks=(check,))
    assert doctor.ok is not check.failed


def test_the_doctors_warning_does_not_fail_and_shows_its_fix() -> None:
    warn = Check(component="memlock", expected="unlimited", found="64", verdict="warn", fix="raise it")
    fail = Check(component="NVIDIA driver", expected=">= 580", found="not loaded", verdict="fail", fix="load")
    report = Report(root="/", cuda="13.0", checks=(warn,))
    assert report.ok and format_table(report).endswith("    fix: raise it\ndoctor: ok\n")
    report = Report(root="/", cuda="13.0", checks=(warn, fail))
    assert not report.ok and format_table(report).endswith("doctor: 1 of 2 checks failed\n")


def test_each_report_writes_the_row_fields_it_always_wrote() -> None:
    """The guard's rows carry their layer, the doctor's their fix, as each report always wrote them."""
    check = Check(component="c", expected="e", found="f", verdict="ok", fix="x", detail="d", layer="base")
    row = {"component": "c", "expected": "e", "found": "f", "verdict": "ok"}
    guard = GuardReport(pins=Path("p"), layer="base", checks=(check,)).to_json()
    assert json.loads(guard) == {
        "schema": "guard-report/1",
        "pins": "p",
        "layer": "base",
        "checks": [{**row, "detail": "d", "layer": "base"}],
        "ok": True,
    }
    doctor = Report(root="/", cuda="13.0", checks=(check,)).to_json()
    doctor_row = {**row, "fix": "x", "detail": "d"}
    assert json.loads(doctor) == {"root": "/", "image_cuda": "13.0", "checks": [doctor_row], "ok": True}
