"""What a build leaves behind, as CodeBuild collects it: artifacts (files under a base directory,
globs, discard-paths, exclude-paths) and reports (JUnit XML read and counted here)."""

from __future__ import annotations

import fnmatch
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from epstack.aws.buildspec import FileSet


def matched_files(file_set: FileSet, source: Path) -> list[tuple[Path, str]]:
    """(file, path in the artifact) for every file the globs match, in sorted order, no duplicates.

    Globs are relative to base-directory (itself relative to the source directory); `**/*` is
    recursive. exclude-paths drop matches; discard-paths keeps only file names.
    """
    bases = sorted(source.glob(file_set.base_directory)) if file_set.base_directory else [source]
    found: dict[Path, str] = {}
    for base in (b for b in bases if b.is_dir()):
        for pattern in file_set.files:
            for path in sorted(base.glob(pattern)):
                relative = path.relative_to(base).as_posix()
                if not path.is_file() or any(fnmatch.fnmatch(relative, x) for x in file_set.exclude_paths):
                    continue
                found.setdefault(path, path.name if file_set.discard_paths else relative)
    return sorted(found.items(), key=lambda item: item[1])


def copy_artifacts(file_set: FileSet, source: Path, destination: Path) -> list[str]:
    """Copy the matched files under `destination`; return their paths there."""
    copied = []
    for path, relative in matched_files(file_set, source):
        target = destination / relative
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


def read_report(group: str, file_set: FileSet, source: Path) -> Report:
    files = matched_files(file_set, source)
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
