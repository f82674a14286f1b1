"""Lock files: every Python distribution a layer installs, pinned with its hashes (locks/<name>.txt).

A lock is uv's requirements output (`uv pip compile --generate-hashes`) under a header epstack writes:
the inputs it was resolved from, one `# key: value` line each, their sha256, and the sha256 of the
entries below (uv's output as written). Comparing the first digest with the one the current pins give
tells a stale lock without resolving anything; the second, verified on read, tells an edited one
(epstack.python.lockcontent reads the entries themselves). This module only reads and writes the
files; epstack.python.lock resolves them, render copies them into the build context, and the guard
reads them inside the images (imagepaths.LOCKS, $EPSTACK_LOCKS).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from epstack.errors import BadInput
from epstack.inputs import read_text
from epstack.layers import venv_locks
from epstack.python.resolve import Resolution, parse_compiled

DEFAULT_LOCKS = Path("locks")
# The images' venv gets uv from pip before uv installs the rest: its entry of the base lock, alone.
UV_BOOTSTRAP = "uv-bootstrap.txt"
_INPUT = re.compile(r"^# (?P<key>[a-z][a-z0-9 ._-]*): (?P<value>.*)$")
DIGEST_KEY = "inputs-sha256"
ENTRIES_KEY = "entries-sha256"


def locks_dir(value: Path | None) -> Path:
    """The locks a command reads or writes: its argument, else $EPSTACK_LOCKS, else ./locks."""
    return value or Path(os.environ.get("EPSTACK_LOCKS") or DEFAULT_LOCKS)


def lock_path(directory: Path, name: str) -> Path:
    return directory / f"{name}.txt"


def inputs_digest(inputs: Mapping[str, str]) -> str:
    """sha256 over the `key: value` lines: equal inputs, equal digest."""
    text = "".join(f"{key}: {value}\n" for key, value in inputs.items())
    return hashlib.sha256(text.encode()).hexdigest()


def entries_digest(body: str) -> str:
    """sha256 of a lock's entries as written: any changed, added or removed byte changes it."""
    return hashlib.sha256(body.encode()).hexdigest()


def pins_digest(resolution: Resolution) -> str:
    """sha256 of a lock's name==version lines: what an upper lock is constrained by (not its hashes or
    comments, so a lower lock written again with the same pins leaves the upper ones fresh)."""
    pins = sorted(p.pin for p in resolution.packages)
    return hashlib.sha256("".join(f"{pin}\n" for pin in pins).encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class LockFile:
    name: str
    inputs: dict[str, str]  # the header's `# key: value` lines, the digests excluded
    digest: str  # the header's inputs-sha256; "" when absent (a hand-written file)
    entries_digest: str  # the header's entries-sha256; "" when absent
    entries_intact: bool  # the entries below the header still have that entries-sha256
    body_start: int  # the line number of the first entry line (the header ends above it)
    resolution: Resolution  # the entries, parsed
    text: str  # the whole file


def render_lock(name: str, inputs: Mapping[str, str], resolution: Resolution) -> str:
    """Header (inputs, their digest, the entries' digest) and uv's output."""
    # The header is part of every committed lock (its old command name included): unchanged.
    lines = [f"# epstack lock {name}: written by `epstack lock` from pins.env; do not edit."]
    lines += [f"# {key}: {value}" for key, value in inputs.items()]
    lines.append(f"# {DIGEST_KEY}: {inputs_digest(inputs)}")
    lines.append(f"# {ENTRIES_KEY}: {entries_digest(resolution.text)}")
    return "\n".join(lines) + "\n" + resolution.text


def parse_lock(name: str, text: str) -> LockFile:
    """The header is the title comment and the `# key: value` lines under it; the entries are the rest."""
    lines = text.splitlines(keepends=True)
    header: dict[str, str] = {}
    end = 1 if text.startswith("#") else 0
    while end < len(lines) and (match := _INPUT.match(lines[end].rstrip("\r\n"))):
        header[match["key"]] = match["value"]
        end += 1
    body = "".join(lines[end:])
    digest, recorded = header.pop(DIGEST_KEY, "").strip(), header.pop(ENTRIES_KEY, "").strip()
    return LockFile(
        name=name,
        inputs=header,
        digest=digest,
        entries_digest=recorded,
        entries_intact=bool(recorded) and recorded == entries_digest(body),
        body_start=end + 1,
        resolution=parse_compiled(body),
        text=text,
    )


def read_lock(directory: Path, name: str) -> LockFile | None:
    """The lock, or None when there is no such file."""
    path = lock_path(directory, name)
    if not os.path.lexists(path):
        return None
    return parse_lock(name, read_text(path, what=f"the {name} lock"))


def entry_text(lock: LockFile, name: str) -> str:
    """One distribution's pin and --hash lines from a lock, as a requirements file of its own."""
    canonical = canonicalize_name(name)
    package = next((p for p in lock.resolution.packages if p.name == canonical), None)
    if package is None or not package.hashes:
        raise BadInput(f"lock {lock.name} has no hashed {name} entry; fix: run epstack pins lock")
    hashes = "".join(f" \\\n    --hash={digest}" for digest in package.hashes)
    return f"{package.pin}{hashes}\n"


def expected_distributions(directory: Path, layer: str) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """{canonical name: (version, lock file name)} the locks of `layer` hold together, and the files
    read. BadInput when one is missing or two disagree on a version."""
    expected: dict[str, tuple[str, str]] = {}
    files = []
    for name in venv_locks(layer):
        lock = read_lock(directory, name)
        path = lock_path(directory, name)
        if lock is None:
            raise BadInput(f"{path}: no such lock; fix: run epstack pins lock (images carry theirs)")
        files.append(str(path))
        for package in lock.resolution.packages:
            version, origin = expected.get(package.name, (package.version, path.name))
            if version != package.version:
                raise BadInput(
                    f"{path}: {package.pin}, but {origin} has {version}; "
                    "fix: run epstack pins lock (an upper lock never moves a lower one)"
                )
            expected[package.name] = (version, origin)
    return expected, files
