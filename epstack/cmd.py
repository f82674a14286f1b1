"""Every external command goes through here: printed as `+ cmd`, checked, typed result."""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from epstack.errors import CommandFailed, EnvironmentProblem


def _start(args: Sequence[str]) -> None:
    print("+ " + shlex.join(args), file=sys.stderr, flush=True)


def call(
    *args: str | Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    capture: bool = False,
    echo: bool = True,
    stdin: bytes | None = None,
) -> str:
    """Run a command; raise CommandFailed on a non-zero exit. Returns stdout when capture=True.
    `stdin` is written to the command's standard input (a password never goes on the command line)."""
    argv = [str(a) for a in args]
    if echo:
        _start(argv)
    try:
        result = subprocess.run(argv, env=env, cwd=cwd, capture_output=capture, input=stdin, check=False)
    except FileNotFoundError:
        raise EnvironmentProblem(f"{argv[0]}: command not found") from None
    if result.returncode != 0:
        detail = result.stderr.decode(errors="replace").strip().splitlines()[-1:] if capture else []
        raise CommandFailed(
            f"`{shlex.join(argv)}` exited {result.returncode}" + (f": {detail[0]}" if detail else "")
        )
    return result.stdout.decode(errors="replace") if capture else ""


def succeeds(*args: str | Path, env: Mapping[str, str] | None = None) -> bool:
    """True when the command exits 0; output discarded, nothing printed."""
    try:
        return (
            subprocess.run([str(a) for a in args], env=env, capture_output=True, check=False).returncode == 0
        )
    except FileNotFoundError:
        return False


def pipe(producer: Sequence[str], consumer: Sequence[str]) -> None:
    """`producer | consumer`, both checked."""
    _start([*producer, "|", *consumer])
    with subprocess.Popen(list(producer), stdout=subprocess.PIPE) as first:
        second = subprocess.run(list(consumer), stdin=first.stdout, capture_output=True, check=False)
    if first.returncode != 0 or second.returncode != 0:
        raise CommandFailed(
            f"`{shlex.join(producer)} | {shlex.join(consumer)}` failed: "
            + second.stderr.decode(errors="replace").strip()
        )


def status_and_output(*args: str | Path, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """Run a command whose exit status is a verdict (a check): stdout captured, stderr streamed."""
    argv = [str(a) for a in args]
    _start(argv)
    try:
        result = subprocess.run(argv, env=env, stdout=subprocess.PIPE, check=False)
    except FileNotFoundError:
        raise EnvironmentProblem(f"{argv[0]}: command not found") from None
    return result.returncode, result.stdout.decode(errors="replace")


def output_if_ok(*args: str | Path) -> bytes | None:
    """A query whose failure is an answer (git outside a checkout): stdout on exit 0, else None."""
    try:
        result = subprocess.run([str(a) for a in args], capture_output=True, check=False)
    except FileNotFoundError:
        return None
    return result.stdout if result.returncode == 0 else None
