"""Read a pins.env file as data: KEY=VALUE lines, comments, line numbers. Never a shell."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from epstack.errors import BadInput

_KEY = re.compile(r"^[A-Z][A-Z0-9_]*$")
# What a shell would expand, chain or redirect; none of it is data.
_SHELL = re.compile(r"\$|`|;|\||&|<|>|\\|\"|'")
_INLINE_COMMENT = re.compile(r"\s+#.*$")
# A version specifier such as >=2.30.7 is a range, not shell: let the model say so.
_VERSION_SPEC = re.compile(r"^(?:(?:===?|[<>]=?|~=|!=)\s*[\d.*]+\s*,?\s*)+$")


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One KEY=VALUE line: where it stands, and the comment lines just above it."""

    key: str
    value: str
    line: int
    comment: str


@dataclass(frozen=True, kw_only=True)
class PinsFile:
    """The entries of one pins file, in file order, keys unique."""

    path: Path
    entries: dict[str, Entry]

    def where(self, key: str | None) -> str:
        """`path:line` of a key, or just the path when the key is absent."""
        entry = self.entries.get(key) if key else None
        return f"{self.path}:{entry.line}" if entry else str(self.path)

    def error(self, key: str | None, message: str, fix: str) -> BadInput:
        """A one-line BadInput naming the file, the key's line and the fix."""
        return BadInput(f"{self.where(key)}: {message}; fix: {fix}")


def read_pins_file(path: Path) -> PinsFile:
    """Parse `path`; raise BadInput (file:line, fix) on the first malformed line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{path}: no such pins file; fix: pass the path of a pins.env") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read ({exc}); fix: pass a UTF-8 text file") from None

    entries: dict[str, Entry] = {}
    comment: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            comment = []
            continue
        if line.startswith("#"):
            comment.append(line.lstrip("#").strip())
            continue
        entry = _parse_line(path, number, line, " ".join(comment))
        comment = []
        if entry.key in entries:
            first = entries[entry.key].line
            raise BadInput(
                f"{path}:{number}: duplicate key {entry.key} (first set on line {first}); "
                f"fix: keep one {entry.key} line"
            )
        entries[entry.key] = entry
    return PinsFile(path=path, entries=entries)


def _parse_line(path: Path, number: int, line: str, comment: str) -> Entry:
    where = f"{path}:{number}"
    if line.startswith("export "):
        raise BadInput(f"{where}: 'export' in pins file; fix: remove it, pins.env is data, not a script")
    key, sep, value = line.partition("=")
    key = key.strip()
    if not sep or not _KEY.match(key):
        raise BadInput(f"{where}: not a KEY=VALUE line: {line!r}; fix: write KEY=VALUE, KEY in UPPER_SNAKE")
    value = _INLINE_COMMENT.sub("", value).strip()
    if not value:
        raise BadInput(f"{where}: {key} has no value; fix: give {key} a literal value")
    bad = None if _VERSION_SPEC.match(value) else _SHELL.search(value)
    if bad:
        raise BadInput(
            f"{where}: {key} contains shell syntax {bad.group()!r}; "
            "fix: write the literal value, pins.env is never run by a shell"
        )
    return Entry(key=key, value=value, line=number, comment=comment)
