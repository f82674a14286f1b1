"""The bare GPU host a phase runs on: its settings from the environment, its log, its commands.

Every absolute path of the host goes through `Host.at`, so a test runs a phase in a temporary root.
Commands are argv lists; a failed command is noted with its exit status and the run goes on, as the
shell script this replaces did."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

from epstack import cmd
from epstack.errors import BadInput, EnvironmentProblem

Argv = Sequence[object]  # a command: program and arguments, each str()'d (paths, numbers)

# No RDMA NIC on the host: no GIN, direct mode. NVLS stays off (the machine sets it; kept explicit).
FIXED_ENVIRONMENT = {
    "PYTHONUNBUFFERED": "1",
    "EP_DISABLE_GIN": "1",
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
# The image sets no CC/CXX; the host's point at other compilers (gpu-notes.md).
NO_COMPILERS: dict[str, str | None] = {"CC": None, "CXX": None, "CUDAHOSTCXX": None}
POLL_S = 5  # how often a -wait phase looks whether its detached run ended
# Where the install phase puts epstack's own dependencies (run_h200.sh puts it on PYTHONPATH).
DEPS = "/opt/epstack-deps"


@dataclass(frozen=True, kw_only=True)
class Host:
    """One run's settings: OUT, GPU_SRC, PYTHON, NPROC and the environment every phase starts from."""

    out: Path
    sources: Path
    python: str
    nproc: int
    env: Mapping[str, str]
    root: Path = Path("/")
    started: float = field(default_factory=time.monotonic)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], *, root: Path = Path("/")) -> Host:
        env = {**environ, **FIXED_ENVIRONMENT}
        env.setdefault("EP_JIT_CACHE_DIR", "/tmp/ep-jit-cache")
        return cls(
            out=Path(environ.get("OUT") or Path.cwd() / "out"),
            sources=Path(environ.get("GPU_SRC") or ".gpu-src"),
            python=environ.get("PYTHON") or "python3",
            nproc=_ranks(environ),
            env=env,
            root=root,
        )

    def at(self, path: str | PurePosixPath) -> Path:
        """An absolute host path (/tmp/..., /opt/...) under this run's root."""
        return self.root / str(path).lstrip("/")

    def setting(self, name: str, default: str) -> str:
        return self.env.get(name) or default

    @property
    def ferry(self) -> Path:
        """Where the ferried stack's chunks arrive (FERRY, else /opt/ferry): benchmarks/serve/ferry-*.sh."""
        return Path(self.env.get("FERRY") or self.at("/opt/ferry"))

    def environ(self, changes: Mapping[str, str | None] | None = None) -> dict[str, str]:
        """The phase's environment: the run's, each change set, or unset where None."""
        env = dict(self.env)
        for name, value in (changes or {}).items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env

    def seconds(self) -> int:
        return int(time.monotonic() - self.started)

    def note(self, text: str) -> None:
        """`[Ns] text` on stdout and into $OUT/run.log, N the seconds since the run started."""
        line = f"[{self.seconds()}s] {text}"
        print(line, flush=True)
        with (self.out / "run.log").open("a") as log:
            log.write(line + "\n")

    def record(self, argv: Argv, *, before: str = "", after: str = "") -> None:
        """The command as run.log keeps it: `+ [before ]argv[  after]`."""
        with (self.out / "run.log").open("a") as log:
            log.write(f"+ {before}{' '.join(str(a) for a in argv)}{after}\n")

    def run(
        self,
        argv: Argv,
        *,
        env: Mapping[str, str] | None = None,
        console: Path | None = None,
        append: bool = False,
        tail: int = 0,
    ) -> int:
        """Run argv; its exit status (127 for a missing program, as a shell says). Its output goes to
        this process's, or with `console` into that file (appended with `append`); `tail` prints the
        last lines of what it wrote."""
        if console is None:
            if not tail:
                return _status(argv, env=env or self.env)
            with tempfile.TemporaryFile() as sink:
                status = _status(argv, env=env or self.env, sink=sink)
                sink.seek(0)
                print_tail(sink.read().decode(errors="replace"), tail)
            return status
        console.parent.mkdir(parents=True, exist_ok=True)
        offset = console.stat().st_size if append and console.exists() else 0
        with console.open("ab" if append else "wb") as sink:
            status = _status(argv, env=env or self.env, sink=sink)
        if tail:
            print_tail(console.read_bytes()[offset:].decode(errors="replace"), tail)
        return status

    def remove(self, *paths: Path) -> None:
        """`rm -rf`: the folders the phases make are made read-only (the image's JIT folders)."""
        self.run(["rm", "-rf", *paths])

    def output(self, argv: Argv, *, env: Mapping[str, str] | None = None) -> str:
        """Argv's standard output (its errors go to ours); '' when it fails."""
        try:
            result = cmd.run(*map(str, argv), env=env or self.env, echo=False)
        except EnvironmentProblem as missing:
            print(missing, file=sys.stderr)
            return ""
        sys.stderr.write(result.stderr)
        return result.stdout

    def start(self, argv: Argv, *, env: Mapping[str, str], console: Path) -> subprocess.Popen[bytes]:
        """Argv started with its output into `console`; wait for it with `.wait()`."""
        console.parent.mkdir(parents=True, exist_ok=True)
        with console.open("wb") as sink:
            return subprocess.Popen([str(a) for a in argv], env=env, stdout=sink, stderr=subprocess.STDOUT)

    def detach(self, argv: Argv, *, env: Mapping[str, str], console: Path, pid_file: Path) -> int:
        """Argv in a session of its own (setsid), so it outlasts this run: output into `console`,
        stdin from /dev/null, its pid written to `pid_file` and returned."""
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, str(console), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
            (os.POSIX_SPAWN_DUP2, 1, 2),
        ]
        args = [str(a) for a in argv]
        pid = os.posix_spawnp(args[0], args, env, file_actions=actions, setsid=True)
        pid_file.write_text(f"{pid}\n")
        return pid

    def wait_for(self, pid: int, *, limit_s: int) -> bool:
        """Wait until `pid` ends or the run is `limit_s` seconds old (WAIT_S); True when it ended."""
        while alive(pid) and self.seconds() < limit_s:
            time.sleep(POLL_S)
        return not alive(pid)


def _ranks(environ: Mapping[str, str]) -> int:
    """NPROC: the ranks (GPUs) for the smoke, upstream and hang phases, 2 unless set."""
    value = environ.get("NPROC") or "2"
    if not value.isdigit():
        raise BadInput(f"NPROC={value!r}: not a whole number; fix: NPROC=1, 2, 4 or 8 (ranks on this host)")
    return int(value)


def _status(argv: Argv, *, env: Mapping[str, str], sink: IO[bytes] | None = None) -> int:
    args = [str(a) for a in argv]
    errors = None if sink is None else subprocess.STDOUT
    try:
        return subprocess.run(args, env=env, stdout=sink, stderr=errors, check=False).returncode
    except FileNotFoundError:
        print(f"{args[0]}: command not found", file=sys.stderr)
        return 127


def alive(pid: int) -> bool:
    """Whether `pid` still runs: a child of this process is reaped once it ends (kill -0 would see
    the zombie)."""
    try:
        ended, _ = os.waitpid(pid, os.WNOHANG)
        return ended == 0
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def print_tail(text: str, lines: int) -> None:
    for line in text.splitlines()[-lines:]:
        print(line)


def tail_file(path: Path, lines: int) -> None:
    if path.is_file():
        print_tail(path.read_text(errors="replace"), lines)


def matches(folder: Path, pattern: str) -> list[Path]:
    """Folder/pattern's matches, sorted; the pattern itself when none match (as a shell passes it)."""
    return sorted(folder.glob(pattern)) or [folder / pattern]


def count_lines(path: Path, pattern: str, *, matching: bool = True) -> int:
    """`grep -c` (or `grep -vc`): the lines of `path` that contain `pattern` (or do not); 0 without it."""
    if not path.is_file():
        return 0
    return sum((pattern in line) == matching for line in path.read_text(errors="replace").splitlines())


def verdicts(path: Path) -> str:
    """`grep -o '"verdict": "[a-z]*"'`: each verdict in a guard row's JSON, one a line."""
    return "\n".join(re.findall(r'"verdict": "[a-z]*"', path.read_text() if path.is_file() else ""))
