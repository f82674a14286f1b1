"""`epstack image sources-verify`: check a `git archive` tarball against a commit (epstack.image.sources)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape

from epstack.commands.common import SubParsers, path_arg, results_console
from epstack.image.sources import verify


def cmd_sources_verify(args: argparse.Namespace, console: Console) -> int:
    verify(args.archive, args.commit)
    results_console(console).print(f"{escape(str(args.archive))}: commit {args.commit}")
    return 0


def register(subparsers: SubParsers) -> None:
    """Add `sources-verify` to `epstack image`'s commands."""
    verify_parser = subparsers.add_parser(
        "sources-verify", help="verify a `git archive` tarball of the deepep layer whole, and its commit"
    )
    verify_parser.add_argument("archive", type=path_arg, help="a `git archive` tarball (.tar.gz)")
    verify_parser.add_argument("commit", help="the 40-hex commit it must hold")
    verify_parser.set_defaults(func=cmd_sources_verify)
