"""`epstack guard`: the table of every check, the JSON report, and the exit code."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from epstack.checkrow import Verdict
from epstack.commands.common import PINS, SubParsers, path_arg, pins_path, results_console
from epstack.errors import BadInput
from epstack.guard.record import write_record
from epstack.guard.run import run_guard
from epstack.guard.start import PROVEN, Refused, Trusted, judge_start
from epstack.jit.compiles import epstack_python
from epstack.layers import GUARD_CHOICES
from epstack.output import STDOUT, check_writable, write_file

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
    if args.record and args.json in (None, STDOUT):
        raise BadInput(
            "--record needs --json: the record vouches for that report; fix: add --json FILE (not -)"
        )
    if args.json:
        check_writable(args.json, what="the --json report", inputs=[pins, *([locks] if locks else [])])
    out = results_console(console, document=args.json)
    judged = judge_start(pins, args.layer, locks, os.environ) if args.at_start else None
    if isinstance(judged, Refused):
        return _refused(judged, args.json, out)
    if isinstance(judged, str):
        console.print(f"guard: {escape(judged)}: full guard")
        if sys.flags.no_site:
            _full_guard_in_the_venv(pins, args.layer, locks, args.json)
    report = judged.report if isinstance(judged, Trusted) else run_guard(pins, args.layer, locks)
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
    out.print(table)
    if args.json:
        write_file(args.json, report.to_json(), what="the --json report")
    if args.record and report.ok:
        write_record(layer=args.layer, pins=pins, locks=locks, report=args.json, env=os.environ)
    failed = sum(check.failed for check in report.checks)
    counted = f"{len(report.checks)} checks"
    if isinstance(judged, Trusted):
        counted += (
            f": {judged.live} now, the others {PROVEN}, nothing that decides them changed; {_walked(judged)}"
        )
    out.print(
        f"[green]guard: ok[/] ({counted})" if report.ok else f"[red]guard: {failed} of {counted} failed[/]"
    )
    return 0 if report.ok else 1


def _walked(trusted: Trusted) -> str:
    """How much of the record's trees the start listed."""
    if trusted.listed < trusted.folders:
        listed = f"{trusted.listed:,} of {trusted.folders:,} folders listed"
        return f"{listed}, the others unpacked before the build's record"
    return f"all {trusted.folders:,} folders listed"


def _full_guard_in_the_venv(pins: Path, layer: str, locks: Path | None, json_to: Path | None) -> NoReturn:
    """The start's isolated interpreter (epstack-start: no site) has none of the venv's packages on its
    path: the full guard runs as `epstack guard` does, this process replaced by it."""
    argv = ["guard", "--pins", str(pins), "--layer", layer, *(["--locks", str(locks)] if locks else [])]
    argv += ["--json", str(json_to)] if json_to else []
    command = epstack_python("epstack.commands.main", "main")
    os.execv(command[0], [*command, *argv])


def _refused(refused: Refused, json_to: Path | None, out: Console) -> int:
    """A refused start: each variable and change on a line of its own (paths stay whole), the report."""
    out.print(f"[red]guard: refused[/]: {refused.summary()}")
    for line in refused.lines():
        out.print(f"  {escape(line)}")
    if json_to:
        write_file(json_to, refused.report.to_json(), what="the --json report")
    return 1


def _guard_parser(subparsers: SubParsers, help_text: str) -> argparse.ArgumentParser:
    guard = subparsers.add_parser("guard", parents=[PINS], help=help_text)
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
    guard.add_argument(
        "--json", type=path_arg, metavar="FILE", help="also write the report as JSON (- for stdout)"
    )
    guard.set_defaults(func=cmd_guard, record=False, at_start=False)
    return guard


def register(subparsers: SubParsers) -> None:
    """Add `guard` to the top-level subcommands."""
    _guard_parser(subparsers, "compare what is installed and loaded with pins.env")


def register_image(subparsers: SubParsers) -> None:
    """Add `guard --record|--at-start` to `epstack image`'s commands: the guard as an image build and
    the container's entrypoint run it."""
    guard = _guard_parser(
        subparsers, "the guard of an image build (--record) or a container start (--at-start)"
    )
    when = guard.add_mutually_exclusive_group(required=True)
    when.add_argument(
        "--record",
        action="store_true",
        help="an image build: once the guard passes, record what decided it (beside the reports) for "
        "--at-start",
    )
    when.add_argument(
        "--at-start",
        action="store_true",
        help="a container start: trust the build's record if nothing that decides it changed, and check "
        "only the driver and the JIT caches now; refuse where a file or a variable that changes what runs "
        "differs from the build's; else (no record, other pins) the full guard",
    )
