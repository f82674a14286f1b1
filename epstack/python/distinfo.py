"""Installed distributions, read without trusting their metadata. The guard exists to report broken
installs, so a missing METADATA or RECORD, a version that is not PEP 440 or a malformed Requires-Dist
comes back as a stated problem, never as an exception."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from epstack.checkrow import Check
from epstack.errors import shown


@dataclass(frozen=True, kw_only=True)
class Dist:
    """One installed distribution as far as its metadata can be read."""

    name: str  # the metadata's Name, else the .dist-info directory's
    version: str  # "" when the metadata has none
    location: str  # the .dist-info (or .egg-info) directory
    problem: str  # "" when the metadata is sound, else what is wrong with it


def _location(dist: metadata.Distribution) -> str:
    return str(getattr(dist, "_path", "") or "?")


def name_of(dist: metadata.Distribution) -> str:
    """The distribution's name, from its metadata or, failing that, its .dist-info directory."""
    name = dist.metadata["Name"] if dist.metadata is not None else None
    return name or Path(_location(dist)).name.split("-", 1)[0]


def describe(dist: metadata.Distribution) -> Dist:
    version = dist.version or ""
    if not version:
        problem = "no METADATA (or no Version in it)"
    elif _invalid(version):
        problem = f"version {shown(version)} is not a PEP 440 version"
    else:
        problem = ""
    return Dist(name=name_of(dist), version=version, location=_location(dist), problem=problem)


def _invalid(version: str) -> bool:
    try:
        Version(version)
    except InvalidVersion:
        return True
    return False


def find(name: str) -> Dist | None:
    """The installed distribution `name`, or None when there is none."""
    try:
        return describe(metadata.distribution(name))
    except metadata.PackageNotFoundError:
        return None


def requirements(name: str) -> tuple[list[Requirement], list[str]]:
    """`name`'s Requires-Dist, parsed, and the lines that could not be (with why)."""
    try:
        lines = metadata.requires(name) or []
    except metadata.PackageNotFoundError:
        return [], []
    parsed, broken = [], []
    for line in lines:
        try:
            parsed.append(Requirement(line))
        except InvalidRequirement as exc:
            broken.append(f"{shown(line)}: {str(exc).splitlines()[0]}")
    return parsed, broken


def files(dist: metadata.Distribution) -> tuple[list[metadata.PackagePath], str]:
    """The files RECORD lists, and "" or what is wrong with RECORD (missing, malformed)."""
    try:
        listed = dist.files
    except Exception as exc:  # importlib.metadata fails any way on a malformed RECORD
        return [], f"malformed RECORD ({type(exc).__name__}: {exc})"
    if listed is None:
        return [], "no RECORD"
    return list(listed), ""


def broken(component: str, expected: str, dist: Dist) -> Check:
    """The row for a distribution whose metadata cannot be read or trusted."""
    return Check(
        component=component,
        expected=expected,
        found=dist.version or "unreadable metadata",
        verdict="mismatch",
        detail=f"{dist.location}: {dist.problem}",
    )
