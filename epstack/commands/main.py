"""The `epstack` command line. Each command lives in its own module with `register(subparsers)`;
only the chosen command's module is imported (the images' entrypoint runs `epstack image guard` at
every container start), and every command ends through epstack.commands.common.execute and its
exit-code table."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

from epstack import __version__, cmd
from epstack.commands.common import Parser, add_global_flags, commands, console_for, deprecated, parse
from epstack.commands.common import execute as execute_command
from epstack.commands.examples import document

# Each top-level command and the module whose register(subparsers) adds it: the user's commands, then
# those an image's build and start run (`epstack image ...`), then shell completion.
COMMANDS: dict[str, str] = {
    "pins": "epstack.commands.pins",
    "render": "epstack.commands.render",
    "build": "epstack.commands.build",
    "guard": "epstack.commands.guard",
    "smoke": "epstack.commands.smoke",
    "cluster": "epstack.commands.cluster",
    "doctor": "epstack.commands.doctor",
    "publish": "epstack.commands.publish",
    "codebuild": "epstack.commands.aws",
    "jit": "epstack.commands.jit",
    "image": "epstack.commands.image",
    "completion": "epstack.commands.completion",
}
IMAGE = "image"  # its module registers only the chosen command (the entrypoint runs it at every start)

# Command paths moved in 0.2, kept for one release: each runs its new path, warned on stderr.
MOVED: dict[tuple[str, ...], tuple[str, ...]] = {
    ("lock",): ("pins", "lock"),
    ("cluster", "pull"): ("cluster", "prepull"),
    ("ecr", "login"): ("publish", "login"),
    ("ecr", "digest"): ("publish", "digest"),
    ("ecr", "promote"): ("publish", "promote"),
    ("sbom",): ("image", "sbom"),
    ("jit", "install"): ("image", "jit-install"),
    ("jit", "unpack"): ("image", "jit-unpack"),
    ("nccl", "check"): ("image", "nccl-check"),
    ("sources", "verify"): ("image", "sources-verify"),
    ("deepep", "build"): ("image", "deepep-build"),
}
# `guard` with one of these is the image's guard (`epstack image guard`).
IMAGE_GUARD = ("--record", "--at-start")


def _words(argv: Sequence[str]) -> list[int]:
    """The positions of the arguments that are not options (the top level has no valued ones)."""
    return [i for i, arg in enumerate(argv) if not arg.startswith("-")]


def moved(argv: Sequence[str]) -> list[str]:
    """`argv` with a moved command path (MOVED, `guard --record`) written as its new one, warned."""
    argv, at = list(argv), _words(argv)
    said = tuple(argv[i] for i in at[:2])
    old: tuple[str, ...]
    new: tuple[str, ...]
    if said[:1] == ("guard",) and any(flag in argv for flag in IMAGE_GUARD):
        old, new = ("guard",), ("image", "guard")
    else:
        old, new = next(((o, n) for o, n in MOVED.items() if said[: len(o)] == o), ((), ()))
    if not old:
        return argv
    deprecated(f"epstack {' '.join(old)}", f"epstack {' '.join(new)}")
    first, last = at[0], at[len(old) - 1]
    return [*argv[:first], *new, *argv[first + 1 : last], *argv[last + 1 :]]


def build_parser(command: str | None = None, subcommand: str | None = None) -> argparse.ArgumentParser:
    """The parser with `command`'s module registered (of `epstack image`, `subcommand`'s); every module
    when `command` is None or unknown (`epstack --help`, a typo the parser then names). -q and -v go
    anywhere: every command has them."""
    parser = Parser(
        prog="epstack", description="Pinned, layered, proven SGLang + DeepEP V2 images from one pins.env."
    )
    parser.add_argument("--version", action="version", version=f"epstack {__version__}")
    add_global_flags(parser, top=True)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        module = importlib.import_module(name)
        module.register(subparsers, *([subcommand] if name == COMMANDS[IMAGE] else []))
    for _, each in commands(parser):
        if each is not parser:
            add_global_flags(each, top=False)
    document(parser)
    return parser


def console_for_stderr(*, quiet: bool = False) -> Console:
    """The console of logs, warnings and errors (epstack.commands.common.console_for)."""
    return console_for("stderr", quiet=quiet)


def main(argv: Sequence[str] | None = None) -> int:
    argv = moved(sys.argv[1:] if argv is None else argv)
    words = [argv[i] for i in _words(argv)]
    args = parse(build_parser(*words[:2]), argv)
    if isinstance(args, int):
        return args
    cmd.verbosity = cmd.QUIET if args.quiet else cmd.VERBOSE if args.verbose else cmd.NORMAL
    console, errors = console_for_stderr(quiet=args.quiet), console_for_stderr()

    def report(kind: str, line: str) -> None:
        errors.print(Text.assemble((f"{kind}:", "red"), " ", line))

    return execute_command(lambda: int(args.func(args, console)), report)


if __name__ == "__main__":
    sys.exit(main())
