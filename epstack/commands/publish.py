"""`epstack publish push|pull`: guarded images to a registry and back, by digest (epstack.aws.publish)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from epstack.aws.publish import publish, pull
from epstack.commands.aws import register_ecr
from epstack.commands.common import PINS, SubParsers, path_arg, pins_path, rename, results_console
from epstack.image.engine import DockerEngine
from epstack.layers import LAYER_NAMES, TOP
from epstack.output import check_writable
from epstack.pins.load import load_pins

DEFAULT_OUT = Path("build/codebuild")
PUSHED = ("build-manifest.json", "guard-junit.xml", "image.env")  # what `push` writes into --out-dir
PULLED = "image.env"  # what `pull` writes into --out-dir


def _check_outputs(out: Path, names: tuple[str, ...], inputs: list[Path]) -> None:
    """Before any work: none of the files written into --out-dir is a file the command reads."""
    for name in names:
        check_writable(out / name, what=f"--out's {name}", inputs=inputs)


def cmd_publish(args: argparse.Namespace, console: Console) -> int:
    path = pins_path(args.pins)
    _check_outputs(args.out, PUSHED, [args.report, path])
    manifest = publish(
        report=args.report,
        registry=args.registry,
        push=args.push,
        out=args.out,
        pins=load_pins(path),
        pins_file=path,
        engine=DockerEngine.find(),
        console=console,
    )
    out = results_console(console)  # each image's guard and where it went
    for image in manifest.images:
        where = f"{image.uri} {image.digest}" if image.pushed else "not pushed (--push top)"
        out.print(f"{image.tag}: guard ok ({image.guard_checks} checks), {where}", markup=False)
    console.print(
        f"wrote {args.out / 'build-manifest.json'}, {args.out / 'guard-junit.xml'}, {args.out / 'image.env'}",
        markup=False,
    )
    return 0


def cmd_pull(args: argparse.Namespace, console: Console) -> int:
    image = args.image
    _check_outputs(args.out, (PULLED,), [] if image else [pins_path(args.pins)])
    if not image:
        path = pins_path(args.pins)
        pins = load_pins(path)
        image = pins.image_ref(args.layer, pins.target(args.target, path))
    pull(registry=args.registry, image=image, out=args.out, engine=DockerEngine.find(), console=console)
    return 0


def _add_out_dir(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--out-dir",
        dest="out",
        metavar="DIR",
        type=path_arg,
        default=DEFAULT_OUT,
        help=f"{what} (default {DEFAULT_OUT})",
    )
    rename(parser, "--out-dir", "--out")


def register(subparsers: SubParsers) -> None:
    """Add `publish push|pull|login|digest|promote` to the top-level subcommands."""
    commands = subparsers.add_parser(
        "publish", help="push guarded images to a registry by digest, pull them by digest; ECR's login"
    ).add_subparsers(dest="publish_command", required=True, metavar="SUBCOMMAND")
    push = commands.add_parser(
        "push", parents=[PINS], help="guard the images a build made, push them, write the build manifest"
    )
    push.add_argument("report", type=path_arg, help="build report from `epstack build --report`")
    push.add_argument(
        "--registry",
        required=True,
        help="HOST[:PORT][/NAMESPACE]: any registry Docker's credentials reach (docker login; ECR: publish "
        "login); stand-in images only to a loopback one",
    )
    push.add_argument(
        "--push", choices=("all", "top"), default="all", help="every built image (default), or the top one"
    )
    _add_out_dir(push, "manifest, JUnit and image.env")
    push.set_defaults(func=cmd_publish)
    pull_parser = commands.add_parser(
        "pull", parents=[PINS], help="resolve an image's digest in the registry and pull by it"
    )
    pull_parser.add_argument("--registry", required=True, help="HOST[:PORT][/NAMESPACE]")
    pull_parser.add_argument("--target", help="target whose image to pull (default DEFAULT_TARGET)")
    pull_parser.add_argument(
        "--layer", choices=LAYER_NAMES, default=TOP.name, help=f"which layer's image (default {TOP.name})"
    )
    pull_parser.add_argument("--image", help="REPOSITORY:TAG instead of --target and --layer")
    _add_out_dir(pull_parser, "where image.env goes")
    pull_parser.set_defaults(func=cmd_pull)
    register_ecr(commands)
