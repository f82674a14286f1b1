"""One server the smoke started (SGLang, or vLLM: epstack.smoke.serving.engines): its command (the serve
plan's, from the engine's command module), its own process group and log, a wait until it is healthy,
and a stop that leaves nothing running.

The server and everything it forks (the scheduler, the detokenizer, nvcc under DeepGEMM's JIT) share a
new session; stop() sends SIGTERM to the group, then SIGKILL after a grace period, and reaps it. The
kernel also SIGKILLs the server when the smoke dies (PR_SET_PDEATHSIG), as for the elastic smoke's ranks.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from epstack.cmd import die_with
from epstack.errors import BadInput, EpstackError
from epstack.smoke.classify import Finding, classify_server_log
from epstack.smoke.serving.client import HEALTH, Endpoint
from epstack.smoke.serving.command import HTTP_PORT, SGLANG_ENTRY, serve_env, sglang_args
from epstack.smoke.serving.profiles import ServePlan
from epstack.smoke.serving.vllmchecks import LOGGING
from epstack.smoke.serving.vllmcommand import VLLM_ENTRY, vllm_args, vllm_env

# What each console script runs, for a Python whose scripts are not on PATH (pip --target).
_CONSOLE_SCRIPTS = {
    "sglang": "import sys; from sglang.cli.main import main; sys.argv[0] = 'sglang'; sys.exit(main())",
    "vllm": "import sys; from vllm.entrypoints.cli.main import main; sys.argv[0] = 'vllm'; sys.exit(main())",
}
STOP_GRACE_S = 10.0
LOG_TAIL_LINES = 12
MAX_PORT = 65535


class ServerFailed(EpstackError):
    """The server exited or never became healthy; the message names why, in words."""

    def __init__(self, message: str, finding: Finding | None) -> None:
        super().__init__(message)
        self.finding = finding
        if finding is not None and finding.environment:
            self.exit_code = 3


def entry(program: str = SGLANG_ENTRY[0]) -> list[str]:
    """The engine's program (`sglang`, `vllm`): its script on PATH or beside this Python, else the same
    via -c."""
    script = Path(sys.executable).with_name(program)
    found = shutil.which(program) or (str(script) if script.is_file() else None)
    return [found] if found else [sys.executable, "-c", _CONSOLE_SCRIPTS[program]]


def _port(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= MAX_PORT:
        raise BadInput(f"--port {text!r} is not a TCP port (1-{MAX_PORT}); fix: --sglang-arg=--port=30000")
    return int(text)


def port_of(argv: list[str]) -> int:
    """The port the server listens on: the last --port in argv (argparse keeps the last), else HTTP_PORT;
    BadInput when that is not a TCP port."""
    port = HTTP_PORT
    for index, arg in enumerate(argv):
        if arg == "--port" and index + 1 < len(argv):
            port = _port(argv[index + 1])
        elif arg.startswith("--port="):
            port = _port(arg.split("=", 1)[1])
    return port


def command(plan: ServePlan, extra: list[str]) -> list[str]:
    """The serve job's command for one node (node 0 of 1), then the user's extra SGLang flags."""
    return [*entry(), *SGLANG_ENTRY[1:], *sglang_args(plan, node_rank="0", leader="127.0.0.1"), *extra]


def vllm_command(plan: ServePlan, extra: list[str]) -> list[str]:
    """vLLM's: the serve job's command for one node (node 0 of 1), then the user's extra vLLM flags."""
    args = vllm_args(plan, node_rank="0", leader="127.0.0.1")
    return [*entry(VLLM_ENTRY[0]), *VLLM_ENTRY[1:], *args, *extra]


def tail(log: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        text = log.read_text(errors="replace")
    except FileNotFoundError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


@dataclass(kw_only=True)
class Server:
    proc: subprocess.Popen[bytes]
    log: Path
    endpoint: Endpoint
    started: float

    def failure(self, what: str) -> ServerFailed:
        """`what` happened; the message adds the known failure the log shows and its last lines."""
        finding = classify_server_log(self.log.read_text(errors="replace") if self.log.exists() else "")
        named = f"{finding.key}: {finding.summary}; fix: {finding.fix}" if finding else "not a known failure"
        lines = "\n".join(f"  | {line}" for line in tail(self.log))
        return ServerFailed(f"{what} ({named}); log {self.log}, last lines:\n{lines}", finding)

    def wait_healthy(self, timeout_s: float, poll_s: float = 2.0) -> float:
        """Seconds from launch until /health_generate answered; ServerFailed when it exits or times out."""
        deadline = self.started + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise self.failure(f"the server exited with {self.proc.returncode} before it was healthy")
            if self.endpoint.healthy(timeout=min(10.0, max(1.0, poll_s * 5))):
                return time.monotonic() - self.started
            if time.monotonic() >= deadline:
                raise self.failure(f"the server was not healthy within {timeout_s:g} s")
            time.sleep(poll_s)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=STOP_GRACE_S)
        with contextlib.suppress(ProcessLookupError):  # what the server forked, too
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@contextlib.contextmanager
def serving(argv: list[str], env: Mapping[str, str], log: Path, health: str = HEALTH) -> Iterator[Server]:
    """Start the server in its own session, logging to `log`; stopped on leaving, however it is left;
    `health`: the path that answers 200 once it serves."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with(os.getpid()),  # noqa: PLW1509 (prctl only; no locks taken)
        )
    server = Server(
        proc=proc,
        log=log,
        endpoint=Endpoint(url=f"http://127.0.0.1:{port_of(argv)}", health=health),
        started=time.monotonic(),
    )
    try:
        yield server
    finally:
        server.stop()


def environment(plan: ServePlan, base: Mapping[str, str]) -> dict[str, str]:
    """The process environment with the serve plan's variables over it (the token budget)."""
    return {**base, **serve_env(plan)}


def vllm_environment(plan: ServePlan, base: Mapping[str, str]) -> dict[str, str]:
    """vLLM's: the plan's variables (DeepEP V2's mode) and DEBUG logging, where its buffer's line is."""
    return {**base, **vllm_env(plan), **LOGGING}
