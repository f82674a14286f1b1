"""`epstack completion bash|zsh|fish`: a shell completion script written by shtab from epstack's own
parser, so every command and option (and each option's fixed choices) completes as --help lists it."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from epstack.commands.common import SubParsers

SHELLS = ("bash", "zsh", "fish")


def cmd_completion(args: argparse.Namespace, console: Console) -> int:
    import shtab  # noqa: PLC0415 (only this command needs it)

    from epstack.commands.main import build_parser  # noqa: PLC0415 (the whole tree, built on demand)

    sys.stdout.write(shtab.complete(build_parser(), shell=args.shell))
    return 0


def register(subparsers: SubParsers) -> None:
    """Add `completion` to the top-level subcommands."""
    parser = subparsers.add_parser(
        "completion",
        help="print a shell completion script for bash, zsh or fish",
        description="Print the completion script of SHELL on stdout; install it where the shell "
        "loads completions from (see the examples).",
    )
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    parser.set_defaults(func=cmd_completion)
