"""How every epstack command is declared and run.

A command module has `register(subparsers)`, which adds its commands with `subparsers.add_parser`;
a command that reads pins takes `parents=[PINS]`, the one `--pins`. Values are range-checked by the
argument types here before any work starts. `execute` runs the chosen handler and turns what it
raises into the exit-code table of epstack.errors: every entry point (`epstack`, `python -m epstack`,
`python -m epstack.smoke`, `python3 -m epstack.doctor`) goes through it. Standard library only: the
doctor and the smoke run on bare GPU hosts.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import signal
import sys
import threading
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Literal, TypeAlias, TypeVar, cast

if TYPE_CHECKING:  # the stdlib-only `python3 -m epstack.doctor` imports this module too: no rich here
    from _typeshed import DataclassInstance
    from rich.console import Console

from epstack.errors import INTERRUPTED, NOT_TEXT, OK, BadInput, EpstackError, shown
from epstack.httpclient import MAX_TIMEOUT_S

# What add_subparsers() returns: each module's register() adds its commands to it.
SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
Handler = Callable[[], int]
Report = Callable[[Literal["error", "interrupted"], str], None]

MAX_PORT = 65535
_Settings = TypeVar("_Settings", bound="DataclassInstance")


def path_arg(text: str) -> Path:
    """A path from the command line: not empty, no NUL byte (no file can have one)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path; fix: name a file or directory")
    if "\0" in text:
        raise argparse.ArgumentTypeError("a path cannot contain a NUL byte")
    return Path(text)


def one_line(text: str) -> str:
    """A value epstack writes into a script or manifest it generates: one line of printable text."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty value; fix: give a value")
    for char in text:
        kind = NOT_TEXT.get(unicodedata.category(char))
        if kind:
            raise argparse.ArgumentTypeError(
                f"{shown(text)} holds {kind} (U+{ord(char):04X}), which would break the generated "
                "script or manifest it is written into; fix: one line of printable text"
            )
    return text


def _number(text: str, kind: Callable[[str], float]) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a finite number")
    return value


def positive_int(text: str) -> int:
    """A count of things: 1 or more."""
    value = int(_number(text, int))
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def non_negative_int(text: str) -> int:
    """An index or a seed: 0 or more."""
    value = int(_number(text, int))
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be 0 or more")
    return value


def port(text: str) -> int:
    """A TCP port: 1 to 65535."""
    value = int(_number(text, int))
    if not 0 < value <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"{text} is not a TCP port (1-{MAX_PORT})")
    return value


def seconds(text: str) -> float:
    """A duration: above zero and at most a day (NaN, inf, 1e300, 0 and negatives refused): the longest
    wait a timeout of epstack's can ask of a socket or a process."""
    value = _number(text, float)
    if not 0 < value <= MAX_TIMEOUT_S:
        raise argparse.ArgumentTypeError(
            f"{shown(text)} seconds: fix: give more than 0 and at most {MAX_TIMEOUT_S:g} (a day)"
        )
    return value


def fraction(text: str) -> float:
    """A finite number of 0 or more (a ratio, a share)."""
    value = _number(text, float)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be 0 or more")
    return value


DEFAULT_PINS = Path("pins.env")


def pins_path(value: Path | None) -> Path:
    """The pins file a command reads: its --pins, else $EPSTACK_PINS, else ./pins.env."""
    if value is not None:
        return value
    from_env = os.environ.get("EPSTACK_PINS")
    if from_env is None:
        return DEFAULT_PINS
    if not from_env.strip():
        raise BadInput("EPSTACK_PINS is set but empty; fix: unset it, or set it to a pins file")
    return Path(from_env)


def _pins_parent() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--pins", type=path_arg, metavar="FILE", help="pins file (default $EPSTACK_PINS or ./pins.env)"
    )
    return parent


# The one --pins: every command that reads pins declares it as add_parser(..., parents=[PINS]).
PINS = _pins_parent()


def _locks_parent() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--locks", type=path_arg, help="lock folder (default $EPSTACK_LOCKS or ./locks)")
    return parent


# The one --locks of the commands that read or write the lock folder (the guard's differs: no default).
LOCKS = _locks_parent()


def _deprecated(old: str, new: str) -> None:
    sys.stderr.write(f"warning: {old} is deprecated and goes in the next release; fix: write {new}\n")


class _Renamed(argparse.Action):
    """Mixed into an option's action by `rename`: its old names still work, each use warned on stderr."""

    renamed: dict[str, str]  # old name -> new name

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        if option_string in self.renamed:
            _deprecated(option_string, self.renamed[option_string])
        super().__call__(parser, namespace, values, option_string)


def rename(parser: argparse._ActionsContainer, new: str, *old: str) -> None:
    """Keep `new`'s old names working for one release: the same option (its dest, type, required-ness),
    not shown in --help or the reference, each use warned on stderr naming `new`."""
    action = parser._option_string_actions[new]
    taken = [name for name in old if name in parser._option_string_actions]
    if taken:
        raise ValueError(f"{taken[0]} is another option of this command")
    if not isinstance(action, _Renamed):
        action.__class__ = type(f"Renamed{type(action).__name__}", (_Renamed, type(action)), {})
    renamed = cast(_Renamed, action)
    renamed.renamed = getattr(renamed, "renamed", {}) | dict.fromkeys(old, new)
    parser._option_string_actions.update(dict.fromkeys(old, action))


def add_cuda_arch(parser: argparse.ArgumentParser, *, example: str, default: str) -> None:
    """`--cuda-arch ARCH` (repeatable): the CUDA arch a command compiles for; `--arch` warns, one release."""
    parser.add_argument(
        "--cuda-arch",
        action="append",
        metavar="ARCH",
        help=f"CUDA arch to compile for, e.g. {example} (repeatable; default: {default})",
    )
    rename(parser, "--cuda-arch", "--arch")


class FileOrBare(argparse.Action):
    """`--json FILE` (add it with nargs="?") where the option was once a flag: bare, it still means
    `-` (stdout), warned on stderr for one release."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        if values is None:
            _deprecated(f"{option_string} without FILE", f"{option_string} -")
        setattr(namespace, self.dest, Path("-") if values is None else values)


def commands(
    parser: argparse.ArgumentParser, path: str = ""
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """`parser` and every command under it, each with its words after `epstack` ("" for `parser`)."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from commands(child, f"{path} {name}".strip())


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace | int:
    """The parsed arguments, or the exit code argparse chose (2 for a bad flag, 0 for --help)."""
    try:
        # argparse (3.11, 3.12) turns `--opt=--` into an empty list instead of a value or an error.
        swallowed = next((arg for arg in argv if arg.startswith("--") and arg.endswith("=--")), None)
        if swallowed:
            parser.error(f"{swallowed}: '--' is not a value")
        return parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else OK


def from_args(cls: type[_Settings], args: argparse.Namespace, **computed: object) -> _Settings:
    """A settings dataclass from parsed arguments: each field the same-named attribute of `args`,
    unless `computed` gives it. A field found in neither is a TypeError naming it (a flag renamed
    without its field), even one with a default: nothing is left to a default by accident."""
    values = dict(computed)
    for field in dataclasses.fields(cls):
        if field.name in values or not field.init:
            continue
        if not hasattr(args, field.name):
            raise TypeError(f"{cls.__name__}.{field.name}: no such argument and none computed")
        values[field.name] = getattr(args, field.name)
    return cls(**values)


def _terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM unwinds like Ctrl-C, so outputs are cleaned up the same way."""
    raise KeyboardInterrupt


def execute(handler: Handler, report: Report) -> int:
    """Run a command's handler; an EpstackError becomes its exit code with each of its lines reported,
    Ctrl-C or SIGTERM becomes 130."""
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        return handler()
    except EpstackError as exc:
        for line in str(exc).splitlines() or [type(exc).__name__]:
            report("error", line)
        return exc.exit_code
    except KeyboardInterrupt:
        report("interrupted", "stopped; nothing was left half-written")
        return INTERRUPTED
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


@contextmanager
def working(console: Console, what: str) -> Iterator[None]:
    """Long work said while it runs: rich's spinner on a terminal, gone when it ends; nothing in a log
    (no terminal), whose lines stay the command's results and errors."""
    if not console.is_terminal:
        yield
        return
    from rich.markup import escape  # noqa: PLC0415 (see TYPE_CHECKING above)

    with console.status(escape(what)):
        yield
