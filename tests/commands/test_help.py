"""Every command's --help has an example that parses, every option and argument has help, and the
smoke's --help is written for its user, not its maintainer."""

from __future__ import annotations

import argparse
import shlex

import pytest

from epstack.commands.common import commands, parse
from epstack.commands.examples import EXAMPLES
from epstack.commands.main import build_parser

PARSERS = dict(commands(build_parser()))
LEAVES = [path for path, p in PARSERS.items() if not p._subparsers]
QUIET = (argparse._HelpAction, argparse._SubParsersAction, argparse._VersionAction)


@pytest.mark.parametrize("path", list(PARSERS))
def test_every_command_has_an_example(path: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Its own, or for a group (`epstack cluster`) one of each of its commands."""
    assert parse(build_parser(path.split(" ", maxsplit=1)[0] or None), [*path.split(), "--help"]) == 0
    assert "\nexamples:\n  epstack " in capsys.readouterr().out


def test_every_command_but_a_group_has_its_own_example() -> None:
    assert set(EXAMPLES) == {"", *LEAVES}


@pytest.mark.parametrize(
    "line",
    [line for path, text in EXAMPLES.items() if path for line in text.splitlines()],
)
def test_every_example_parses(line: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Each example as the shell would pass it (a pipe or redirection cut off)."""
    words = shlex.split(line.split(" | ", maxsplit=1)[0].split(" > ", maxsplit=1)[0])
    assert isinstance(parse(build_parser(words[1]), words[1:]), argparse.Namespace), capsys.readouterr().err


def test_every_option_and_argument_has_help() -> None:
    missing = [
        f"{path or 'epstack'}: {action.option_strings or action.dest}"
        for path, parser in PARSERS.items()
        for action in parser._actions
        if not isinstance(action, QUIET) and not (action.help or "").strip()
    ]
    assert missing == []


def test_a_default_is_shown_after_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse(build_parser("smoke"), ["smoke", "elastic", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--seed SEED the random seed of the top-k choices (default: 0)" in out


def test_the_smoke_help_is_for_its_user(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse(build_parser("smoke"), ["smoke", "elastic", "--help"]) == 0
    out = capsys.readouterr().out
    assert "register(subparsers)" not in out and "`epstack smoke elastic`" not in out
