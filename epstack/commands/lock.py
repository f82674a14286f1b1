"""`epstack pins lock`: resolve each layer's Python closure into locks/ (epstack.python.lock), or `--check`
that every lock is fresh for the pins and holds what they say (a hand-edited lock is stale)."""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from epstack.commands.common import LOCKS, PINS, SubParsers, pins_path, results_console, working
from epstack.pins.load import load_pins
from epstack.python.lock import Move, relock, stale_locks, upgrade_name, write_locks
from epstack.python.lockfile import lock_path, locks_dir


def moves_table(moves: list[Move], title: str) -> Table:
    """What moved, lock by lock (also `pins predict`'s)."""
    table = Table("lock", "package", "before", "after", title=title)
    for move in moves:
        table.add_row(
            escape(move.lock),
            escape(move.package),
            escape(move.before) or "[green](added)[/]",
            escape(move.after) or "[red](removed)[/]",
        )
    return table


def cmd_lock(args: argparse.Namespace, console: Console) -> int:
    path = pins_path(args.pins)
    directory = locks_dir(args.locks)
    pins = load_pins(path)
    out = results_console(console)  # what is stale, what was written and what moved
    if args.check:
        stale = stale_locks(pins, directory)
        for entry in stale:
            out.print(f"[red]{escape(str(entry))}[/]")
        if stale:
            out.print(f"fix: epstack pins lock --pins {escape(str(path))} --locks {escape(str(directory))}")
            return 1
        out.print(f"[green]{escape(str(directory))}: every lock is fresh for {escape(str(path))}[/]")
        return 0
    start = time.monotonic()
    with working(console, f"lock: resolving the stale locks in {directory} with uv"):
        run = relock(pins, directory, upgrade=args.upgrade, pins_path=path)
    written = write_locks(run, directory)
    for name in run.kept:
        out.print(f"{escape(str(lock_path(directory, name)))}: fresh, kept")
    for written_path, (name, lock) in zip(written, run.locks.items(), strict=True):
        out.print(
            f"{escape(str(written_path))}: {len(lock.resolution.packages)} distributions "
            f"in {run.seconds[name]:.1f} s"
        )
    if run.torch_nccl and run.torch_nccl.version != pins.nccl_version:
        console.print(
            f"{escape(pins.wheels.nccl)} {escape(pins.nccl_version)} over the "
            f"{escape(run.torch_nccl.version)} torch {escape(pins.torch_version)} requires: the base lock's "
            "override (same NCCL major, not below torch's; the guard checks the libnccl loaded)"
        )
    if args.upgrade:
        moved = upgrade_name(args.upgrade)
        others = {m.package for m in run.moves if m.package != moved}  # in any lock, counted once
        title = f"--upgrade {args.upgrade}: {len(others)} other distributions move with it"
        out.print(moves_table(run.moves, escape(title)))
    elif run.moves:
        out.print(moves_table(run.moves, "what moved"))
    out.print(f"lock: {len(written)} written, {len(run.kept)} kept, {time.monotonic() - start:.1f} s")
    return 0


def register(subparsers: SubParsers) -> None:
    """Add `lock` to `epstack pins`' commands."""
    parser = subparsers.add_parser(
        "lock",
        parents=[PINS, LOCKS],
        help="resolve each layer's Python closure into locks/ with hashes (needs the index)",
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument(
        "--check",
        action="store_true",
        help="exit 1 naming every stale or hand-edited lock (and the line); resolves nothing (offline)",
    )
    action.add_argument(
        "--upgrade",
        metavar="PACKAGE[==VERSION]",
        help="move one locked package and print everything that moves with it",
    )
    parser.set_defaults(func=cmd_lock)
