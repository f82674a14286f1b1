"""Files a user names (pins files, manifests, build reports): read whole, as UTF-8, only when they are
regular files of a sane size. A FIFO, /dev/zero, a directory, a 2 GB file or bytes that are not
UTF-8 become one BadInput line, never a hang, a MemoryError or a traceback. Standard library only.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from epstack.errors import BadInput

# A pins file is a few KiB, a build manifest or report tens of KiB.
MAX_BYTES = 4 << 20


def _kind(mode: int) -> str:
    """What an opened path that is not a regular file is: open() fails on a socket (ENXIO) and
    follows links, so a directory, a FIFO or a (character or block) device."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    return "a device"


def read_bytes(path: Path, *, what: str, limit: int = MAX_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; BadInput naming `what` otherwise."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file; fix: pass the path of {what}") from None
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise BadInput(f"{path}: cannot open {what} ({reason}); fix: pass a readable file") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise BadInput(f"{path}: {_kind(mode)}, not {what}; fix: pass a regular file")
    with os.fdopen(fd, "rb") as file:
        try:
            data = file.read(limit + 1)
        except OSError as exc:
            raise BadInput(
                f"{path}: cannot read {what} ({exc.strerror}); fix: pass a readable file"
            ) from None
    if len(data) > limit:
        raise BadInput(f"{path}: over {limit} bytes, too large for {what}; fix: pass {what} itself")
    return data


def read_text(path: Path, *, what: str, limit: int = MAX_BYTES) -> str:
    """read_bytes, decoded as UTF-8."""
    data = read_bytes(path, what=what, limit=limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(
            f"{path}: not UTF-8 text (byte {exc.start}), so not {what}; fix: save it as UTF-8"
        ) from None
