"""One command-line convention: every command registers the same way, --pins is declared once, the
chosen command's module is the only one imported, and the smoke's entry point is epstack's."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from epstack.commands.common import PINS, path_arg
from epstack.commands.main import COMMANDS, build_parser
from tests.conftest import REPO


def subparsers_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def every_parser(
    parser: argparse.ArgumentParser, path: str = "epstack"
) -> dict[str, argparse.ArgumentParser]:
    found = {path: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found |= every_parser(child, f"{path} {name}")
    return found


@pytest.mark.parametrize("module", sorted(set(COMMANDS.values())))
def test_each_module_registers_exactly_its_commands(module: str) -> None:
    parser = argparse.ArgumentParser()
    importlib.import_module(module).register(parser.add_subparsers())
    assert set(subparsers_of(parser)) == {name for name, owner in COMMANDS.items() if owner == module}


def test_pins_is_declared_once() -> None:
    (declared,) = [a for a in PINS._actions if "--pins" in a.option_strings]
    pins_options = [
        (path, action)
        for path, parser in every_parser(build_parser()).items()
        for action in parser._actions
        if "--pins" in action.option_strings
    ]
    assert len(pins_options) >= 15
    for path, action in pins_options:
        assert (action.type, action.help, action.default) == (path_arg, declared.help, None), path


IMPORTED = """
import sys
from epstack.commands.main import main
code = main(sys.argv[1:])
heavy = ("jsonschema", "ruamel", "jinja2", "boto3", "epstack.aws", "epstack.cluster", "epstack.smoke",
         "epstack.image.render")
print(sorted({m.split(".")[0] if not m.startswith("epstack") else ".".join(m.split(".")[:2])
              for m in sys.modules if m.startswith(heavy)}))
"""


@pytest.mark.parametrize("argv", [["guard"], ["image", "guard"], ["image", "jit-install"]])
def test_the_guard_imports_no_other_subsystem(argv: list[str]) -> None:
    """The container entrypoint runs `epstack image guard --at-start` and `epstack image jit-install`
    at every start: `epstack image` imports only the chosen command's module."""
    result = subprocess.run(
        [sys.executable, "-c", IMPORTED, *argv, "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_python_m_epstack_smoke_is_epstack_smoke() -> None:
    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, check=False)

    ours, theirs = (
        run("-m", "epstack", "smoke", "elastic", "--help"),
        run("-m", "epstack.smoke", "elastic", "--help"),
    )
    assert ours.returncode == theirs.returncode == 0 and ours.stdout == theirs.stdout
    ours, theirs = (
        run("-m", "epstack", "smoke", "elastic", "--iters", "0"),
        run("-m", "epstack.smoke", "elastic", "--iters", "0"),
    )
    assert ours.returncode == theirs.returncode == 2 and ours.stderr == theirs.stderr
