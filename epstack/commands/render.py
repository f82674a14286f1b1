"""`epstack render`: the build context of every target, from the pins and the locks (epstack.image.render)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape

from epstack.commands.common import LOCKS, PINS, SubParsers, path_arg, pins_path, rename
from epstack.image.render import output_directory, plan_checkout, write_plan
from epstack.pins.load import load_pins

DEFAULT_OUT = "build/render"


def cmd_render(args: argparse.Namespace, console: Console) -> int:
    path = pins_path(args.pins)
    out = output_directory(args.out, path, sources=args.sources, locks=args.locks)
    pins = load_pins(path)
    plan = plan_checkout(pins, path, sources=args.sources, locks=args.locks)
    write_plan(plan, out)
    console.print(f"rendered {len(plan.files)} files for {len(pins.targets)} targets into {escape(str(out))}")
    for stale in plan.stale_locks:
        console.print(f"[yellow]{escape(stale)}[/]: `epstack build` refuses it; fix: epstack pins lock")
    return 0


def add_render_arguments(parser: argparse.ArgumentParser) -> None:
    """--out-dir and --sources, shared by render and build (build renders first)."""
    parser.add_argument(
        "--out-dir",
        dest="out",
        metavar="DIR",
        default=DEFAULT_OUT,
        help=f"output directory, new or made by epstack (default {DEFAULT_OUT})",
    )
    rename(parser, "--out-dir", "--out")
    parser.add_argument("--sources", type=path_arg, help="folder of `git archive` tarballs and installers")


def register(subparsers: SubParsers) -> None:
    """Add `render` to the top-level subcommands."""
    render = subparsers.add_parser(
        "render", parents=[PINS, LOCKS], help="render Dockerfiles, bake file and tags for every target"
    )
    add_render_arguments(render)
    render.set_defaults(func=cmd_render)
