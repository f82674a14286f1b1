"""One shell for a whole build, as CodeBuild runs buildspec 0.2: `cd`, variables (exported or not),
functions and shell options carry from one command to the next and from phase to phase.

Each command is written to a file and sourced by the long-lived shell with stdin from /dev/null (a
command that reads stdin cannot eat the next one). After it, the shell prints a marker line carrying
the exit status (with a per-session nonce, so output cannot fake it) and snapshots its exported
variables and directory. A command that ends the shell itself (`exit 3`, or `set -e` then a failure)
fails with that status, and a new shell carries on from the snapshot: exported variables and the
directory survive, plain variables and functions do not (CodeBuild does not document this case).
"""

from __future__ import annotations

import contextlib
import os
import queue
import secrets
import shlex
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from epstack.errors import EnvironmentProblem

_EOF = None


class Shell:
    """A bash or /bin/sh process fed one command at a time; output goes line by line to `log`."""

    def __init__(
        self, *, shell: str, env: Mapping[str, str], cwd: Path, workdir: Path, log: Callable[[str], None]
    ) -> None:
        self._shell = shell
        self._env = dict(env)
        self._cwd = cwd
        self._workdir = workdir
        self._log = log
        self._nonce = secrets.token_hex(8)
        self._count = 0
        self._state = workdir / "state.sh"
        self._where = workdir / "cwd"
        self._process: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader: threading.Thread | None = None

    # ---- process ------------------------------------------------------------------------------

    def _start(self) -> subprocess.Popen[str]:
        argv = [self._shell, "--noprofile", "--norc"] if self._shell == "bash" else [self._shell]
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=self._env,
                cwd=self._cwd,
                text=True,
                bufsize=1,
                start_new_session=True,
            )
        except FileNotFoundError:
            raise EnvironmentProblem(f"{self._shell}: not found; fix: install it or set env.shell") from None
        self._lines = queue.Queue()
        self._reader = threading.Thread(target=self._read, args=(process, self._lines), daemon=True)
        self._reader.start()
        self._process = process
        if self._state.exists():  # a previous shell ended inside a command: carry on from its snapshot
            state, where = shlex.quote(str(self._state)), shlex.quote(str(self._where))
            self._send(f'. {state} 2>/dev/null; cd "$(cat {where})"\n')
        return process

    @staticmethod
    def _read(process: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(_EOF)

    def _send(self, text: str) -> None:
        assert self._process is not None and self._process.stdin is not None
        try:
            self._process.stdin.write(text)
            self._process.stdin.flush()
        except BrokenPipeError:
            pass  # the shell is gone; the reader reports it

    # ---- commands -----------------------------------------------------------------------------

    def run(self, command: str, *, quiet: bool = False) -> tuple[int, str]:
        """Run one command; return its exit status and its output (streamed to `log` unless quiet)."""
        process = self._process if self._process and self._process.poll() is None else self._start()
        self._count += 1
        script = self._workdir / f"command-{self._count}.sh"
        script.write_text(command + "\n")
        marker = f"__EPSTACK_DONE_{self._nonce}"
        snapshot = f"export -p > {shlex.quote(str(self._state))}; pwd > {shlex.quote(str(self._where))}"
        self._send(
            f". {shlex.quote(str(script))} </dev/null\n"
            f"__epstack_rc=$?; {snapshot}; printf '\\n%s %s\\n' {marker} \"$__epstack_rc\"\n"
        )
        output: list[str] = []
        held: str | None = None  # an empty line, held back: the marker's own leading newline
        while True:
            try:
                line = self._lines.get(timeout=0.2)
            except queue.Empty:
                if process.poll() is not None and self._drained():
                    return self._ended(process, output)
                continue
            if line is _EOF:
                return self._ended(process, output)
            if line.startswith(marker + " "):
                return int(line.split()[1]), "".join(output)
            if held is not None:
                self._emit(held, output, quiet)
                held = None
            if line == "\n":
                held = line
                continue
            self._emit(line, output, quiet)

    def _drained(self) -> bool:
        """The shell exited; a background child may still hold the pipe: stop reading anyway."""
        return self._lines.empty()

    def _ended(self, process: subprocess.Popen[str], output: list[str]) -> tuple[int, str]:
        code = process.wait()
        self._reap(process)
        self._process = None
        self._log(f"(the shell exited with status {code}; the next command runs in a new one)")
        return (code or 1), "".join(output)

    def _emit(self, line: str, output: list[str], quiet: bool) -> None:
        output.append(line)
        if not quiet:
            self._log(line.rstrip("\n"))

    def set(self, name: str, value: str) -> None:
        """export NAME=value in the running shell (and in any shell started after)."""
        self._env[name] = value
        self.run(f"export {name}={shlex.quote(value)}", quiet=True)

    def value(self, name: str) -> str | None:
        """The shell's current value of a variable, exported or not; None when unset."""
        code, out = self.run(
            f'if [ -n "${{{name}+set}}" ]; then printf "%s" "${name}"; else return 99; fi', quiet=True
        )
        return None if code == 99 else out.removesuffix("\n")

    def close(self) -> None:
        """End the shell and everything it started (its own process group)."""
        process = self._process
        self._process = None
        if process is None:
            return
        if process.poll() is not None:
            self._reap(process)
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        self._reap(process)

    def _reap(self, process: subprocess.Popen[str]) -> None:
        """Close the pipes once the reader has seen the end (the whole group is gone by then)."""
        if self._reader is not None:
            self._reader.join(timeout=5)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
