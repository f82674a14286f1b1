"""`epstack pins check|get|predict`: the pins file as users and scripts read it.

`pins get KEY...` is how the shell scripts (scripts/gpu, benchmarks) get a version: from the
validated pins, never from a constant of their own.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from epstack.commands.common import LOCKS, PINS, SubParsers, pins_path
from epstack.commands.lock import moves_table
from epstack.errors import BadInput
from epstack.layers import LAYER_NAMES
from epstack.pins.load import load_pins
from epstack.pins.model import Pins
from epstack.python.lock import stale_locks
from epstack.python.lockfile import locks_dir
from epstack.python.predict import predict, predict_locks
from epstack.suggest import did_you_mean


def cmd_pins_check(args: argparse.Namespace, console: Console) -> int:
    path = pins_path(args.pins)
    pins = load_pins(path)
    if args.json:
        print(json.dumps(pins.model_dump(by_alias=True), indent=2, sort_keys=True))
        return 0
    table = Table("target", "layer", "image")
    for target in pins.targets:
        for layer in LAYER_NAMES:
            table.add_row(escape(target), layer, escape(pins.image_ref(layer, target)))
    console.print(table)
    console.print(
        f"[green]{escape(str(path))}: ok[/] "
        f"({len(pins.targets)} targets, default {escape(pins.default_target)})"
    )
    for caveat in pins.caveats:
        console.print(f"[yellow]caveat:[/] {escape(caveat)}")
    return 0


def cmd_pins_get(args: argparse.Namespace, console: Console) -> int:
    """Each KEY's validated value on its own line (ARCH_<NAME> as written, comma-separated)."""
    path = pins_path(args.pins)
    values = {key: str(value) for key, value in load_pins(path).as_env().items()}
    for key in args.keys:
        if key not in values:
            raise BadInput(f"{key}: not a key of {path}; fix: {did_you_mean(key, values) or 'see README.md'}")
        print(values[key])
    return 0


def _print_locks(console: Console, pins: Pins, directory: Path) -> None:
    stale = stale_locks(pins, directory)
    if not stale:
        _print(console, f"{directory}: every lock is fresh for these pins; no build would move", "green")
        return
    for entry in stale:
        _print(console, str(entry), "yellow")
    run = predict_locks(pins, directory)
    if isinstance(run, str):
        _print(console, f"the locks cannot be resolved for these pins: {run}", "red")
    elif run.moves:
        console.print(
            moves_table(run.moves, f"against {escape(str(directory))}: what `epstack lock` would move")
        )
    else:
        _print(console, "resolved again, the stale locks keep every version", "green")


def _print(console: Console, text: str, style: str) -> None:
    console.print(f"[{style}]{escape(text)}[/]")


def cmd_pins_predict(args: argparse.Namespace, console: Console) -> int:
    path = pins_path(args.pins)
    pins = load_pins(path)
    prediction = predict(pins)
    console.print(
        f"uv would install {prediction.installs} distributions for {prediction.requested} "
        f"(Python {pins.image_target.python_version}, {pins.image_target.platform})"
    )
    for move in prediction.moves:
        _print(console, str(move), "red")
        _print(console, f"  required by: {', '.join(move.required_by)}", "dim")
    for provider in prediction.deep_ep:
        _print(
            console,
            f"deep_ep: {provider.package} {provider.resolved} would install its own deep_ep over the one "
            f"built from DEEPEP_REF {pins.deepep_ref[:7]} ({provider.reason})",
            "red",
        )
    if not prediction.drifts:
        _print(console, f"{path}: installing {prediction.requested} moves no pinned package", "green")
    _print_locks(console, pins, locks_dir(args.locks))
    return 1 if prediction.drifts else 0


def register(subparsers: SubParsers) -> None:
    """Add `pins check`, `pins get` and `pins predict` to the top-level subcommands."""
    pins = subparsers.add_parser("pins", help="check the pins file, read a pin, predict SGLang's moves")
    commands = pins.add_subparsers(dest="pins_command", required=True, metavar="SUBCOMMAND")
    check = commands.add_parser("check", parents=[PINS], help="validate pins.env and its compatibility rules")
    check.add_argument("--json", action="store_true", help="print the validated pins as JSON")
    check.set_defaults(func=cmd_pins_check)
    get = commands.add_parser("get", parents=[PINS], help="print validated pins, one per line (for scripts)")
    get.add_argument("keys", nargs="+", metavar="KEY", help="pins.env keys, e.g. NCCL_VERSION")
    get.set_defaults(func=cmd_pins_get)
    commands.add_parser(
        "predict", parents=[PINS, LOCKS], help="ask uv what installing SGLang would move (needs the index)"
    ).set_defaults(func=cmd_pins_predict)
