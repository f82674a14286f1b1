"""The reference pages written from the code itself (never by hand): the command line from the argparse
parsers (cli.md), every option name and its one meaning (options.md, from epstack.commands.meanings),
the exit codes (exit-codes.md, from epstack.errors), and the README's commands table. `python -m
epstack.commands.clireference docs/reference README.md` writes them (`make reference`);
tests/test_docs.py fails when a committed page or the table differs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from epstack.commands.common import GLOBAL_FLAGS, FileOrBare, commands
from epstack.commands.main import MOVED, build_parser
from epstack.commands.meanings import MEANINGS
from epstack.errors import EXIT_CODES

WIDTH = 100  # usage lines wrapped here, whatever the terminal
HEADER = (
    "# Command-line reference\n\n"
    "Written from the parsers by `make reference` (`python -m epstack.commands.clireference`); a test\n"
    "fails when this page and the code differ. `epstack COMMAND --help` prints the same.\n\n"
    "Anywhere on the line: `-q` (on stderr only errors and warnings) or `-v` (every command run, the\n"
    "quiet probes too). Results go to stdout, logs and progress to stderr; `--json -` puts the JSON\n"
    "document alone on stdout. Options are spelt whole (no abbreviations); a mistyped one is one line\n"
    "with the near miss, exit 2. `NO_COLOR=1` turns colour off. Each option name has one meaning in\n"
    "every command: [Option names](options.md). Shell completion: `epstack completion bash|zsh|fish`.\n"
)


_NOT_OPTIONS = (argparse._HelpAction, argparse._SubParsersAction)


def _global(action: argparse.Action, path: str) -> bool:
    """-q/-v as every command has them: told once at the top, not in each command's table."""
    return bool(path) and bool(set(action.option_strings) & set(GLOBAL_FLAGS))


def uses() -> Iterator[tuple[str, argparse.Action]]:
    """Each command (`epstack cluster render`) with each of its options, --help and the global flags
    (but at the top) left out."""
    for path, parser in commands(build_parser()):
        for action in parser._actions:
            if action.option_strings and not isinstance(action, _NOT_OPTIONS) and not _global(action, path):
                yield f"epstack {path}".rstrip(), action


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
    """cli.md: each command and subcommand, its usage, description, options and examples."""
    parts = [HEADER]
    for words, parser in commands(build_parser()):
        path = f"epstack {words}".rstrip()
        parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=WIDTH)
        usage = parser.format_usage().removeprefix("usage: ").strip()
        options = [
            _option(a)
            for a in parser._actions
            if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction | argparse._VersionAction)
            and not _global(a, words)
        ]
        parts.append(f"\n## {path}\n\n```\n{usage}\n```\n")
        if parser.description:
            parts.append(f"\n{parser.description.strip()}\n")
        if options:
            parts.append("\n| option | meaning |\n| --- | --- |\n" + "\n".join(options) + "\n")
        if parser.epilog:
            parts.append(f"\n```\n{parser.epilog}\n```\n")
    return "".join(parts)


OPTIONS_HEADER = (
    "# Option names\n\n"
    "Every option name means one thing in every command that has it. Written by `make reference` from\n"
    "`epstack/commands/meanings.py`, which a test checks every parser against.\n\n"
    "| option | meaning | commands |\n| --- | --- | --- |\n"
)
RENAMED_HEADER = (
    "\n## Renamed options\n\n"
    "An old name still works for one release and warns on stderr naming the new one.\n\n"
    "| old | new | commands |\n| --- | --- | --- |\n"
)


MOVED_HEADER = (
    "\n## Moved commands\n\n"
    "The commands an image's build and start run are under `epstack image`; an old path still works for\n"
    "one release and warns on stderr naming the new one.\n\n"
    "| old | new |\n| --- | --- |\n"
)


def options_page() -> str:
    """options.md: each option name (with its short form), its meaning and the commands that have it;
    then the renamed ones."""
    commands: dict[str, set[str]] = {}
    names: dict[str, str] = {}  # long name -> how the table writes it, `-q`, `--quiet`
    renamed: dict[tuple[str, str], list[str]] = {}
    for path, action in uses():
        long = next((n for n in action.option_strings if n.startswith("--")), action.option_strings[0])
        names[long] = ", ".join(f"`{name}`" for name in action.option_strings)
        commands.setdefault(long, set()).add(path.removeprefix("epstack ") or "epstack")
        olds = getattr(action, "renamed", {}) | (
            {f"{long} (no FILE)": f"{long} -"} if isinstance(action, FileOrBare) else {}
        )
        for old, new in olds.items():
            renamed.setdefault((old, new), []).append(path.removeprefix("epstack "))
    rows = [
        f"| {names[name]} | {_cell(MEANINGS[name].text)} | {', '.join(sorted(commands[name]))} |"
        for name in sorted(commands)
        if name in MEANINGS
    ]
    old = [f"| `{o}` | `{n}` | {', '.join(sorted(paths))} |" for (o, n), paths in sorted(renamed.items())]
    moved = [f"| `epstack {' '.join(o)}` | `epstack {' '.join(n)}` |" for o, n in MOVED.items()]
    moved.append("| `epstack guard --record\\|--at-start` | `epstack image guard --record\\|--at-start` |")
    return (
        OPTIONS_HEADER
        + "\n".join(rows)
        + "\n"
        + RENAMED_HEADER
        + "\n".join(old)
        + "\n"
        + MOVED_HEADER
        + "\n".join(moved)
        + "\n"
    )


EXIT_CODES_HEADER = (
    "# Exit codes\n\n"
    "Every command (`epstack ...`, `python -m epstack.smoke`, `python3 -m epstack.doctor`) ends with one\n"
    "of these; errors are one line each (`error: ...`, with the fix), never a traceback. Written by\n"
    "`make reference` from `epstack/errors.py`.\n\n"
    "| code | meaning |\n| --- | --- |\n"
)
EXIT_CODES_NOTES = """
## Bad input

Exit 2 comes before any work: a pins file that does not validate; flags out of range (NaN or negative
timeouts, zero counts, ports out of range); paths epstack may not write (`--out` that epstack may not
replace, `--json` that is a directory, an output that is a file the command reads, through a link or a
hard link too; a `--run-dir` holding smoke-named files the smoke did not write); environment variables
(`EPSTACK_PINS`, `SOURCE_DATE_EPOCH`, launcher variables); a JSON document epstack reads back (deep_ep
manifest, build report, build manifest, guard report, smoke rank result: each carries a `schema` such
as `build-report/1`) that is not JSON, has no schema or another version, or lacks a field.

What the user gave (paths, values) is printed as it is: no rich markup (`[/x]`) and no emoji code
(`:fire:`) in it is interpreted.
"""


def exit_codes_page() -> str:
    """exit-codes.md: epstack.errors' table."""
    rows = [f"| {code} | {_cell(meaning)} |" for code, meaning in EXIT_CODES.items()]
    return EXIT_CODES_HEADER + "\n".join(rows) + "\n" + EXIT_CODES_NOTES


# Each top-level command's guide under docs/ (the README's table links it).
GUIDES: dict[str, str] = {
    "pins": "guides/pin-guards.md",
    "render": "guides/images.md",
    "build": "guides/images.md",
    "guard": "guides/pin-guards.md",
    "smoke": "guides/smoke.md",
    "cluster": "guides/clusters.md",
    "doctor": "guides/doctor.md",
    "publish": "guides/codebuild.md",
    "codebuild": "guides/codebuild.md",
    "jit": "guides/jit-caches.md",
    "image": "guides/images.md",
    "completion": "reference/cli.md",
}
README_BEGIN = "<!-- commands: written from the parser by `make reference`; a test compares -->"
README_END = "<!-- end of commands -->"


def commands_table() -> str:
    """The README's table: each top-level command as `epstack --help` lists it, its subcommands, its
    help and its guide."""
    top = build_parser()
    (subparsers,) = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    rows = ["| command | what it does | docs |", "| --- | --- | --- |"]
    for listed in subparsers._choices_actions:
        name, parser = listed.dest, subparsers.choices[listed.dest]
        groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        under = [c.dest for group in groups for c in group._choices_actions]
        words = f"epstack {name} {'|'.join(under)}".strip() if under else f"epstack {name}"
        guide = GUIDES[name]
        rows.append(f"| `{_cell(words)}` | {_cell(listed.help or '')} | [{Path(guide).stem}](docs/{guide}) |")
    return "\n".join(rows) + "\n"


def readme(text: str) -> str:
    """`text` (the README) with the commands table between its markers written anew."""
    head, begin, rest = text.partition(README_BEGIN)
    _, end, tail = rest.partition(README_END)
    if not (begin and end):
        raise ValueError(f"README.md: no {README_BEGIN} ... {README_END} block")
    return f"{head}{README_BEGIN}\n{commands_table()}{README_END}{tail}"


# Each page under docs/reference/ and what writes it.
PAGES: dict[str, Callable[[], str]] = {
    "cli.md": page,
    "options.md": options_page,
    "exit-codes.md": exit_codes_page,
}


if __name__ == "__main__":
    for name, write in PAGES.items():
        (Path(sys.argv[1]) / name).write_text(write())
    if len(sys.argv) > 2:  # the README whose commands table to write
        path = Path(sys.argv[2])
        path.write_text(readme(path.read_text()))
