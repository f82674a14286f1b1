"""`epstack image nccl-check`: is this NCCL the pinned one? A source tree, a built library or the
libnccl torch loads (epstack.guard.nccl), against NCCL_VERSION of the pins (or --nccl-version).
scripts/gpu/install-nccl.sh calls it instead of reading versions in awk.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape

from epstack.commands.common import PINS, SubParsers, path_arg, pins_path, rename, results_console
from epstack.errors import BadInput
from epstack.guard.nccl import library_version, loaded_version, source_version
from epstack.pins.load import pin_values
from epstack.pins.values import exact_version


def cmd_nccl_check(args: argparse.Namespace, console: Console) -> int:
    if args.nccl_version is not None:
        try:
            expected = exact_version(args.nccl_version)
        except ValueError as exc:
            raise BadInput(f"--nccl-version {exc}") from None
    else:
        pinned = pin_values(pins_path(args.pins))
        if "NCCL_VERSION" not in pinned:
            raise BadInput(
                f"{pins_path(args.pins)}: no NCCL_VERSION; fix: pass pins.env or a layer pins file"
            )
        expected = pinned["NCCL_VERSION"]
    found: list[tuple[str, str]] = []
    if args.source:
        found.append((source_version(args.source), f"source {args.source}"))
    if args.library:
        found.append((library_version(args.library), f"library {args.library}"))
    if args.loaded:
        version, path = loaded_version(expected)
        found.append((version, f"loaded {path}"))
    if not found:
        raise BadInput("nothing to check; fix: pass --source TREE, --library LIB or --loaded")
    wrong = [(version, what) for version, what in found if version != expected]
    for version, what in found:
        mark = "[green]ok[/]" if version == expected else "[red]mismatch[/]"
        results_console(console).print(
            f"NCCL {escape(version)} ({escape(what)}), pinned {escape(expected)}: {mark}"
        )
    return 1 if wrong else 0


def register(subparsers: SubParsers) -> None:
    """Add `nccl-check` to `epstack image`'s commands."""
    check = subparsers.add_parser(
        "nccl-check",
        parents=[PINS],
        help="check an NCCL source tree or library against the pins: exit 0 when each is NCCL_VERSION",
    )
    check.add_argument(
        "--nccl-version", metavar="VERSION", help="expected NCCL version instead of the pins' NCCL_VERSION"
    )
    rename(check, "--nccl-version", "--version")
    check.add_argument("--source", type=path_arg, metavar="TREE", help="an NCCL source tree")
    check.add_argument("--library", type=path_arg, metavar="LIB", help="a built libnccl.so")
    check.add_argument("--loaded", action="store_true", help="the libnccl torch loads in this Python")
    check.set_defaults(func=cmd_nccl_check)
