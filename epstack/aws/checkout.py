"""The git checkout CodeBuild builds: its root, the commit it builds, and pins.env as committed there."""

from __future__ import annotations

import hashlib
from pathlib import Path

from epstack.cmd import output_if_ok
from epstack.errors import BadInput, shown


def git(source: Path, *args: str) -> str:
    """git's output in `source`, stripped; empty when git fails or `source` is no checkout."""
    out = output_if_ok("git", "-C", source, *args)
    return out.strip() if out is not None else ""


def source_root(path: Path) -> Path:
    """The directory CodeBuild would check out: the git work tree holding `path`, else cwd."""
    top = git(path.resolve().parent, "rev-parse", "--show-toplevel")
    return Path(top) if top else Path.cwd()


def revision(source: Path, explicit: str | None) -> str:
    """The full SHA of the commit to build: `explicit` as this checkout resolves it, else its HEAD.
    git reads `explicit` only as a revision (--end-of-options), never as an option."""
    commit = f"{explicit or 'HEAD'}^{{commit}}"
    found = git(source, "rev-parse", "--verify", "--quiet", "--end-of-options", commit)
    if found:
        return found
    if explicit:
        raise BadInput(
            f"--source-version {shown(explicit)}: not a commit of the checkout {source}; "
            "fix: pass a commit, branch or tag that `git log` shows there"
        )
    raise BadInput("no source version: not a git checkout; fix: --source-version COMMIT")


def pins_sha256(source: Path, pins: Path, revision: str) -> str:
    """sha256 of the pins file as commit `revision` has it, refused unless it equals the file here."""
    resolved = pins.resolve()
    if not resolved.is_relative_to(source):
        raise BadInput(f"{pins}: not in the checkout {source}, which CodeBuild builds; fix: use its pins.env")
    relative = resolved.relative_to(source).as_posix()
    committed = output_if_ok("git", "-C", source, "show", "--end-of-options", f"{revision}:{relative}")
    if committed is None:
        raise BadInput(f"{pins}: not in commit {revision[:12]}; fix: commit it, or pass --source-version")
    if committed != pins.read_text():
        raise BadInput(
            f"{pins}: differs from commit {revision[:12]}, which CodeBuild builds; fix: commit and push it"
        )
    return hashlib.sha256(committed.encode()).hexdigest()
