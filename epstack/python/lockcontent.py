"""What a lock must hold, read from its entries: the half of `lock --check` (and of render and build,
which refuse stale locks) that trusts no header, offline.

A lock's header says what it was resolved from; its entries are what an image installs. So each entry
line is read too: the lock's requirements at their pins, its overrides and one-CUDA constraints
wherever they apply, none of its exclusions and no wheel of another CUDA major, every entry hashed with
sha256, the same versions as the locks below it (but those it owns), nothing but the lines uv writes,
and the entries unchanged since `epstack pins lock` wrote them (their entries-sha256). Each problem names
its line; the fix is always `epstack pins lock`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from epstack.errors import shown
from epstack.python.lockfile import ENTRIES_KEY, LockFile
from epstack.python.resolve import Pinned, Resolution, parse_compiled
from epstack.stack import other_cuda_major

# Enough to see what was done to a lock; a lock edited into thousands of problems stays one line.
MAX_SHOWN = 5
_SHA256_LINE = re.compile(r"^--hash=sha256:[0-9a-f]{64}(?: \\)?$")


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One `name==version` line of a lock and the distribution it pins."""

    line: int
    package: Pinned


@dataclass(frozen=True, kw_only=True)
class Rule:
    """What a lock's spec says of one distribution: the versions allowed, whether it must be there."""

    requirement: Requirement
    role: str  # "required", "overridden", "constrained to one CUDA"
    required: bool


def _rules(
    requirements: tuple[str, ...], overrides: tuple[str, ...], constraints: tuple[str, ...]
) -> list[Rule]:
    """One rule per distribution named: a requirement's, else an override's, else a constraint's."""
    found: dict[str, Rule] = {}
    for texts, role, required in (
        (requirements, "required", True),
        (overrides, "overridden", False),
        (constraints, "constrained to one CUDA", False),
    ):
        for text in texts:
            requirement = Requirement(text)
            found.setdefault(
                canonicalize_name(requirement.name),
                Rule(requirement=requirement, role=role, required=required),
            )
    return list(found.values())


def _snippet(text: str) -> str:
    return repr(text.strip()[:60])


def read_entries(lock: LockFile) -> tuple[list[Entry], list[str]]:
    """The lock's entries with their line numbers, and its lines that are none of what uv writes
    (a pin, an indented sha256 --hash, a comment)."""
    pin_lines: list[int] = []
    foreign: list[str] = []
    lines = lock.resolution.text.splitlines()
    for number, line in enumerate(lines, start=lock.body_start):
        stripped = line.strip()
        indented = line[:1].isspace()
        if not stripped or stripped.startswith("#"):
            continue
        if indented and pin_lines and _SHA256_LINE.match(stripped):
            continue
        if parse_compiled(line).packages:  # a pin line (parse_compiled reads no indented one as a pin)
            pin_lines.append(number)
        elif indented and stripped.startswith("--hash="):
            foreign.append(f"line {number}: {_snippet(line)} is not a sha256 --hash of an entry above")
        else:
            foreign.append(f"line {number}: {_snippet(line)} is no `name==version` entry as uv writes it")
    # parse_compiled read the same pin lines, in this order, into lock.resolution, with their hashes
    pairs = zip(pin_lines, lock.resolution.packages, strict=True)
    return [Entry(line=number, package=package) for number, package in pairs], foreign


def _entry_problems(entries: list[Entry], major: int, excludes: tuple[str, ...]) -> Iterator[str]:
    seen: dict[str, int] = {}
    excluded = {canonicalize_name(name) for name in excludes}
    for entry in entries:
        package, where = entry.package, f"line {entry.line}: {entry.package.pin}"
        try:
            Version(package.version)
        except InvalidVersion:
            yield f"{where}: {shown(package.version)} is not a version"
        if package.name in seen:
            yield f"{where}: {package.name} is locked twice (also line {seen[package.name]})"
        seen.setdefault(package.name, entry.line)
        if not package.hashes:
            yield f"{where}: no --hash (every entry is installed with --require-hashes)"
        if package.name in excluded:
            yield f"{where}: excluded from this lock (its header's excludes)"
        elif other_cuda_major(package.name, major):
            yield f"{where}: a wheel of another CUDA major than this image's CUDA {major}"


def _rule_problems(entries: list[Entry], spec_rules: list[Rule]) -> Iterator[str]:
    for rule in spec_rules:
        name = canonicalize_name(rule.requirement.name)
        found = [entry for entry in entries if entry.package.name == name]
        if rule.required and not found:
            yield f"no entry holds {rule.requirement} ({rule.role})"
        for entry in found:
            if not rule.requirement.specifier.contains(entry.package.version, prereleases=True):
                yield f"line {entry.line}: {entry.package.pin}, but {rule.requirement} ({rule.role})"


def _below_problems(
    entries: list[Entry], below: Mapping[str, Resolution], own: tuple[str, ...]
) -> Iterator[str]:
    for lower, resolution in below.items():
        versions = resolution.versions
        for entry in entries:
            locked = versions.get(entry.package.name)
            if entry.package.name not in own and locked not in (None, entry.package.version):
                yield (
                    f"line {entry.line}: {entry.package.pin}, but {lower}.txt holds "
                    f"{entry.package.name}=={locked} (an upper lock never moves a lower one)"
                )


def _digest_problem(lock: LockFile) -> str | None:
    if not lock.entries_digest:
        return (
            f"line {lock.body_start - 1}: the header records no {ENTRIES_KEY}, so nothing says the entries "
            "are as `epstack pins lock` wrote them"
        )
    if not lock.entries_intact:
        last = lock.body_start + len(lock.resolution.text.splitlines()) - 1
        return (
            f"lines {lock.body_start}-{last}: not as `epstack pins lock` wrote them ({ENTRIES_KEY} differs)"
        )
    return None


def content_problems(
    lock: LockFile,
    *,
    cuda_major: int,
    requirements: tuple[str, ...],
    overrides: tuple[str, ...] = (),
    constraints: tuple[str, ...] = (),
    excludes: tuple[str, ...] = (),
    below: Mapping[str, Resolution],
    own: tuple[str, ...] = (),
) -> tuple[str, ...]:
    """Every way the lock's entries differ from what its spec and `below` (the locks under it, by
    name) say it holds, the first MAX_SHOWN of them; () for a lock as `epstack pins lock` wrote it."""
    entries, foreign = read_entries(lock)
    problems = [
        *foreign,
        *_entry_problems(entries, cuda_major, excludes),
        *_rule_problems(entries, _rules(requirements, overrides, constraints)),
        *_below_problems(entries, below, own),
    ]
    digest = _digest_problem(lock)
    problems += [digest] if digest else []
    shown = list(dict.fromkeys(problems))
    if len(shown) > MAX_SHOWN:
        shown = [*shown[:MAX_SHOWN], f"and {len(shown) - MAX_SHOWN} more"]
    return tuple(shown)
