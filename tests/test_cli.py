"""The CLI in-process: exit codes, JSON output against the committed schema, tooling checks."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from epstack import cmd
from epstack.commands.main import console_for_stderr, main
from epstack.pins.load import SCHEMA_PATH, pins_json_schema
from tests.conftest import PINS, REPO, pins_variant, venv_tool


def test_pins_check_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pins", "check", "--pins", str(PINS)]) == 0
    err = capsys.readouterr().out
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
    assert main(["build", "hopper-roce", "--out-dir", str(tmp_path / "out")]) == 2
    assert "fix: use one of hopper-efa" in capsys.readouterr().err


def test_build_without_engine_says_how_to_start_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["build", "--pins", str(PINS), "--out-dir", str(tmp_path / "out")]) == 3
    assert "scripts/dev/docker-engine.sh start" in capsys.readouterr().err


def test_shell_scripts_pass_shellcheck() -> None:
    scripts = [*sorted(map(str, REPO.glob("scripts/**/*.sh"))), *map(str, REPO.glob("benchmarks/*/*.sh"))]
    scripts.append(str(REPO / ".ci/run"))
    result = subprocess.run([venv_tool("shellcheck"), *scripts], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def test_pins_json_to_a_file_or_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "pins.json"
    assert main(["pins", "check", "--pins", str(PINS), "--json", str(out)]) == 0
    assert capsys.readouterr().out == ""
    assert main(["pins", "check", "--pins", str(PINS), "--json", "-"]) == 0
    assert capsys.readouterr() == (out.read_text(), "")
    assert main(["pins", "check", "--json", "--pins", str(PINS)]) == 0  # the old flag: stdout, warned
    assert capsys.readouterr() == (
        out.read_text(),
        "warning: --json without FILE is deprecated and goes in the next release; fix: write --json -\n",
    )


def test_quiet_keeps_only_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-q", "pins", "check", "--pins", str(PINS)]) == 0
    assert capsys.readouterr().err == ""
    assert main(["-q", "pins", "check", "--pins", str(tmp_path / "none.env")]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert main(["pins", "check", "--pins", str(PINS)]) == 0 and cmd.verbosity == cmd.NORMAL


@pytest.mark.parametrize(
    ("verbosity", "work", "probe"),
    [(cmd.QUIET, False, False), (cmd.NORMAL, True, False), (cmd.VERBOSE, True, True)],
)
def test_verbosity_says_which_commands_are_printed(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    verbosity: int,
    work: bool,
    probe: bool,
) -> None:
    monkeypatch.setattr(cmd, "verbosity", verbosity)
    cmd.call("true")
    assert cmd.succeeds("false") is False
    err = capsys.readouterr().err
    assert ("+ true" in err, "+ false" in err) == (work, probe)


def test_no_color_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # a terminal, as far as rich knows
    monkeypatch.delenv("NO_COLOR", raising=False)
    outputs = []
    for no_color in ("", "1"):
        monkeypatch.setenv("NO_COLOR", no_color)
        console = console_for_stderr()
        with console.capture() as captured:
            console.print("[red]error:[/] x")
        outputs.append(captured.get())
    assert "\x1b[" in outputs[0] and "\x1b[" not in outputs[1] and "error: x" in outputs[1]
