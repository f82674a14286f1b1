"""`epstack build`: render, then build a target layer by layer (epstack.image.build)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from epstack.commands.common import (
    LOCKS,
    PINS,
    SubParsers,
    non_negative_int,
    path_arg,
    pins_path,
    results_console,
)
from epstack.commands.render import add_render_arguments
from epstack.errors import BadInput
from epstack.image.build import COLD_BUILD_GB, build_target, ensure_disk, export_sboms, write_build_report
from epstack.image.engine import DockerEngine
from epstack.image.render import output_directory, plan_checkout, write_plan
from epstack.layers import ALL_ENGINES, ENGINES, TOP, engine_layers
from epstack.output import check_writable
from epstack.pins.load import load_pins
from epstack.python.lockfile import locks_dir


def cmd_build(args: argparse.Namespace, console: Console) -> int:
    path = pins_path(args.pins)
    out = output_directory(args.out, path, sources=args.sources, locks=args.locks)
    if args.report:
        sources = [args.sources] if args.sources else []
        reads = [path, locks_dir(args.locks), *sources, out]  # out: the build context
        check_writable(args.report, what="the build report", inputs=reads)
    pins = load_pins(path)
    target = pins.target(args.target, path)
    plan = plan_checkout(pins, path, sources=args.sources, locks=args.locks)
    if plan.stale_locks:
        raise BadInput(
            f"{'; '.join(plan.stale_locks)}: an image would install other versions than {path} pins; "
            "fix: epstack pins lock (then commit locks/)"
        )
    write_plan(plan, out)
    console.print(f"rendered into {escape(str(out))}; building {escape(target)} ({escape(args.engine)})")
    engine = DockerEngine.find()
    ensure_disk(engine, args.min_free_gb)
    report = build_target(
        pins=pins,
        plan=plan,
        context=out,
        target=target,
        engine=engine,
        console=console,
        cache_registry=args.cache_registry or "",
        layers=engine_layers(args.engine),
    )
    if args.report:
        export_sboms(engine, report, args.report.parent / "sbom")
        write_build_report(args.report, report)
    table = Table("image", "layer", "result", title=f"epstack build {escape(target)}")
    table.columns[0].overflow = "fold"
    for image in report.built:
        size = f"{image.size / 1e9:.2f} GB"
        table.add_row(escape(image.ref), image.layer, f"[green]built[/] in {image.seconds:.0f} s, {size}")
    for ref, why in report.not_built.items():
        table.add_row(escape(ref), "", f"[yellow]not built[/]: {escape(why)}")
    results_console(console).print(table)
    return 0


def register(subparsers: SubParsers) -> None:
    """Add `build` to the top-level subcommands."""
    build = subparsers.add_parser(
        "build", parents=[PINS, LOCKS], help="render, then build a target layer by layer"
    )
    build.add_argument("target", nargs="?", help="target such as hopper-efa (default DEFAULT_TARGET)")
    build.add_argument(
        "--engine",
        choices=(*ENGINES, ALL_ENGINES),
        default=TOP.name,
        help=f"the serving engine's image and every layer below it (default {TOP.name}; all: every engine's)",
    )
    add_render_arguments(build)
    build.add_argument(
        "--cache-registry", metavar="HOST[/NS]", help="BuildKit registry cache there (buildx; ECR-compatible)"
    )
    build.add_argument(
        "--report",
        type=path_arg,
        metavar="FILE",
        help="write what was built as JSON (for epstack publish push), each image's SBOM in sbom/ beside it",
    )
    build.add_argument(
        "--min-free-gb",
        type=non_negative_int,
        default=COLD_BUILD_GB,
        metavar="GB",
        help="refuse to start with less free space in Docker's data root (default: %(default)s; 0: no check)",
    )
    build.set_defaults(func=cmd_build)
