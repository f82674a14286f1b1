"""Read a pins.env file as data: KEY=VALUE lines, comments, line numbers. Never a shell.

Every line is read even after a bad one, so a file written for bash (`export`, quotes, `$VAR`) gets
all its problems in one run. A key whose line is wrong is left out of the entries and named in a
Problem instead, so nothing downstream reports it twice.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from epstack.errors import BadInput, shown
from epstack.inputs import read_text

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What a shell would expand, chain or redirect; none of it is data.
_SHELL = re.compile(r"\$|`|;|\||&|<|>|\\|\"|'")
_QUOTED = re.compile(r"""^(["'])(.*)\1$""")
_INLINE_COMMENT = re.compile(r"\s+#.*$")
# A version specifier such as >=2.30.7 is a range, not shell: let the model say so.
_VERSION_SPEC = re.compile(r"^(?:(?:===?|[<>]=?|~=|!=)\s*[0-9.*]+\s*,?\s*)+$")


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One KEY=VALUE line: where it stands, and the comment lines just above it."""

    key: str
    value: str
    line: int
    comment: str


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One thing wrong in a pins file: its line (0: the file as a whole), the key if known, and
    'what is wrong; fix: how'."""

    line: int
    key: str
    text: str


@dataclass(frozen=True, kw_only=True)
class PinsFile:
    """The good entries of one pins file, in file order, keys unique, and the problems of the rest."""

    path: Path
    entries: dict[str, Entry]
    problems: tuple[Problem, ...] = ()

    def line_of(self, key: str | None) -> int:
        entry = self.entries.get(key) if key else None
        return entry.line if entry else 0

    def where(self, key: str | None) -> str:
        """`path:line` of a key, or just the path when the key is absent."""
        line = self.line_of(key)
        return f"{self.path}:{line}" if line else str(self.path)

    def problem(self, key: str | None, message: str, fix: str) -> Problem:
        return Problem(line=self.line_of(key), key=key or "", text=f"{message}; fix: {fix}")

    def error(self, key: str | None, message: str, fix: str) -> BadInput:
        """A one-line BadInput naming the file, the key's line and the fix."""
        return BadInput(f"{self.where(key)}: {message}; fix: {fix}")

    def report(self, problems: list[Problem]) -> BadInput:
        """Every problem as its own `path:line: what; fix: how` line, in file order."""
        lines = [
            f"{self.path}:{p.line}: {p.text}" if p.line else f"{self.path}: {p.text}"
            for p in sorted(problems, key=lambda p: (p.line or 1 << 30, p.text))
        ]
        return BadInput("\n".join(lines))


def parse_pins_file(path: Path) -> PinsFile:
    """Parse `path`, recording each malformed line as a Problem; BadInput only when it cannot be read."""
    text = read_text(path, what="a pins file")
    entries: dict[str, Entry] = {}
    problems: list[Problem] = []
    comment: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            comment = []
            continue
        if line.startswith("#"):
            comment.append(line.lstrip("#").strip())
            continue
        entry, found = _parse_line(number, line, " ".join(comment))
        comment = []
        problems += found
        if entry is None:
            continue
        if entry.key in entries:
            first = entries[entry.key].line
            problems.append(
                Problem(
                    line=number,
                    key=entry.key,
                    text=f"duplicate key {entry.key} (first set on line {first}); "
                    f"fix: keep one {entry.key} line",
                )
            )
            continue
        entries[entry.key] = entry
    return PinsFile(path=path, entries=entries, problems=tuple(problems))


def read_pins_file(path: Path) -> PinsFile:
    """Parse `path`; BadInput with every malformed line (file:line, fix) when there is one."""
    pins_file = parse_pins_file(path)
    if pins_file.problems:
        raise pins_file.report(list(pins_file.problems))
    return pins_file


def _parse_line(number: int, line: str, comment: str) -> tuple[Entry | None, list[Problem]]:
    """The entry of a line (None when its value cannot be used) and what is wrong with it."""
    problems = []
    if re.match(r"^export\s", line):
        problems.append(
            Problem(line=number, key="", text="'export' in a pins file; fix: remove it, pins.env is data")
        )
        line = line.removeprefix("export").strip()
    key, sep, value = line.partition("=")
    key = key.strip()
    if not sep or not _KEY.match(key):
        text = f"not a KEY=VALUE line: {shown(line)}; fix: write KEY=VALUE, KEY in UPPER_SNAKE"
        return None, [*problems, Problem(line=number, key="", text=text)]
    value = _INLINE_COMMENT.sub("", value).strip()
    quoted = _QUOTED.match(value)
    if not value:
        text = f"{key} has no value; fix: give {key} a literal value"
    elif quoted:
        text = f"{key}: quoted value; fix: write {key}={quoted.group(2)} (values are literal, never unquoted)"
    elif not _VERSION_SPEC.match(value) and (bad := _SHELL.search(value)):
        text = (
            f"{key} contains shell syntax {shown(bad.group())}; "
            "fix: write the literal value, pins.env is never run by a shell"
        )
    else:
        return Entry(key=key, value=value, line=number, comment=comment), problems
    return None, [*problems, Problem(line=number, key=key, text=text)]


def rewrite(text: str, values: Mapping[str, str]) -> str:
    """`text` (a pins file) with the value of each key in `values` replaced on its own line: every
    other byte (comments, order, blank lines, a ` # ...` tail, line endings) kept. BadInput when a key
    is on no KEY=VALUE line or a value is not one line of text (it would write a line of its own)."""
    lines = text.splitlines(keepends=True)
    found: set[str] = set()
    for index, raw in enumerate(lines):
        line = raw.strip()
        key, sep, rest = line.partition("=")
        if not sep or line.startswith("#") or key.strip() not in values:
            continue
        key = key.strip()
        value = _INLINE_COMMENT.sub("", rest).strip()
        start = raw.index("=") + 1 + rest.index(value) if value else raw.index("=") + 1
        lines[index] = raw[:start] + values[key] + raw[start + len(value) :]
        found.add(key)
    for key, value in values.items():
        if key not in found:
            raise BadInput(f"{key}: no {key}= line to rewrite; fix: add {key} to the pins file first")
        if not value.strip() or not value.isprintable():
            raise BadInput(
                f"{key}={shown(value)}: not one line of printable text; fix: give {key} one literal value"
            )
    return "".join(lines)
