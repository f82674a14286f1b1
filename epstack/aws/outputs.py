"""What a build leaves behind, as CodeBuild collects it: artifacts (files under a base directory,
globs, discard-paths, exclude-paths) and reports (JUnit XML read and counted here).

Every path read or written here is held to its place (places.py): bases and files inside the source
directory and their base, copies inside the artifacts directory; anything else is BadInput naming
`at`, the block's FILE:LINE: key in the buildspec.
"""

from __future__ import annotations

import fnmatch
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from epstack.aws.buildspec import FileSet
from epstack.aws.places import Place
from epstack.errors import BadInput, shown


def matched_files(file_set: FileSet, source: Path, *, at: str) -> list[tuple[Path, str]]:
    """(file, path in the artifact) for every file the globs match, in sorted order, no duplicates;
    the file with its symlinks followed.

    Globs are relative to base-directory (itself relative to the source directory); `**/*` is
    recursive. exclude-paths drop matches; discard-paths keeps only file names. A glob stays inside
    its base, every match (symlinks followed) inside the source directory.
    """
    place = Place.source(source)
    bases = (
        _glob(place, place.root, file_set.base_directory, at=f"{at}.base-directory")
        if file_set.base_directory
        else [place.root]
    )
    found: dict[Path, tuple[Path, str]] = {}
    for base in bases:
        if not place.hold(base, named=_shown(base, place), at=f"{at}.base-directory").is_dir():
            continue
        within = Place.base(base, file_set.base_directory)
        for pattern in file_set.files:
            for path in _glob(within, base, pattern, at=f"{at}.files"):
                relative = path.relative_to(base).as_posix()
                if any(fnmatch.fnmatch(relative, x) for x in file_set.exclude_paths):
                    continue
                real = place.hold(path, named=_shown(path, place), at=f"{at}.files")
                if real.is_file():
                    found.setdefault(path, (real, path.name if file_set.discard_paths else relative))
    return sorted(found.values(), key=lambda item: item[1])


def _shown(path: Path, place: Place) -> str:
    """A match as the buildspec's globs reach it: relative to the place they start from."""
    return path.relative_to(place.root).as_posix()


def _glob(place: Place, base: Path, pattern: str, *, at: str) -> list[Path]:
    """What `pattern` matches under `base`, sorted; the pattern itself must stay inside `place`."""
    place.hold(base / pattern, named=pattern, at=at)
    if not Path(pattern).parts:
        return [base]  # '.': pathlib's glob has no pattern left to match
    try:
        return sorted(base.glob(pattern))
    except (ValueError, NotImplementedError, OSError) as exc:
        raise BadInput(
            f"{at}: {shown(pattern)} is not a glob epstack can match ({exc}); "
            "fix: a relative glob such as 'out/**/*' ('**' only as a whole path segment)"
        ) from None


def copy_artifacts(file_set: FileSet, source: Path, artifacts: Path, *, name: str, at: str) -> list[str]:
    """Copy the matched files under `artifacts`/`name` (the primary artifact: name ""); return their
    paths there."""
    place = Place.at(
        artifacts,
        name="the artifacts directory in --out",
        fix="an artifact identifier is letters, digits and underscores (CodeBuild's rule)",
    )
    copied = []
    for path, relative in matched_files(file_set, source, at=at):
        named = f"{name}/{relative}" if name else relative
        target = place.hold(artifacts / named, named=named, at=at)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        copied.append(relative)
    return copied


@dataclass(frozen=True, kw_only=True)
class Report:
    """One report group: its files and, for JUnit XML, the counts CodeBuild shows."""

    group: str
    file_format: str
    files: tuple[str, ...]
    tests: int = 0
    failures: int = 0
    skipped: int = 0
    error: str = ""  # a file that could not be read as its format

    @property
    def status(self) -> str:
        if self.error or not self.files:
            return "FAILED" if self.error else "NO FILES"
        return "FAILED" if self.failures else "SUCCEEDED"


def read_report(group: str, file_set: FileSet, source: Path, *, at: str) -> Report:
    files = matched_files(file_set, source, at=at)
    names = tuple(relative for _, relative in files)
    if file_set.file_format != "JUNITXML":
        return Report(group=group, file_format=file_set.file_format, files=names, error="")
    tests = failures = skipped = 0
    for path, relative in files:
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError as exc:
            return Report(group=group, file_format="JUNITXML", files=names, error=f"{relative}: {exc}")
        for case in root.iter("testcase"):
            tests += 1
            if case.find("failure") is not None or case.find("error") is not None:
                failures += 1
            elif case.find("skipped") is not None:
                skipped += 1
    return Report(
        group=group, file_format="JUNITXML", files=names, tests=tests, failures=failures, skipped=skipped
    )
