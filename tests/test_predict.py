"""epstack pins predict: report parsing on an excerpt of a real pip report, and pip against PyPI."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from epstack.cli import main
from epstack.errors import CommandFailed, EnvironmentProblem
from epstack.pins import load_pins
from epstack.predict import parse_report, predict, resolve
from tests.conftest import PINS, pins_variant

# `pip install --dry-run --report` for sglang==0.5.23 (pip 23.2.1, cp312 manylinux), cut down to
# the distributions and requirements that matter here.
REPORT = Path(__file__).with_name("fixtures") / "guard" / "pip-report-sglang-0.5.23.json"


def report() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(REPORT.read_text())
    return data


def test_parse_report() -> None:
    resolved = parse_report(report())
    assert [(item.name, item.version) for item in resolved][:2] == [
        ("sglang", "0.5.23"),
        ("sgl-deep-ep", "0.1.2.post1"),
    ]
    assert resolved[3].requires[1] == 'nvidia-nccl-cu13==2.30.7; platform_system == "Linux"'
    with pytest.raises(CommandFailed, match="version 2"):
        parse_report({"version": "2", "install": []})


def test_torch_2_11_moves_and_sglang_forces_it(tmp_path: Path) -> None:
    pins = load_pins(pins_variant(tmp_path, TORCH_VERSION="2.11.0"))
    data = report()
    sglang = data["install"][0]["metadata"]
    sglang["requires_dist"] += [
        'torch==2.9.0; platform_system == "Darwin"',  # not the image's platform
        'torch==2.8.0; python_version < "3.12"',  # not the image's Python (pip's report has the host's)
    ]
    prediction = predict(pins, data)
    (move,) = prediction.moves
    assert str(move).startswith("torch 2.11.0 -> 2.14.1 (required by sglang==0.5.23: torch==2.14.1; ")
    assert "sgl-deep-ep==0.1.2.post1: torch==2.14.1" in move.forced_by
    assert not any("2.9.0" in text or "2.8.0" in text for text in move.forced_by)
    (deep_ep,) = prediction.deep_ep
    assert (deep_ep.package, deep_ep.resolved) == ("sgl-deep-ep", "0.1.2.post1")
    assert deep_ep.forced_by == ("sglang==0.5.23: sgl-deep-ep==0.1.2.post1",)
    assert prediction.drifts


def test_matching_pins_move_nothing_but_deep_ep_still_drifts() -> None:
    data = report()
    prediction = predict(load_pins(PINS), data)
    assert prediction.moves == ()
    data["install"] = [item for item in data["install"] if item["metadata"]["name"] != "sgl-deep-ep"]
    assert not predict(load_pins(PINS), data).drifts


def test_nccl_move_names_torch(tmp_path: Path) -> None:
    prediction = predict(load_pins(pins_variant(tmp_path, NCCL_VERSION="2.30.4")), report())
    assert [str(m) for m in prediction.moves] == [
        "nvidia-nccl-cu13 2.30.4 -> 2.30.7 (required by torch==2.14.1: nvidia-nccl-cu13==2.30.7)"
    ]


def test_offline_is_an_environment_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    """An index nobody answers on (the discard port of this machine) is what offline looks like to pip."""
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    with pytest.raises(EnvironmentProblem, match="cannot reach the package index"):
        resolve("sglang==0.5.23", "3.12", timeout=60)


@pytest.mark.network
def test_predict_against_pypi(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pins = pins_variant(tmp_path, TORCH_VERSION="2.11.0")
    start = time.monotonic()
    assert main(["pins", "predict", str(pins)]) == 1
    seconds = time.monotonic() - start
    err = capsys.readouterr().err
    assert "torch 2.11.0 -> 2.14.1 (required by sglang==0.5.23: torch==2.14.1" in err
    assert "deep_ep: sgl-deep-ep" in err
    print(f"pins predict against the index: {seconds:.1f} s")
