"""The rules for one pin value, written once: the Pins model (pins.env) and the layer pins files in
each image (read by the guard and the DeepEP builder) both validate with these. Each takes the text
and returns the value, or raises ValueError("what is wrong; fix: how")."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from datetime import datetime

from packaging.version import Version

from epstack import fabric
from epstack.errors import shown
from epstack.oci import parse_reference, repository_problem
from epstack.pins.deepepsources import parse_patches
from epstack.stack import GPU_ARCHS

_RANGE = re.compile(r"[<>=!~^*,]|\s")
_SHA = re.compile(r"^[0-9a-f]{40}$")
_ARCH = re.compile(r"^[0-9]+\.[0-9]+[af]?$")
# ARCH_<NAME> keys: the name becomes part of every target, tag and bake target (lowercase, '-').
ARCH_KEY = re.compile(r"^ARCH_([A-Z0-9]+(?:_[A-Z0-9]+)*)$")
SNAPSHOT_FORMAT = "%Y%m%dT%H%M%SZ"
# A distribution's canonical name (PEP 503): lowercase letters and digits joined by single -.
_DISTRIBUTION = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
# Releases past the third that are all zero only respell the same version (2.30.7.0 is 2.30.7).
_SIGNIFICANT_PARTS = 3


def exact_version(value: str) -> str:
    """One exact version in its one spelling: 2.30.7, never v2.30.7, 2.30.07, 2.30.7.0 or >=2.30.7."""
    if _RANGE.search(value):
        raise ValueError(
            f"{shown(value)} is a range, not an exact version; fix: write the version alone, e.g. 1.2.3"
        )
    try:
        version = Version(value)
    except ValueError:  # InvalidVersion, or more digits than Python makes an int of
        raise ValueError(
            f"{shown(value)} is not a version; fix: write an exact version such as 1.2.3"
        ) from None
    if version.local:
        raise ValueError(
            f"{shown(value)} carries a local tag; fix: write {shown(version.public, quote=False)} and put "
            "the tag in its own key"
        )
    canonical = str(version)
    release = version.release
    if not any(release[_SIGNIFICANT_PARTS:]):  # up to three parts: the same release again
        head = ".".join(map(str, release[:_SIGNIFICANT_PARTS]))
        canonical = head + canonical.removeprefix(".".join(map(str, release)))
    if canonical != value:
        raise ValueError(
            f"{shown(value)} is not written canonically; fix: write {shown(canonical, quote=False)}"
        )
    return value


def debian_version(value: str) -> str:
    if _RANGE.search(value) or not re.match(r"^[0-9][A-Za-z0-9.+~:-]*$", value):
        raise ValueError(
            f"{shown(value)} is not an exact Debian package version; fix: write e.g. 50.0-2ubuntu0.2"
        )
    return value


def image_by_digest(value: str) -> str:
    """NAME:TAG@sha256:<64 hex>, NAME with an optional registry host:port."""
    if "@" not in value:
        raise ValueError(
            f"{shown(value)} has no digest; fix: append @sha256:<64 hex> of the image you tested"
        )
    try:
        reference = parse_reference(value)
    except ValueError as exc:
        raise ValueError(
            f"{shown(value)} is not an image reference ({exc}); fix: write NAME:TAG@sha256:<64 hex>"
        ) from None
    if not reference.tag:
        raise ValueError(
            f"{shown(value)} has no tag; fix: write NAME:TAG@sha256:<64 hex>, the tag naming the CUDA"
        )
    return value


def repository(value: str) -> str:
    problem = repository_problem(value)
    if problem:
        raise ValueError(
            f"{shown(value)}: {problem}; fix: write e.g. epstack or registry.example:5000/team/epstack"
        )
    return value


def full_sha(value: str) -> str:
    if not _SHA.match(value):
        kind = "a short hash" if re.match(r"^[0-9a-f]{4,39}$", value) else "a branch or tag name"
        raise ValueError(
            f"{shown(value)} is {kind}; fix: write the full 40-hex commit SHA "
            f"(git rev-parse {shown(value, quote=False)})"
        )
    return value


def snapshot(value: str) -> str:
    """A real instant in snapshot.ubuntu.com's form, 20261115T000000Z."""
    try:
        if not re.fullmatch(r"[0-9]{8}T[0-9]{6}Z", value):
            raise ValueError
        datetime.strptime(value, SNAPSHOT_FORMAT)
    except ValueError:
        raise ValueError(
            f"{shown(value)} is not a UTC instant YYYYMMDDTHHMMSSZ; fix: write e.g. 20261115T000000Z"
        ) from None
    return value


def _members(value: str, what: str) -> tuple[str, ...]:
    """A comma-separated list with no empty member and no duplicate."""
    members = tuple(member.strip() for member in value.split(","))
    if "" in members:
        raise ValueError(
            f"{shown(value)} has an empty member; fix: separate {what} by single commas, none at the ends"
        )
    seen = sorted(member for member, count in Counter(members).items() if count > 1)
    if seen:
        twice = ", ".join(shown(member, quote=False) for member in seen)
        raise ValueError(f"{shown(value)} lists {twice} twice; fix: name each {what} once")
    return members


def arch_list(value: str) -> tuple[str, ...]:
    """9.0a,10.0a: GPU architectures nvcc knows (the CUDA version is checked between pins)."""
    archs = _members(value, "arch")
    for arch in archs:
        if not _ARCH.match(arch) or arch not in GPU_ARCHS:
            raise ValueError(
                f"{shown(arch)} is not a GPU architecture; fix: write e.g. 9.0a or 10.0a, comma-separated"
            )
    return archs


def fabric_list(value: str) -> tuple[str, ...]:
    fabrics = _members(value, "fabric")
    for name in fabrics:
        if name not in fabric.FABRICS:
            raise ValueError(f"{shown(name)} is not a fabric; fix: use {', '.join(fabric.FABRICS)}")
    return fabrics


def fabric_name(value: str) -> str:
    if value not in fabric.FABRICS:
        raise ValueError(f"{shown(value)} is not a fabric; fix: use one of {', '.join(fabric.FABRICS)}")
    return value


def patches(value: str) -> str:
    """A DeepEP patch series (deepepsources.parse_patches: URL#sha256, comma-separated, or none)."""
    parse_patches(value)
    return value


def distribution_list(value: str) -> str:
    """none, or distribution names, comma-separated (which names fit is a rule between pins)."""
    for name in names(value):
        if not _DISTRIBUTION.match(name):
            raise ValueError(
                f"{shown(name)} is not a distribution name; fix: write none, or names like nvidia-cuda-nvcc, "
                "comma-separated"
            )
    return value


def names(value: str) -> tuple[str, ...]:
    """The members of a list value that may be none (checked by its validator): none -> ()."""
    return () if value == "none" else _members(value, "name")


def gin_type(name: str) -> Callable[[str], str]:
    choices = fabric.FABRICS[name].gin_types

    def check(value: str) -> str:
        if value not in choices:
            raise ValueError(
                f"{shown(value)} is not a GIN type for {fabric.FABRICS[name].title}; "
                f"fix: use one of {', '.join(choices)}"
            )
        return value

    return check


def pattern(regex: str, example: str) -> Callable[[str], str]:
    """A value `regex` matches whole; `\\d` is any Unicode digit (3.١٢), so write [0-9]."""

    def check(value: str) -> str:
        if not re.fullmatch(regex, value):
            raise ValueError(
                f"{shown(value)} is not of the form {example}; fix: write a value like {example}"
            )
        return value

    return check


def arch_key(name: str) -> str:
    """hopper -> ARCH_HOPPER, the key a target's arch comes from."""
    return "ARCH_" + name.upper().replace("-", "_")


def arch_name(key: str) -> str:
    """ARCH_<NAME> -> the target's arch part (ARCH_GRACE_HOPPER -> grace-hopper)."""
    match = ARCH_KEY.match(key)
    if not match:
        raise ValueError(
            f"{key} does not make a target name; fix: write ARCH_ and a name of letters and digits "
            "joined by single underscores, e.g. ARCH_HOPPER"
        )
    return match.group(1).lower().replace("_", "-")
