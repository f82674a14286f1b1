"""Every external command goes through here: printed as `+ cmd`, time-limited, typed result."""

from __future__ import annotations

import ctypes
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from epstack.errors import CommandFailed, EnvironmentProblem, printable


@dataclass(frozen=True, kw_only=True)
class Completed:
    """A finished command: its argv, exit code and captured output (empty when not captured)."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


# Which commands are printed as `+ cmd`: 0 none (-q), 1 those that do the work (the default), 2 the
# quiet probes too (-v). Set by epstack.commands.main.main for each run.
QUIET, NORMAL, VERBOSE = 0, 1, 2
verbosity = NORMAL


def _start(args: Sequence[str], *, echo: bool) -> None:
    if verbosity >= (NORMAL if echo else VERBOSE):
        print("+ " + shlex.join(args), file=sys.stderr, flush=True)


_PR_SET_PDEATHSIG = 1


def die_with(parent: int) -> Callable[[], None] | None:
    """What a child runs between fork and exec: SIGKILL when `parent` dies (Linux); None elsewhere."""
    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
    if prctl is None:
        return None

    def set_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return set_death_signal


def run(
    *args: str | Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    capture: bool = True,
    echo: bool = True,
    timeout: float | None = None,
    stdin: bytes | None = None,
    own_group: bool = False,
) -> Completed:
    """Run a command and return how it ended, without judging the exit code.

    A missing program is an EnvironmentProblem; a command still running after `timeout` seconds is
    killed and raised as CommandFailed. `stdin` is written to the command's standard input (a
    password never goes on the command line). `own_group`: in a process group of its own, killed
    when this process dies, even by SIGKILL (a resolver a killed command must not leave running)."""
    argv = tuple(str(a) for a in args)
    _start(argv, echo=echo)
    try:
        result = subprocess.run(
            argv,
            env=env,
            cwd=cwd,
            capture_output=capture,
            input=stdin,
            check=False,
            timeout=timeout,
            start_new_session=own_group,
            preexec_fn=die_with(os.getpid()) if own_group else None,
        )
    except FileNotFoundError:
        raise EnvironmentProblem(f"{argv[0]}: command not found") from None
    except subprocess.TimeoutExpired:
        raise CommandFailed(f"`{shlex.join(argv)}` did not finish within {timeout:g} s") from None
    return Completed(
        argv=argv,
        returncode=result.returncode,
        stdout=result.stdout.decode(errors="replace") if capture else "",
        stderr=result.stderr.decode(errors="replace") if capture else "",
    )


def call(
    *args: str | Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    capture: bool = False,
    echo: bool = True,
    timeout: float | None = None,
    stdin: bytes | None = None,
) -> str:
    """Run a command; raise CommandFailed on a non-zero exit. Returns stdout when capture=True."""
    result = run(*args, env=env, cwd=cwd, capture=capture, echo=echo, timeout=timeout, stdin=stdin)
    if result.returncode != 0:
        detail = result.stderr.strip().splitlines()[-1:]
        raise CommandFailed(  # its last line may be a server's (git's "remote: ..."): printed literally
            f"`{result.command}` exited {result.returncode}" + (f": {printable(detail[0])}" if detail else "")
        )
    return result.stdout


def succeeds(*args: str | Path, env: Mapping[str, str] | None = None, timeout: float = 60) -> bool:
    """True when the command exits 0 within `timeout`; output discarded, printed only with -v."""
    try:
        return run(*args, env=env, echo=False, timeout=timeout).returncode == 0
    except (EnvironmentProblem, CommandFailed):
        return False


def pipe(producer: Sequence[str], consumer: Sequence[str]) -> None:
    """`producer | consumer`, both checked."""
    _start([*producer, "|", *consumer], echo=True)
    with subprocess.Popen(list(producer), stdout=subprocess.PIPE) as first:
        second = subprocess.run(list(consumer), stdin=first.stdout, capture_output=True, check=False)
    if first.returncode != 0 or second.returncode != 0:
        raise CommandFailed(
            f"`{shlex.join(producer)} | {shlex.join(consumer)}` failed: "
            + second.stderr.decode(errors="replace").strip()
        )


def status_and_output(*args: str | Path, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """Run a command whose exit status is a verdict (a check): its status and stdout; its stderr
    (the check's own report) goes to our stderr."""
    result = run(*args, env=env)
    sys.stderr.write(result.stderr)
    return result.returncode, result.stdout


def output_if_ok(*args: str | Path) -> str | None:
    """A query whose failure is an answer (git outside a checkout): stdout on exit 0, else None."""
    try:
        result = run(*args, echo=False, timeout=60)
    except (EnvironmentProblem, CommandFailed):
        return None
    return result.stdout if result.returncode == 0 else None
