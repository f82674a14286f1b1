"""One shell for a whole build, as CodeBuild runs buildspec 0.2: `cd`, variables (exported or not),
functions and shell options carry from one command to the next and from phase to phase.

Each command is written to a file and sourced by the long-lived shell with stdin from /dev/null (a
command that reads stdin cannot eat the next one). After it, the shell prints a marker line carrying
the exit status (with a per-session nonce, so output cannot fake it) and snapshots its exported
variables and directory. A command that ends the shell itself (`exit 3`, or `set -e` then a failure)
fails with that status, and a new shell carries on from the snapshot: exported variables and the
directory survive, plain variables and functions do not (CodeBuild does not document this case).

Nothing a command does holds the build: the marker goes to a descriptor of the output pipe that is
the shell's own (a command that closes or redirects stdout and stderr still ends); a shell that has
exited ends its command even while a child it left holds the pipe; every command ends by the
shell's deadline, when the shell and its process group are killed; output is read in lines of at
most LINE_LIMIT characters and each command keeps only the end of its output.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import secrets
import select
import shlex
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from epstack.errors import EnvironmentProblem

LINE_LIMIT = 1 << 16  # a longer line is logged in pieces (`cat /dev/zero` never fills memory)
KEPT_OUTPUT = 1 << 16  # the end of a command's output that it returns (the log gets all of it)
TIMED_OUT = 124  # the status of a command the deadline stopped, as timeout(1) reports it
_QUIET = 0.2  # seconds of a silent pipe after which an exited shell's command has ended


@dataclass(frozen=True, kw_only=True)
class Ran:
    """How a command ended: its exit status and the end of its output; timed_out when the shell's
    deadline stopped it."""

    code: int
    output: str
    timed_out: bool = False


class _DeadlinePassed(Exception):
    pass


class _Tail:
    """The last KEPT_OUTPUT characters of the text added."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._size = 0

    def add(self, text: str) -> None:
        self._parts.append(text)
        self._size += len(text)
        if self._size > 2 * KEPT_OUTPUT:
            self._parts = [self.text()]
            self._size = len(self._parts[0])

    def text(self) -> str:
        return "".join(self._parts)[-KEPT_OUTPUT:]


class Shell:
    """A bash or /bin/sh process fed one command at a time; output goes line by line to `log`. Every
    command ends by `deadline` (a time.monotonic() value)."""

    def __init__(
        self,
        *,
        shell: str,
        env: Mapping[str, str],
        cwd: Path,
        workdir: Path,
        log: Callable[[str], None],
        deadline: float,
    ) -> None:
        self._shell = shell
        self._env = dict(env)
        self._cwd = cwd
        self._workdir = workdir
        self._log = log
        self._deadline = deadline
        self._nonce = secrets.token_hex(8)
        self._count = 0
        self._state = workdir / "state.sh"
        self._where = workdir / "cwd"
        self._process: subprocess.Popen[str] | None = None
        self._pipe = -1  # our end of the pipe the shell's stdout and stderr write to (-1: none)
        self._marker_fd = -1  # the shell's own descriptor of that pipe, for markers only
        self._poller = select.poll()
        self._decoder = io.IncrementalNewlineDecoder(codecs.getincrementaldecoder("utf-8")("replace"), True)
        self._lines: deque[str] = deque()
        self._partial = ""

    # ---- process ------------------------------------------------------------------------------

    def _start(self) -> subprocess.Popen[str]:
        self.close()  # a shell that died between commands: reap it, close its pipe
        argv = [self._shell, "--noprofile", "--norc"] if self._shell == "bash" else [self._shell]
        reader, writer = os.pipe()
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=writer,
                stderr=writer,
                pass_fds=(writer,),
                env=self._env,
                cwd=self._cwd,
                text=True,
                bufsize=1,
                start_new_session=True,
            )
        except FileNotFoundError:
            os.close(reader)
            raise EnvironmentProblem(f"{self._shell}: not found; fix: install it or set env.shell") from None
        finally:
            os.close(writer)
        self._process, self._pipe, self._marker_fd = process, reader, writer
        self._poller = select.poll()
        self._poller.register(reader, select.POLLIN)
        self._decoder.reset()
        self._lines.clear()
        self._partial = ""
        if self._state.exists():  # a previous shell ended inside a command: carry on from its snapshot
            state, where = shlex.quote(str(self._state)), shlex.quote(str(self._where))
            self._send(f'. {state} 2>/dev/null; cd "$(cat {where})"\n')
        return process

    def _send(self, text: str) -> None:
        assert self._process is not None and self._process.stdin is not None
        try:
            self._process.stdin.write(text)
            self._process.stdin.flush()
        except BrokenPipeError:
            pass  # the shell is gone; reading its pipe reports it

    def _read(self, process: subprocess.Popen[str]) -> bytes:
        """The next bytes of the pipe; b"" at its end, or once the shell has exited and the pipe stays
        quiet (a child it left may hold it open). _DeadlinePassed when the deadline comes first."""
        while True:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise _DeadlinePassed
            if self._poller.poll(min(left, _QUIET) * 1000):
                return os.read(self._pipe, LINE_LIMIT)
            if process.poll() is not None:
                return b""

    def _line(self, process: subprocess.Popen[str]) -> str | None:
        """The next line of output, in pieces of at most LINE_LIMIT characters; None at the end."""
        while not self._lines:
            chunk = self._read(process)
            if not chunk:
                rest, self._partial = self._partial + self._decoder.decode(b"", final=True), ""
                return rest or None
            *complete, self._partial = (self._partial + self._decoder.decode(chunk)).split("\n")
            for line in complete:
                self._lines.extend(_pieces(line + "\n"))
            while len(self._partial) >= LINE_LIMIT:
                self._lines.append(self._partial[:LINE_LIMIT])
                self._partial = self._partial[LINE_LIMIT:]
        return self._lines.popleft()

    # ---- commands -----------------------------------------------------------------------------

    def run(self, command: str, *, quiet: bool = False) -> Ran:
        """Run one command; its output is streamed to `log` unless quiet."""
        if time.monotonic() >= self._deadline:
            return Ran(code=TIMED_OUT, output="", timed_out=True)
        process = self._process if self._process and self._process.poll() is None else self._start()
        self._count += 1
        script = self._workdir / f"command-{self._count}.sh"
        script.write_text(command + "\n")
        marker = f"__EPSTACK_DONE_{self._nonce}"
        snapshot = f"export -p >| {shlex.quote(str(self._state))}; pwd >| {shlex.quote(str(self._where))}"
        self._send(
            f". {shlex.quote(str(script))} </dev/null\n"
            f"__epstack_rc=$?; {snapshot}; "
            f"printf '\\n%s %s\\n' {marker} \"$__epstack_rc\" >/dev/fd/{self._marker_fd}\n"
        )
        output = _Tail()
        held: str | None = None  # an empty line, held back: the marker's own leading newline
        try:
            while (line := self._line(process)) is not None:
                if line.startswith(marker + " "):
                    return Ran(code=int(line.split()[1]), output=output.text())
                if held is not None:
                    self._emit(held, output, quiet)
                    held = None
                if line == "\n":
                    held = line
                    continue
                self._emit(line, output, quiet)
        except _DeadlinePassed:
            self.close()
            self._log("(the build's time ran out: the command and everything it started were stopped)")
            return Ran(code=TIMED_OUT, output=output.text(), timed_out=True)
        return self._ended(process, output)

    def _ended(self, process: subprocess.Popen[str], output: _Tail) -> Ran:
        self.close()  # the shell exited, or closed every descriptor of its pipe: end what it left
        code = process.returncode
        self._log(f"(the shell exited with status {code}; the next command runs in a new one)")
        return Ran(code=code if code > 0 else 1, output=output.text())

    def _emit(self, line: str, output: _Tail, quiet: bool) -> None:
        output.add(line)
        if not quiet:
            self._log(line.rstrip("\n"))

    def set(self, name: str, value: str) -> None:
        """export NAME=value in the running shell (and in any shell started after)."""
        self._env[name] = value
        self.run(f"export {name}={shlex.quote(value)}", quiet=True)

    def value(self, name: str) -> str | None:
        """The shell's current value of a variable, exported or not; None when unset."""
        ran = self.run(
            f'if [ -n "${{{name}+set}}" ]; then printf "%s" "${name}"; else return 99; fi', quiet=True
        )
        return None if ran.code == 99 or ran.timed_out else ran.output.removesuffix("\n")

    def close(self) -> None:
        """End the shell and everything in its process group, and stop reading its pipe (a child that
        left the group may hold the pipe open: it is not waited for)."""
        process, self._process = self._process, None
        if process is not None:
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait()
            _signal_group(process, signal.SIGKILL)  # what outlived the shell in its group
            if process.stdin is not None:
                with contextlib.suppress(OSError):
                    process.stdin.close()
        if self._pipe != -1:
            os.close(self._pipe)
            self._pipe = -1


def _signal_group(process: subprocess.Popen[str], number: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, number)


def _pieces(line: str) -> list[str]:
    return [line[start : start + LINE_LIMIT] for start in range(0, len(line), LINE_LIMIT)]
