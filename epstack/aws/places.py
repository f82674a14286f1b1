"""Where a buildspec's paths may lead: one rule for every path that lint and run-local read or write
for a buildspec.

A path is taken with its symlinks followed and must stay inside its place: the source directory for
artifacts, reports and batch task buildspecs (CodeBuild reads them from there), an artifact's base
directory for its files, the artifacts directory under --out for what run-local writes. A path
that leaves its place is a lint finding, and run-local refuses it (BadInput, exit 2) naming the
buildspec's file and line and the fix. Artifact identifiers are CodeBuild's (letters, digits and
underscores: buildspec.schema.json), so they never name a path either.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from epstack.errors import BadInput, shown

SOURCE_FIX = (
    "name a path inside the source directory, relative to it (no '..', no absolute path, "
    "no symlink that leads out)"
)


def _resolved(path: Path) -> Path:
    """`path` absolute, with `..` and every symlink that exists followed."""
    return Path(os.path.realpath(path))


@dataclass(frozen=True, kw_only=True)
class Place:
    """A directory paths must stay in (`root`, resolved), its name in messages, the fix for a path
    that leaves it."""

    root: Path
    name: str
    fix: str = SOURCE_FIX

    @classmethod
    def at(cls, root: Path, *, name: str, fix: str = SOURCE_FIX) -> Place:
        return cls(root=_resolved(root), name=name, fix=fix)

    @classmethod
    def source(cls, source: Path) -> Place:
        return cls.at(source, name="the source directory")

    @classmethod
    def base(cls, base: Path, base_directory: str) -> Place:
        """Where an artifacts or reports block's globs stay: `base` (the source when there is no
        base-directory)."""
        return cls.at(
            base, name=f"base-directory {base_directory}" if base_directory else "the source directory"
        )

    def leaves(self, path: Path, *, named: str) -> str | None:
        """Why `path` (`named` in the buildspec) is not inside this place; None when it is."""
        if "\0" in str(path):
            return f"{shown(named)} holds a NUL byte; fix: {self.fix}"
        target = _resolved(path)
        if target.is_relative_to(self.root):
            return None
        return f"{shown(named)} leads to {target}, outside {self.name} {self.root}; fix: {self.fix}"

    def hold(self, path: Path, *, named: str, at: str) -> Path:
        """`path` resolved, or BadInput `at: why` (`at`: the buildspec's FILE:LINE: key) when it
        leaves this place."""
        problem = self.leaves(path, named=named)
        if problem:
            raise BadInput(f"{at}: {problem}")
        return _resolved(path)
