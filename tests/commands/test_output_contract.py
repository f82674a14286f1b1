"""One output contract: a command's results on stdout, its logs on stderr; `--json -` puts the JSON
document alone on stdout (no table before it), for every command that has --json. Each runs here as
far as this machine lets it: its real code, with the stand-ins its own tests use where a GPU, a GPU
host or an upstream index would be needed (said per command)."""

from __future__ import annotations

import argparse
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from epstack.commands.common import commands
from epstack.commands.main import build_parser, main
from tests.bump.test_outdated import CLOSED, CUDA_IMAGES
from tests.conftest import PINS, REPO, pins_variant
from tests.doctor.hosts import HEALTHY_IB, build
from tests.python.localindex import use_index
from tests.smoke.test_serve import Smoke, free_port


def _guard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """This Python against the pins: drift (exit 1), but a report all the same."""
    return ["guard", "--pins", str(PINS), "--layer", "base"]


def _doctor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A fixture tree of a healthy InfiniBand host's /proc and /sys (tests/doctor/hosts.py)."""
    return ["doctor", "--pins", str(PINS), "--root", str(build(tmp_path / "root", HEALTHY_IB))]


def _pins_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return ["pins", "check", "--pins", str(PINS)]


def _pins_outdated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every upstream closed (exit 3), the report written all the same."""
    use_index(monkeypatch, f"http://{CLOSED}/simple", tmp_path / "uv-cache")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", f"url.http://{CLOSED}/.insteadOf")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "https://github.com/")
    return ["pins", "outdated", "--pins", str(pins_variant(tmp_path, **CUDA_IMAGES))]


def _jit_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The base layer's one toolchain, Triton's launcher, fails here (no Triton in the test venv)."""
    return ["jit", "probe", "--layer", "base"]


def _smoke_elastic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Two stub ranks and a stub preflight (tests/conftest.py's stub_cli), as the smoke's own tests."""
    return ["smoke", "elastic", "--gpus-per-node", "2", "--timeout", "20", "--run-dir", str(tmp_path / "run")]


# Each command with --json, and how it runs here; smoke serve runs in a process of its own (below).
IN_PROCESS: dict[str, Callable[[Path, pytest.MonkeyPatch], list[str]]] = {
    "guard": _guard,
    "doctor": _doctor,
    "pins check": _pins_check,
    "pins outdated": _pins_outdated,
    "jit probe": _jit_probe,
    "smoke elastic": _smoke_elastic,
}
SUBPROCESS = ("smoke serve",)


def _with_json() -> set[str]:
    return {
        path
        for path, parser in commands(build_parser())
        if any("--json" in action.option_strings for action in parser._actions)
        and not any(isinstance(action, argparse._SubParsersAction) for action in parser._actions)
    }


def test_every_command_with_json_is_run_here() -> None:
    """A new command with --json joins the contract by a line here (`image guard` is `guard`'s code)."""
    assert _with_json() - {"image guard"} == {*IN_PROCESS, *SUBPROCESS}


@pytest.mark.parametrize("command", sorted(IN_PROCESS))
def test_json_dash_puts_only_the_document_on_stdout(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    if command == "smoke elastic":
        request.getfixturevalue("stub_cli")
    monkeypatch.chdir(tmp_path)
    argv = IN_PROCESS[command](tmp_path, monkeypatch)
    code = main([*argv, "--json", "-"])
    out, err = capsys.readouterr()
    assert code in (0, 1, 3), err
    assert isinstance(json.loads(out), dict), f"stdout is not one JSON document:\n{out[:500]}"


def test_serve_smoke_json_dash_is_the_report_alone(tmp_path: Path) -> None:
    """The serve smoke against the stand-in SGLang server of its own tests, one server, no sweep."""
    (tmp_path / "model").mkdir()
    smoke = Smoke(work=tmp_path, port=free_port())
    argv = smoke.argv("--no-sweep", "--no-compare", "--json", "-")
    done = subprocess.run(
        argv, cwd=REPO, env=smoke.env("ok", None), capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["verdict"] == "pass"
    assert not smoke.report.exists()


@pytest.mark.parametrize(
    ("argv", "result"),
    [
        (["pins", "check", "--pins", str(PINS)], "ok (4 targets, default hopper-ib)"),
        (["pins", "get", "NCCL_VERSION", "--pins", str(PINS)], "2."),
    ],
)
def test_results_go_to_stdout_and_q_quiets_only_stderr(
    argv: list[str], result: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "-q"]) == 0
    out, err = capsys.readouterr()
    assert result in out and err == ""
