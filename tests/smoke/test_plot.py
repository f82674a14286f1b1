"""`epstack smoke plot` over the committed H200 serve report: a PNG of every sweep level, and the refusals."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from PIL import Image

from epstack.commands.main import main
from epstack.smoke.serving import plot
from epstack.smoke.serving.run import SERVE_REPORT
from tests.conftest import REPO

H200 = REPO / "benchmarks" / "serve" / "results" / "serve-h200.json"
FAILED = REPO / "benchmarks" / "serve" / "results" / "serve-budget-fail.json"


def test_the_h200_report_plots_every_level(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep.png"
    assert main(["smoke", "plot", str(H200), "--out", str(out)]) == 0
    with Image.open(out) as image:
        assert image.format == "PNG"
        assert image.size == (1100, 700)
    assert f"plot: {out}" in capsys.readouterr().err
    # each level's throughput is drawn: the figure changes when one level does
    report = json.loads(H200.read_text())
    report["sweep"][3]["output_tokens_per_s"] *= 3
    changed = SERVE_REPORT.parse(report, "changed")
    assert plot.png(changed, H200) != out.read_bytes()


def test_a_failed_run_has_nothing_to_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep.png"
    assert main(["smoke", "plot", str(FAILED), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: {FAILED}: no sweep in this report (the run failed: server-exited); "
        "fix: plot a report with sweep levels"
    )
    assert not out.exists()


def test_the_plot_never_replaces_its_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "serve.json"
    report.write_text(H200.read_text())
    assert main(["smoke", "plot", str(report), "--out", str(report)]) == 2
    assert "which this command reads" in capsys.readouterr().err
    assert report.read_text() == H200.read_text()


def test_without_matplotlib_it_says_which_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    out = tmp_path / "sweep.png"
    assert main(["smoke", "plot", str(H200), "--out", str(out)]) == 3
    assert "pip install 'epstack[plot]'" in capsys.readouterr().err
    assert not out.exists()


COLD = REPO / "benchmarks" / "serve" / "results" / "cold-start"


def test_the_h200_cold_starts_plot_one_timeline_each(tmp_path: Path) -> None:
    out = tmp_path / "startup.png"
    reports = [str(COLD / "empty.json"), str(COLD / "shipped.json")]
    assert main(["smoke", "plot", "--startup", *reports, "--out", str(out)]) == 0
    with Image.open(out) as image:
        assert image.format == "PNG" and image.size[0] == 1200
    # each milestone is drawn: the figure changes when one does
    report = json.loads((COLD / "shipped.json").read_text())
    report["runs"][0]["startup"]["milestones_s"]["deepep_v2_buffer"] -= 40
    changed = SERVE_REPORT.parse(report, "changed")
    empty = SERVE_REPORT.read(COLD / "empty.json")
    redrawn = plot.startup_png([(empty, COLD / "empty.json"), (changed, COLD / "shipped.json")])
    assert redrawn != out.read_bytes()


def test_a_report_without_a_start_up_and_two_sweeps_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "startup.png"
    assert main(["smoke", "plot", "--startup", str(FAILED), "--out", str(out)]) == 2
    assert f"error: {FAILED}: no server start-up in this report" in capsys.readouterr().err
    assert main(["smoke", "plot", str(H200), str(H200), "--out", str(out)]) == 2
    assert "2 reports for one sweep's plot; fix: name one, or plot --startup" in capsys.readouterr().err
    assert not out.exists()
