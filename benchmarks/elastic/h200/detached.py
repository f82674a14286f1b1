"""Phases that outlast a device call: started detached (setsid) in one, waited for in the next, their
results then copied to $OUT: serve-start, serve-wait, upstream-start, upstream-wait."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from benchmarks.elastic.h200.host import NO_COMPILERS, Host, count_lines, tail_file
from benchmarks.elastic.h200.smoke import upstream_name

SERVE = "/tmp/serve-bg"
UPSTREAM = "/tmp/upstream-bg"


def _copy(files: list[Path], into: Path) -> None:
    """`cp FILES... INTO/ 2>/dev/null`: those that are there."""
    for path in files:
        if path.is_file():
            shutil.copy(path, into)


def _waited(host: Host, folder: Path) -> bool:
    pid = int((folder / "pid").read_text())
    return host.wait_for(pid, limit_s=int(host.setting("WAIT_S", "570")))


def serve_start(host: Host) -> None:
    """`epstack smoke serve` on the tiny profile, detached; SERVE_ARGS adds to its flags."""
    folder = host.at(SERVE)
    host.remove(folder)
    folder.mkdir(parents=True)
    argv = [host.python, "-m", "epstack", "smoke", "serve", "--profile", "tiny", "--run-dir", folder / "run",
            "--json", folder / "serve.json", "--sglang-arg=--attention-backend=triton",
            *host.setting("SERVE_ARGS", "").split()]  # fmt: skip
    host.record(argv)
    pid = host.detach(
        argv, env=host.environ(NO_COMPILERS), console=folder / "console", pid_file=folder / "pid"
    )
    host.note(f"serve-start: detached as pid {pid}, results in {folder}")


def serve_wait(host: Host) -> None:
    folder = host.at(SERVE)
    ended = _waited(host, folder)
    tail_file(folder / "console", 40)
    if not ended:
        host.note(f"serve-wait: still running after {host.seconds()} s")
        return
    _copy(
        [folder / "serve.json", folder / "console", *sorted((folder / "run").glob("server-*.log"))], host.out
    )
    host.note("serve-wait: epstack smoke serve finished")


def upstream_start(host: Host) -> None:
    """This run's upstream phase, detached, its OUT the background folder."""
    folder = host.at(UPSTREAM)
    folder.mkdir(parents=True, exist_ok=True)
    env = host.environ({"OUT": str(folder), "UPSTREAM_TIMEOUT": host.setting("UPSTREAM_TIMEOUT", "1500")})
    argv = [sys.executable, "-m", "benchmarks.elastic.run_h200", "upstream"]
    pid = host.detach(argv, env=env, console=folder / "console", pid_file=folder / "pid")
    host.note(f"upstream-start: test_ep detached as pid {pid}, results in {folder}")


def upstream_wait(host: Host) -> None:
    folder = host.at(UPSTREAM)
    if not _waited(host, folder):
        started = count_lines(host.at(f"/tmp/{upstream_name(host)}/upstream/rank0.log"), "Testing with")
        host.note(f"upstream-wait: still running after {host.seconds()} s, {started} modes started")
        return
    _copy([*sorted(folder.glob("*.json")), *sorted(folder.glob("*.test_ep.log"))], host.out)
    _copy([folder / "run.log"], host.out / "upstream-run.log")
    tail_file(folder / "console", 20)
    host.note("upstream-wait: test_ep finished")
