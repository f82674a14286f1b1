"""Whether a process the test started is gone: the smoke's tests check that nothing is left running."""

from __future__ import annotations

import os
import time
from pathlib import Path


def dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie still answers kill(0); it is dead once its state says so
    status = Path(f"/proc/{pid}/status")
    return not status.exists() or "zombie" in status.read_text()


def gone(pid: int, within_s: float = 5.0) -> bool:
    """SIGKILL is delivered asynchronously: give the kernel a moment."""
    deadline = time.monotonic() + within_s
    while not dead(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def group_alive(pgid: int) -> bool:
    """True while any process of the group exists (zombies included until reaped)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
