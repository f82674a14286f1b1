"""Untrusted input, read within bounds. Files a user names (pins files, manifests, build reports): read
whole, as UTF-8, only when they are regular files of a sane size; a log searched line by line, up to a
cap. A FIFO, /dev/zero, a directory, a 2 GB file or bytes that are not UTF-8 become one BadInput line,
never a hang, a MemoryError or a traceback. JSON from a file or a server (`parse_json`): at most
MAX_JSON_DEPTH deep, every number finite and of at most MAX_NUMBER_CHARS characters. Standard library
only.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

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


def _open_regular(path: Path, *, what: str) -> IO[bytes]:
    """`path` opened for reading when it is a regular file; BadInput naming `what` otherwise."""
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
    return os.fdopen(fd, "rb")


def read_bytes(path: Path, *, what: str, limit: int = MAX_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; BadInput naming `what` otherwise."""
    with _open_regular(path, what=what) as file:
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


# A log line longer than this is read as several; a log is searched up to MAX_LOG_BYTES.
MAX_LINE_BYTES = 64 << 10
MAX_LOG_BYTES = 256 << 20


def search_log(path: Path, pattern: re.Pattern[str], *, what: str, limit: int = MAX_LOG_BYTES) -> str | None:
    """The first match of `pattern` in a line of the regular file `path` within its first `limit` bytes,
    read line by line (at most MAX_LINE_BYTES at a time, so /dev/zero or a 50 GB log costs no memory);
    None when there is none. BadInput naming `what` for a path that is no regular file."""
    with _open_regular(path, what=what) as file:
        for line in _lines(file, limit):
            found = pattern.search(line)
            if found:
                return found.group(0)
    return None


def _lines(file: IO[bytes], limit: int) -> Iterator[str]:
    read = 0
    while read < limit and (line := file.readline(MAX_LINE_BYTES)):
        read += len(line)
        yield line.decode("utf-8", errors="replace")


# JSON epstack reads (its own documents, a server's answers) is a few levels deep and its numbers are
# counts, sizes and versions: anything past these bounds is refused, before it can cost time or memory.
MAX_JSON_DEPTH = 64
MAX_NUMBER_CHARS = 40


class _Refused(ValueError):
    """Why parse_json refused a document, in words."""


def _number(text: str) -> str:
    if len(text) > MAX_NUMBER_CHARS:
        raise _Refused(f"a number of {len(text):,} characters (at most {MAX_NUMBER_CHARS})")
    return text


def _float(text: str) -> float:
    value = float(_number(text))
    if not math.isfinite(value):
        raise _Refused(f"{text}, a number past what a float holds")
    return value


def _constant(name: str) -> float:
    raise _Refused(f"{name}, which JSON does not allow for a number")


def _depth(value: object) -> int:
    """How deep containers nest in `value` (a scalar is 0), walked without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children)
    return deepest


def parse_json(text: str | bytes, *, nonfinite: bool = False) -> Any:
    """`text` as JSON within the bounds: at most MAX_JSON_DEPTH deep, numbers of at most MAX_NUMBER_CHARS
    characters and finite (no NaN, Infinity or 1e999). ValueError saying what is wrong in words
    ("not JSON (Expecting value, line 1)", "nested deeper than 64"): the caller adds where and the fix.
    `nonfinite` lets NaN and Infinity through as floats, for a caller that judges each value itself (a
    server's logprobs, where a NaN is the finding, not a malformed answer)."""
    try:
        value = json.loads(
            text.decode("utf-8") if isinstance(text, bytes) else text,
            parse_int=lambda s: int(_number(s)),
            parse_float=(lambda s: float(_number(s))) if nonfinite else _float,
            parse_constant=float if nonfinite else _constant,
        )
    except _Refused as exc:
        raise ValueError(f"JSON with {exc}") from None
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg}, line {exc.lineno})") from None
    except UnicodeDecodeError:
        raise ValueError("not JSON (not UTF-8 text)") from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH}")
    return value
