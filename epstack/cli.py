"""The `epstack` command line. main(argv) is the only place errors become exit codes."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from epstack import __version__, deepep, doctor, guard, lock, predict, publish, sbom, sources
from epstack.aws import cli as aws_cli
from epstack.build import build_target, export_sboms, write_build_report
from epstack.cluster import cli as cluster_cli
from epstack.engine import DockerEngine
from epstack.errors import BadInput, EpstackError
from epstack.pins import LAYERS, load_pins, pins_path
from epstack.render import output_directory, plan_render, source_date, source_revision, write_plan
from epstack.smoke import cli as smoke_cli

DEFAULT_OUT = "build/render"
LOG_WIDTH = 160


def cmd_pins_check(args: argparse.Namespace, console: Console) -> int:
    pins = load_pins(pins_path(args.pins))
    if args.json:
        print(json.dumps(pins.model_dump(by_alias=True), indent=2, sort_keys=True))
        return 0
    table = Table("target", "layer", "image")
    for target in pins.targets:
        for layer in LAYERS:
            table.add_row(target, layer, pins.image_ref(layer, target))
    console.print(table)
    console.print(
        f"[green]{escape(str(pins_path(args.pins)))}: ok[/] "
        f"({len(pins.targets)} targets, default {pins.default_target})"
    )
    for caveat in pins.caveats:
        console.print(f"[yellow]caveat:[/] {escape(caveat)}")
    return 0


def cmd_render(args: argparse.Namespace, console: Console) -> int:
    path = pins_path(args.pins)
    out = output_directory(args.out, path, sources=args.sources)
    pins = load_pins(path)
    plan = plan_render(
        pins, created=source_date(), revision=source_revision(), sources=args.sources, locks=args.locks
    )
    write_plan(plan, out)
    console.print(f"rendered {len(plan.files)} files for {len(pins.targets)} targets into {escape(str(out))}")
    for stale in plan.stale_locks:
        console.print(f"[yellow]{escape(stale)}[/]: `epstack build` refuses it; fix: epstack lock")
    return 0


def cmd_build(args: argparse.Namespace, console: Console) -> int:
    path = pins_path(args.pins)
    out = output_directory(args.out, path, sources=args.sources)
    pins = load_pins(path)
    target = args.target or pins.default_target
    if target not in pins.targets:
        raise BadInput(f"{target}: not a target of {path}; fix: use one of {', '.join(pins.targets)}")
    plan = plan_render(
        pins, created=source_date(), revision=source_revision(), sources=args.sources, locks=args.locks
    )
    if plan.stale_locks:
        raise BadInput(
            f"{'; '.join(plan.stale_locks)}: an image would install other versions than {path} pins; "
            "fix: epstack lock (then commit locks/)"
        )
    write_plan(plan, out)
    console.print(f"rendered into {escape(str(out))}; building {target}")
    engine = DockerEngine.find()
    report = build_target(
        pins=pins,
        plan=plan,
        context=out,
        target=target,
        engine=engine,
        console=console,
        cache_registry=args.cache_registry or "",
    )
    if args.report:
        export_sboms(engine, report, args.report.parent / "sbom")
        write_build_report(args.report, report)
    table = Table("image", "layer", "result", title=f"epstack build {target}")
    table.columns[0].overflow = "fold"
    for image in report.built:
        size = f"{image.size / 1e9:.2f} GB"
        table.add_row(escape(image.ref), image.layer, f"[green]built[/] in {image.seconds:.0f} s, {size}")
    for ref, why in report.not_built.items():
        table.add_row(escape(ref), "", f"[yellow]not built[/]: {escape(why)}")
    console.print(table)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="epstack", description="Pinned, layered, proven SGLang + DeepEP V2 images from one pins.env."
    )
    parser.add_argument("--version", action="version", version=f"epstack {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    pins = commands.add_parser("pins", help="check the pins file").add_subparsers(
        dest="pins_command", required=True, metavar="SUBCOMMAND"
    )
    check = pins.add_parser("check", help="validate pins.env and its compatibility rules")
    check.add_argument("pins", nargs="?", type=Path, help="pins file (default $EPSTACK_PINS or ./pins.env)")
    check.add_argument("--json", action="store_true", help="print the validated pins as JSON")
    check.set_defaults(func=cmd_pins_check)
    predict.register(pins)

    render = commands.add_parser("render", help="render Dockerfiles, bake file and tags for every target")
    render.add_argument("--pins", type=Path, help="pins file (default $EPSTACK_PINS or ./pins.env)")
    render.add_argument(
        "--out", default=DEFAULT_OUT, help=f"output directory, new or made by epstack (default {DEFAULT_OUT})"
    )
    render.add_argument("--sources", type=Path, help="folder of `git archive` tarballs and installers")
    render.add_argument("--locks", type=Path, help="lock folder (default $EPSTACK_LOCKS or ./locks)")
    render.set_defaults(func=cmd_render)

    build = commands.add_parser("build", help="render, then build a target layer by layer")
    build.add_argument("target", nargs="?", help="target such as hopper-efa (default DEFAULT_TARGET)")
    build.add_argument("--pins", type=Path, help="pins file (default $EPSTACK_PINS or ./pins.env)")
    build.add_argument(
        "--out", default=DEFAULT_OUT, help=f"render directory, new or made by epstack (default {DEFAULT_OUT})"
    )
    build.add_argument("--sources", type=Path, help="folder of `git archive` tarballs and installers")
    build.add_argument("--locks", type=Path, help="lock folder (default $EPSTACK_LOCKS or ./locks)")
    build.add_argument(
        "--cache-registry", metavar="HOST[/NS]", help="BuildKit registry cache there (buildx; ECR-compatible)"
    )
    build.add_argument(
        "--report",
        type=Path,
        metavar="FILE",
        help="write what was built as JSON (for epstack publish push), each image's SBOM in sbom/ beside it",
    )
    build.set_defaults(func=cmd_build)

    guard.register(commands)
    lock.register(commands)
    sbom.register(commands)
    deepep.register(commands)
    sources.register(commands)
    doctor.register(commands)
    smoke_cli.register(commands)
    cluster_cli.register(commands)
    publish.register(commands)
    aws_cli.register(commands)
    return parser


INTERRUPTED = 130


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM unwinds like Ctrl-C, so outputs are cleaned up the same way."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Logs (CI, docker build) are no terminal: give tables room instead of rich's 80 columns.
    width = None if sys.stderr.isatty() else LOG_WIDTH
    console = Console(stderr=True, highlight=False, soft_wrap=True, width=width)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        code: int = args.func(args, console)
    except EpstackError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        return exc.exit_code
    except KeyboardInterrupt:
        console.print("[red]interrupted[/]: nothing was left half-written")
        return INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
    return code


if __name__ == "__main__":
    sys.exit(main())
