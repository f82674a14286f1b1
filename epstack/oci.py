"""OCI image references, written once: the grammar of distribution's reference package.

    reference  := repository [":" tag] ["@" digest]
    repository := [host [":" port] "/"] path-component ["/" path-component]*   (at most 255 chars)
    tag        := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
    digest     := "sha256:" 64 lowercase hex (the only algorithm epstack accepts)

The first component is a registry host when it has a "." or a ":" or is "localhost". pins (the CUDA
images, IMAGE_REPOSITORY, the rendered tags) and epstack.cluster (--image, build manifests) read it here.
Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from epstack.errors import shown

MAX_TAG = 128
MAX_NAME = 255
_HOST = re.compile(
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
    r"|\[[0-9a-fA-F:]+\])(?::[0-9]{1,5})?$"
)
_PATH_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True, kw_only=True)
class Reference:
    repository: str  # with its registry host, if any
    tag: str  # "" when absent
    digest: str  # "" when absent


def tag_problem(tag: str) -> str | None:
    """Why `tag` is not a valid tag, or None."""
    if len(tag) > MAX_TAG:
        return f"the tag is {len(tag)} characters, over the {MAX_TAG} a registry accepts"
    if not _TAG.fullmatch(tag):
        return (
            f"tag {shown(tag)} may hold only letters, digits, '_', '.' and '-' and may not start with "
            "'.' or '-'"
        )
    return None


def repository_problem(name: str) -> str | None:
    """Why `name` is not a repository name (optionally with a registry host and port), or None."""
    if len(name) > MAX_NAME:
        return f"the repository name is {len(name)} characters, over {MAX_NAME}"
    first, slash, rest = name.partition("/")
    is_host = bool(slash) and ("." in first or ":" in first or first == "localhost")
    if is_host and not _HOST.fullmatch(first):
        return f"{shown(first)} is not a registry host[:port]"
    path = rest if is_host else name
    bad = next((part for part in path.split("/") if not _PATH_COMPONENT.fullmatch(part)), None)
    if bad is not None:
        return (
            f"{shown(bad)} is not a repository path component (lowercase letters and digits, joined by "
            ". _ __ -)"
        )
    return None


def parse_reference(text: str) -> Reference:
    """Split and check a reference; ValueError says what is wrong."""
    name, at, digest = text.partition("@")
    if at and not _DIGEST.fullmatch(digest):
        raise ValueError(f"{shown(digest)} is not sha256:<64 lowercase hex>")
    head, _, last = name.rpartition("/")
    repository, tag = name, ""
    if ":" in last:
        last, tag = last.split(":", 1)
        repository = f"{head}/{last}" if head else last
    problem = repository_problem(repository) or (tag_problem(tag) if tag else None)
    if problem:
        raise ValueError(problem)
    return Reference(repository=repository, tag=tag, digest=digest)
