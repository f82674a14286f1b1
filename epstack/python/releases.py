"""The pins that name a release on the package index: which distribution each pins.env key versions,
how uv says a pinned release is not there (`pins bump`), and the releases the index lists
(`pins outdated`), read from the same index uv resolves against."""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from epstack.errors import EnvironmentProblem
from epstack.pins.model import Pins


def index_pins(pins: Pins) -> dict[str, str]:
    """pins.env key -> the distribution whose release it pins (the CUDA-major wheel names derived)."""
    return {
        "SGLANG_VERSION": "sglang",
        "TORCH_VERSION": "torch",
        "NCCL_VERSION": pins.wheels.nccl,
        "NVSHMEM_VERSION": pins.wheels.nvshmem,
        "UV_VERSION": "uv",
        "NIXL_VERSION": pins.wheels.nixl,
    }


def missing_release(reason: str, distribution: str, version: str) -> bool:
    """Whether uv's `reason` for a failed resolution is that the index has no `distribution==version`."""
    name = re.escape(str(canonicalize_name(distribution))).replace(r"\-", "[-_.]")
    return re.search(rf"there is no version of {name}=={re.escape(version)}\b", reason, re.I) is not None


DEFAULT_INDEX = "https://pypi.org/simple"
INDEX_TIMEOUT_S = 20.0
_SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


def index_url() -> str:
    """The index uv resolves against (the variables epstack.python.resolve passes on), so the releases
    listed are the ones uv can pick: UV_DEFAULT_INDEX, else UV_INDEX_URL, else PyPI."""
    return (os.environ.get("UV_DEFAULT_INDEX") or os.environ.get("UV_INDEX_URL") or DEFAULT_INDEX).rstrip("/")


def list_command(distribution: str, index: str) -> str:
    """The command that asks the index what `releases` asks it."""
    return f"curl -sS -H 'Accept: {_SIMPLE_JSON}' {_project_url(distribution, index)}"


def releases(distribution: str, *, index: str, timeout: float = INDEX_TIMEOUT_S) -> tuple[str, ...]:
    """Every final release of `distribution` on the simple index (PEP 691 JSON where the index speaks
    it, else PEP 503 HTML), newest first; a release whose every file is yanked, and pre-releases, are
    left out; none when the index has no such project. EnvironmentProblem when it cannot be asked."""
    url = _project_url(distribution, index)
    request = urllib.request.Request(url, headers={"Accept": f"{_SIMPLE_JSON}, text/html;q=0.1"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            kind = response.headers.get_content_type()
            body = response.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return ()
        raise EnvironmentProblem(f"{url} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise EnvironmentProblem(f"cannot reach {url}: {getattr(exc, 'reason', exc)}") from None
    files = _json_files(body, url) if kind == _SIMPLE_JSON else _html_files(body)
    kept: dict[Version, bool] = {}
    for filename, yanked in files:
        version = _version_of(filename)
        if version is not None and not version.is_prerelease:
            kept[version] = kept.get(version, False) or not yanked
    return tuple(str(version) for version in sorted(kept, reverse=True) if kept[version])


def _project_url(distribution: str, index: str) -> str:
    return f"{index.rstrip('/')}/{canonicalize_name(distribution)}/"


def _json_files(body: str, url: str) -> list[tuple[str, bool]]:
    try:
        files = json.loads(body)["files"]
        return [(str(entry["filename"]), bool(entry.get("yanked"))) for entry in files]
    except (ValueError, KeyError, TypeError):
        raise EnvironmentProblem(f"{url}: not a PEP 691 project page") from None


class _Anchors(HTMLParser):
    """The files a PEP 503 project page links: (filename, yanked)."""

    def __init__(self) -> None:
        super().__init__()
        self.files: list[tuple[str, bool]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "a" and attributes.get("href"):
            path = urllib.parse.urlsplit(attributes["href"] or "").path
            self.files.append((urllib.parse.unquote(path.rsplit("/", 1)[-1]), "data-yanked" in attributes))


def _html_files(body: str) -> list[tuple[str, bool]]:
    parser = _Anchors()
    parser.feed(body)
    return parser.files


def _version_of(filename: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        if filename.endswith((".tar.gz", ".zip")):
            return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        pass
    return None
