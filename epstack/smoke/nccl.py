"""The NCCL a process really runs: the libnccl mapped into it, asked through ctypes.

Never torch.cuda.nccl.version(): that is the number torch was compiled against (2.28.9 printed
while 2.30.7 was loaded, on the H200 machine). Call after `import torch`, which maps libnccl. For
processes of their own (SGLang's server and the schedulers it forks, all in one session), the
libraries each one maps (/proc/PID/maps), each asked for its version here.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from epstack.checkrow import Check
from epstack.guard.loaded import decode_nccl_version, library_version, mapped_libraries
from epstack.stack import DEEPEP_V2_MIN_NCCL, release


@dataclass(frozen=True, kw_only=True)
class NcclInfo:
    path: str
    code: int  # what ncclGetVersion returns, e.g. 23007
    paths: tuple[str, ...]  # every libnccl mapped (more than one is itself a problem)

    @property
    def version(self) -> tuple[int, int, int]:
        return decode_nccl_version(self.code)

    @property
    def text(self) -> str:
        return ".".join(map(str, self.version))

    @property
    def new_enough(self) -> bool:
        return self.version >= release(DEEPEP_V2_MIN_NCCL)


def loaded_nccl(maps: Path = Path("/proc/self/maps")) -> NcclInfo | None:
    """The version of the libnccl mapped into this process, or None when none is mapped."""
    paths = tuple(mapped_libraries(maps.read_text(), "libnccl.so"))
    if not paths:
        return None
    # Already mapped: dlopen hands back that same library.
    return NcclInfo(path=paths[0], code=library_version(paths[0], "ncclGetVersion"), paths=paths)


@dataclass(frozen=True, kw_only=True)
class ProcessNccl:
    """The libnccl one process maps, and that library's own ncclGetVersion."""

    pid: int
    command: str  # /proc/PID/comm
    path: str
    version: str  # "unreadable" where the library gives no version


def session_nccl(session: int, proc: Path = Path("/proc")) -> list[ProcessNccl]:
    """Every libnccl mapped by a process of `session` (a server started in a session of its own: its
    schedulers too), by pid; processes gone meanwhile are left out."""
    found: list[ProcessNccl] = []
    versions: dict[str, str] = {}
    for folder in sorted(proc.glob("[0-9]*"), key=lambda path: int(path.name)):
        with contextlib.suppress(OSError):  # a process that ended, or one this user may not read
            stat = (folder / "stat").read_text()
            if int(stat.rpartition(")")[2].split()[3]) != session:  # state ppid pgrp session
                continue
            maps, command = (folder / "maps").read_text(), (folder / "comm").read_text().strip()
            for path in mapped_libraries(maps, "libnccl.so"):
                if path not in versions:
                    versions[path] = _version(path)
                found.append(
                    ProcessNccl(pid=int(folder.name), command=command, path=path, version=versions[path])
                )
    return found


def _version(path: str) -> str:
    try:
        return ".".join(map(str, decode_nccl_version(library_version(path, "ncclGetVersion"))))
    except (OSError, AttributeError):
        return "unreadable"


def processes_check(loaded: list[ProcessNccl], what: str) -> Check:
    """One row: one NCCL in every process of `what` that maps one, at DeepEP V2's floor or above."""
    row = {"component": f"NCCL ({what})", "expected": f"one libnccl, >= {DEEPEP_V2_MIN_NCCL}"}
    if not loaded:
        return Check(
            **row, found="none mapped", verdict="skipped", detail=f"no process of {what} maps libnccl"
        )
    versions = sorted({each.version for each in loaded})
    pids = sorted({each.pid for each in loaded})
    doubled = len(loaded) > len(pids)
    found = f"{', '.join(versions)} in {len(pids)} process{'es' if len(pids) > 1 else ''}"
    good = len(versions) == 1 and not doubled and versions[0] != "unreadable"
    good = good and release(versions[0]) >= release(DEEPEP_V2_MIN_NCCL)
    detail = "; ".join(sorted({f"{each.version} {each.path}" for each in loaded}))
    return Check(**row, found=found, verdict="ok" if good else "mismatch", detail=detail)
