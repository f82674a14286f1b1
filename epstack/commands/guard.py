"""`epstack guard`: the table of every check, the JSON report, and the exit code."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from epstack.checkrow import Verdict
from epstack.commands.common import PINS, SubParsers, path_arg, pins_path
from epstack.guard.run import run_guard
from epstack.layers import GUARD_CHOICES
from epstack.output import check_writable, write_file

_STYLE: dict[Verdict, str] = {
    "ok": "green",
    "mismatch": "red",
    "missing": "red",
    "extra": "red",
    "fail": "red",
    "warn": "yellow",
    "skipped": "yellow",
    "override (pinned)": "cyan",
}


def cmd_guard(args: argparse.Namespace, console: Console) -> int:
    locks = args.locks or (Path(os.environ["EPSTACK_LOCKS"]) if os.environ.get("EPSTACK_LOCKS") else None)
    pins = pins_path(args.pins)
    if args.json:
        check_writable(args.json, what="the --json report", inputs=[pins, *([locks] if locks else [])])
    report = run_guard(pins, args.layer, locks)
    table = Table(
        "layer", "component", "expected", "found", "verdict", "detail", title=f"epstack guard {args.layer}"
    )
    for column in table.columns:
        column.overflow = "fold"
    for check in report.checks:
        style = _STYLE[check.verdict]
        table.add_row(
            check.layer,
            escape(check.component),
            escape(check.expected),
            escape(check.found),
            f"[{style}]{check.verdict}[/]",
            escape(check.detail),
        )
    console.print(table)
    if args.json:
        write_file(args.json, report.to_json(), what="the --json report")
    failed = sum(check.failed for check in report.checks)
    console.print(
        f"[green]guard: ok[/] ({len(report.checks)} checks)"
        if report.ok
        else f"[red]guard: {failed} of {len(report.checks)} checks failed[/]"
    )
    return 0 if report.ok else 1


def register(subparsers: SubParsers) -> None:
    """Add `guard` to the top-level subcommands."""
    guard = subparsers.add_parser(
        "guard", parents=[PINS], help="compare what is installed and loaded with pins.env"
    )
    guard.add_argument(
        "--layer",
        choices=GUARD_CHOICES,
        default="all",
        help="check this layer and those below it (default all)",
    )
    guard.add_argument(
        "--locks",
        type=path_arg,
        help="also check every distribution of this Python against the layer's locks in this folder "
        "(default $EPSTACK_LOCKS, set in the images; none: no such check)",
    )
    guard.add_argument("--json", type=path_arg, metavar="FILE", help="also write the report as JSON")
    guard.set_defaults(func=cmd_guard)
