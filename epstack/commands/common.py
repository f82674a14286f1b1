"""How every epstack command is declared and run.

A command module has `register(subparsers)`, which adds its commands with `subparsers.add_parser`;
a command that reads pins takes `parents=[PINS]`, the one `--pins`. Every parser is a `Parser`: no
abbreviated options, and an argument error is one line (the bad flag or value, did-you-mean, where the
help is), exit 2. Values are range-checked by the argument types here before any work starts.
`execute` runs the chosen handler and turns what it raises into the exit-code table of epstack.errors:
every entry point (`epstack`, `python -m epstack`, `python -m epstack.smoke`, `python3 -m
epstack.doctor`) goes through it. Results go to `results_console` (stdout), logs to the console a
handler is given (stderr). Standard library only: the doctor and the smoke run on bare GPU hosts.
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
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeAlias, TypeVar, cast

if TYPE_CHECKING:  # the stdlib-only `python3 -m epstack.doctor` imports this module too: no rich here
    from _typeshed import DataclassInstance
    from rich.console import Console

from epstack.errors import BAD_INPUT, INTERRUPTED, NOT_TEXT, OK, BadInput, EpstackError, shown
from epstack.httpclient import MAX_TIMEOUT_S
from epstack.suggest import closest

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


def count_up_to(limit: int) -> Callable[[str], int]:
    """A count of 1 to `limit`: beyond it a typo rather than a job (1e6 replicas, a week of start-up)."""

    def count(text: str) -> int:
        value = positive_int(text)
        if value > limit:
            raise argparse.ArgumentTypeError(f"{text} is more than {limit}; fix: at most {limit}")
        return value

    count.__name__ = f"count_up_to_{limit}"
    return count


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


def deprecated(old: str, new: str) -> None:
    """Warn on stderr that `old` (an option, a command) goes in the next release, naming `new`."""
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
            deprecated(option_string, self.renamed[option_string])
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
            deprecated(f"{option_string} without FILE", f"{option_string} -")
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


_PARSER = "_parser"  # the namespace's record of the deepest command parsed (epstack cluster render)


def _option_name(arg: str) -> str:
    return arg.split("=", 1)[0]


# Reads a values file into the flags it stands for (a command's parser passed for their checks).
ValuesReader = Callable[[Path, argparse.ArgumentParser], list[str]]
VALUES_FLAGS = ("-f", "--values")


class Parser(argparse.ArgumentParser):
    """Every epstack parser: an option is spelt whole (no abbreviations: a later option cannot change
    what a script's abbreviation means), and an argument error is one line on stderr naming the bad
    flag or value, the near miss and where the help is; exit 2. A command with a values file
    (add_values_file) reads it first: its flags, then the command line's, which win."""

    values_reader: ValuesReader | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        self._given: list[str] = []

    def _with_values(self, args: list[str], reader: ValuesReader) -> list[str]:
        """`args` after the flags of each `-f FILE` in them (in their order)."""
        files = []
        for at, arg in enumerate(args):
            if arg == "--":
                break
            if arg in VALUES_FLAGS and at + 1 < len(args):
                files.append(args[at + 1])
            elif arg.startswith("--values="):
                files.append(arg.split("=", 1)[1])
        try:
            read = [flag for name in files for flag in reader(path_arg(name), self)]
        except (EpstackError, argparse.ArgumentTypeError) as exc:
            self.error(str(exc))
        return [*read, *args]

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._given = list(sys.argv[1:] if args is None else args)
        if self.values_reader is not None:
            self._given = self._with_values(self._given, self.values_reader)
        parsed, extras = super().parse_known_args(self._given, namespace)
        if not hasattr(parsed, _PARSER):  # a command's parser sets it first, its group's after
            setattr(parsed, _PARSER, self)
        return parsed, extras

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """A value outside the choices: did-you-mean among those --help lists (a command's aliases
        are not listed)."""
        if action.choices is None or value in action.choices:
            return
        listed = [a.dest for a in getattr(action, "_choices_actions", [])] or list(action.choices)
        near = closest(str(value), map(str, listed))
        fix = f"did you mean {near}?" if near else f"choose from {', '.join(map(str, listed))}"
        if isinstance(action, argparse._SubParsersAction):
            raise argparse.ArgumentError(
                None, f"{shown(str(value))}: not a command of {self.prog}; fix: {fix}"
            )
        raise argparse.ArgumentError(action, f"{shown(str(value))} is not a choice; fix: {fix}")

    def unknown(self, arg: str) -> str:
        """The one line for an argument this command does not take."""
        if not arg.startswith("-") or arg == "-":
            return f"{shown(arg)}: an argument {self.prog} does not take; fix: drop it"
        name = _option_name(arg)
        near = closest(name, [o for o in self._option_string_actions if o.startswith("--") or len(name) == 2])
        if near and near.startswith(name) and near != name:
            return f"{name}: not an option of {self.prog} (options are spelt whole); fix: write {near}"
        fix = f"did you mean {near}?" if near else "drop it"
        return f"{name}: not an option of {self.prog}; fix: {fix}"

    def error(self, message: str) -> NoReturn:
        """One line, the first unknown option first: it is likely why a required one seems missing."""
        strange = [
            arg
            for arg in self._given
            if arg.startswith("-")
            and arg not in ("-", "--")
            and _option_name(arg) not in self._option_string_actions
        ]
        line = self.unknown(strange[0]) if strange and "required" in message else message
        sys.stderr.write(f"error: {line} (see {self.prog} --help)\n")
        sys.exit(BAD_INPUT)


def add_values_file(parser: argparse.ArgumentParser, reader: ValuesReader, help_text: str) -> None:
    """`-f/--values FILE` (repeatable): the command's settings from a file, which flags override (read
    by a Parser, as every epstack parser is)."""
    parser.add_argument(*VALUES_FLAGS, type=path_arg, action="append", metavar="FILE", help=help_text)
    setattr(parser, "values_reader", reader)  # noqa: B010 (argparse's own class has no such field)


def add_global_flags(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """-q and -v, on the top parser and (`top` False) on every command, so they go anywhere; on a
    command they set nothing unless given, so `epstack -q pins check` stays quiet."""
    default: Any = False if top else argparse.SUPPRESS
    group = parser.add_argument_group("global options") if not top else parser
    loudness = group.add_mutually_exclusive_group()
    loudness.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default,
        help="on stderr only errors and warnings: no logs, no commands run (stdout as it is)",
    )
    loudness.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default,
        help="print every command run, the quiet probes too",
    )


GLOBAL_FLAGS = ("-q", "--quiet", "-v", "--verbose")


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace | int:
    """The parsed arguments, or the exit code argparse chose (2 for a bad flag, 0 for --help)."""
    try:
        # argparse (3.11, 3.12) turns `--opt=--` into an empty list instead of a value or an error.
        swallowed = next((arg for arg in argv if arg.startswith("--") and arg.endswith("=--")), None)
        if swallowed:
            parser.error(f"{swallowed}: '--' is not a value")
        args, extras = parser.parse_known_args(argv)
        if extras:
            command = getattr(args, _PARSER, parser)
            command.error(command.unknown(extras[0]) if isinstance(command, Parser) else f"{extras[0]}?")
        if hasattr(args, _PARSER):
            delattr(args, _PARSER)
        return args
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


LOG_WIDTH = 160  # the columns of a table written where no terminal is (CI, docker build, a pipe)
STDOUT = Path("-")  # a file name that means standard output: `--json -` (as epstack.output.STDOUT)


def console_for(stream: Literal["stdout", "stderr"], *, quiet: bool = False) -> Console:
    """Markup only where epstack writes it (user text goes through rich.markup.escape, or is printed
    with markup=False); no emoji codes, so a path with `:fire:` in it is printed as it is. Colour as
    rich decides it: none off a terminal or with NO_COLOR set. `quiet`: prints nothing (-q)."""
    from rich.console import Console  # noqa: PLC0415 (see TYPE_CHECKING above)

    file = sys.stdout if stream == "stdout" else sys.stderr
    width = None if file.isatty() else LOG_WIDTH
    return Console(file=file, highlight=False, soft_wrap=True, width=width, emoji=False, quiet=quiet)


def results_console(log: Console, *, document: Path | None = None) -> Console:
    """Where a command prints its results (tables, verdicts, what it found): stdout, which -q never
    quiets; but when stdout carries the command's JSON document (`--json -`), beside the logs on
    stderr (`log`, the console a handler is given), so stdout holds the document and nothing else."""
    return log if document == STDOUT else console_for("stdout")


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
