"""The command-line reference page, written from the argparse parsers themselves (never by hand):
`python -m epstack.commands.clireference docs/reference/cli.md`; tests/test_docs.py fails when the
committed page and the parsers differ."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

from epstack.cli import build_parser

WIDTH = 100  # usage lines wrapped here, whatever the terminal
HEADER = (
    "# Command-line reference\n\n"
    "Written from the parsers by `make reference` (`python -m epstack.commands.clireference`); a test\n"
    "fails when this page and the code differ. `epstack COMMAND --help` prints the same.\n"
)


def _commands(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _commands(child, f"{path} {name}")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _option(action: argparse.Action) -> str:
    names = ", ".join(f"`{name}`" for name in action.option_strings) or f"`{action.metavar or action.dest}`"
    values = f" {{{', '.join(map(str, action.choices))}}}" if action.choices else ""
    default = action.default
    shown = (
        f" (default `{default}`)"
        if isinstance(default, str | int | float) and not isinstance(default, bool) and default != ""
        else ""
    )
    help_text = action.help if action.help and action.help != argparse.SUPPRESS else ""
    if "%(" in help_text:  # argparse's own expansion: %(default)s, %(choices)s
        help_text = help_text % vars(action)
    return f"| {names}{_cell(values)} | {_cell(help_text)}{shown} |"


def page() -> str:
    """The whole page: each command and subcommand, its usage, description and options."""
    parts = [HEADER]
    for path, parser in _commands(build_parser(), "epstack"):
        parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=WIDTH)
        usage = parser.format_usage().removeprefix("usage: ").strip()
        options = [
            _option(a)
            for a in parser._actions
            if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction | argparse._VersionAction)
        ]
        parts.append(f"\n## {path}\n\n```\n{usage}\n```\n")
        if parser.description:
            parts.append(f"\n{parser.description.strip()}\n")
        if options:
            parts.append("\n| option | meaning |\n| --- | --- |\n" + "\n".join(options) + "\n")
    return "".join(parts)


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(page())
