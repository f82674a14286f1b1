"""The `epstack` command line. Each command lives in its own module with `register(subparsers)`;
only the chosen command's module is imported (the images' entrypoint runs `epstack guard` at every
container start), and every command ends through epstack.commands.common.execute and its exit-code table."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

from epstack import __version__, cmd
from epstack.commands.common import execute as execute_command
from epstack.commands.common import parse
from epstack.commands.examples import document

LOG_WIDTH = 160

# Each top-level command and the module whose register(subparsers) adds it.
COMMANDS: dict[str, str] = {
    "pins": "epstack.commands.pins",
    "render": "epstack.commands.render",
    "build": "epstack.commands.build",
    "guard": "epstack.commands.guard",
    "jit": "epstack.commands.jit",
    "lock": "epstack.commands.lock",
    "sbom": "epstack.commands.sbom",
    "deepep": "epstack.commands.deepep",
    "nccl": "epstack.commands.nccl",
    "sources": "epstack.commands.sources",
    "doctor": "epstack.commands.doctor",
    "smoke": "epstack.commands.smoke",
    "cluster": "epstack.commands.cluster",
    "publish": "epstack.commands.publish",
    "codebuild": "epstack.commands.aws",
    "ecr": "epstack.commands.aws",
}


def chosen_command(argv: Sequence[str]) -> str | None:
    """The command word: the first argument that is not an option (the top level has no valued ones)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with `command`'s module registered; every module when `command` is None or unknown
    (`epstack --help`, a typo argparse then names)."""
    parser = argparse.ArgumentParser(
        prog="epstack", description="Pinned, layered, proven SGLang + DeepEP V2 images from one pins.env."
    )
    parser.add_argument("--version", action="version", version=f"epstack {__version__}")
    loudness = parser.add_mutually_exclusive_group()
    loudness.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="on stderr only errors and warnings: no results, no commands (stdout as it is)",
    )
    loudness.add_argument(
        "-v", "--verbose", action="store_true", help="print every command run, the quiet probes too"
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        importlib.import_module(name).register(subparsers)
    document(parser)
    return parser


def console_for_stderr(*, quiet: bool = False) -> Console:
    """Markup only where epstack writes it (user text goes through rich.markup.escape, or is printed
    with markup=False); no emoji codes, so a path with `:fire:` in it is printed as it is. Colour as
    rich decides it: none off a terminal or with NO_COLOR set. `quiet`: prints nothing (-q)."""
    # Logs (CI, docker build) are no terminal: give tables room instead of rich's 80 columns.
    width = None if sys.stderr.isatty() else LOG_WIDTH
    return Console(stderr=True, highlight=False, soft_wrap=True, width=width, emoji=False, quiet=quiet)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(build_parser(chosen_command(argv)), argv)
    if isinstance(args, int):
        return args
    cmd.verbosity = cmd.QUIET if args.quiet else cmd.VERBOSE if args.verbose else cmd.NORMAL
    console, errors = console_for_stderr(quiet=args.quiet), console_for_stderr()

    def report(kind: str, line: str) -> None:
        errors.print(Text.assemble((f"{kind}:", "red"), " ", line))

    return execute_command(lambda: int(args.func(args, console)), report)


if __name__ == "__main__":
    sys.exit(main())
