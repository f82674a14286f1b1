"""The CLI in-process: exit codes, JSON output against the committed schema, tooling checks."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from epstack.cli import main
from epstack.pins.load import SCHEMA_PATH, pins_json_schema
from tests.conftest import PINS, REPO, pins_variant, venv_tool


def test_pins_check_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pins", "check", "--pins", str(PINS)]) == 0
    err = capsys.readouterr().err
    assert "ok (4 targets, default hopper-ib)" in err


def test_pins_check_bad_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = pins_variant(tmp_path, TORCH_CUDA_TAG="cu128")
    assert main(["pins", "check", "--pins", str(bad)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: {bad}:") and "fix:" in lines[0]


def test_pins_file_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EPSTACK_PINS", str(pins_variant(tmp_path, NCCL_VERSION="2.20.5")))
    assert main(["pins", "check"]) == 2


def test_committed_schema_is_current() -> None:
    assert SCHEMA_PATH.read_text() == pins_json_schema(), "regenerate with `make schema`"


def test_pins_json_validates_against_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pins", "check", "--json", "--pins", str(PINS)]) == 0
    document = tmp_path / "pins.json"
    document.write_text(capsys.readouterr().out)
    assert json.loads(document.read_text())["DEEPEP_REF"] == "d4f41e4e93602a15e95f55f6ee8df8f1aaa0e4bb"
    check = [venv_tool("check-jsonschema"), "--schemafile", str(SCHEMA_PATH)]
    subprocess.run([*check, str(document)], check=True, capture_output=True)
    broken = json.loads(document.read_text())
    del broken["NCCL_VERSION"]
    document.write_text(json.dumps(broken))
    assert subprocess.run([*check, str(document)], capture_output=True, check=False).returncode == 1


def test_unknown_build_target_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "hopper-roce", "--out", str(tmp_path / "out")]) == 2
    assert "fix: use one of hopper-efa" in capsys.readouterr().err


def test_build_without_engine_says_how_to_start_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["build", "--pins", str(PINS), "--out", str(tmp_path / "out")]) == 3
    assert "scripts/dev/docker-engine.sh start" in capsys.readouterr().err


def test_shell_scripts_pass_shellcheck() -> None:
    scripts = [*sorted(map(str, REPO.glob("scripts/**/*.sh"))), *map(str, REPO.glob("benchmarks/*/*.sh"))]
    scripts.append(str(REPO / ".ci/run"))
    result = subprocess.run([venv_tool("shellcheck"), *scripts], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout
