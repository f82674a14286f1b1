"""The pins that name a release on the package index: which distribution each pins.env key versions,
how uv says a pinned release is not there (`pins bump`), and the releases the index lists
(`pins outdated`), read from the same index uv resolves against."""

from __future__ import annotations

import os
import re
import urllib.parse
from html.parser import HTMLParser

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from epstack import httpclient
from epstack.errors import shown
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
# A project page: torch's on PyPI (PEP 691 JSON, every file of every release) is a few megabytes.
MAX_PAGE_BYTES = 64 << 20
_SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
_SIMPLE_HTML = ("application/vnd.pypi.simple.v1+html", "text/html")
_MAX_FILENAME = 255  # a file's name on the index, as on any filesystem
_MAX_PART = 10**12  # a part of a release number (2026, 130, 7): a longer one is no release


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
    left out; none when the index has no such project (404). EnvironmentProblem when it cannot be asked,
    or answers anything but a project page of the distribution's files."""
    url = _project_url(distribution, index)
    answer = httpclient.request(
        "GET",
        httpclient.check_url(url, what="the package index (UV_DEFAULT_INDEX)"),
        headers={"Accept": f"{_SIMPLE_JSON}, text/html;q=0.1"},
        timeout=timeout,
        limit=MAX_PAGE_BYTES,
    )
    if answer.status == 404:
        return ()
    if not answer.ok:
        raise answer.failed(f"answered HTTP {answer.status}")
    kind = answer.headers.get_content_type()
    if kind == _SIMPLE_JSON:
        files = _json_files(answer)
    elif kind in _SIMPLE_HTML:
        files = _html_files(answer.text())
    else:
        raise answer.failed(f"answered {shown(kind, quote=False)}, not a project page (PEP 691 or 503)")
    if not files:
        raise answer.failed(f"lists no file of {distribution}: not a project page")
    kept: dict[Version, bool] = {}
    for filename, yanked in files:
        version = _version_of(filename)
        if version is not None and not version.is_prerelease:
            kept[version] = kept.get(version, False) or not yanked
    return tuple(str(version) for version in sorted(kept, reverse=True) if kept[version])


def _project_url(distribution: str, index: str) -> str:
    return f"{index.rstrip('/')}/{canonicalize_name(distribution)}/"


def _json_files(answer: httpclient.Answer) -> list[tuple[str, bool]]:
    page = answer.json()
    files = page.get("files") if isinstance(page, dict) else None
    if not isinstance(files, list) or not all(
        isinstance(entry, dict) and isinstance(entry.get("filename"), str) for entry in files
    ):
        raise answer.failed("answered no PEP 691 project page ({'files': [{'filename': ...}]})")
    return [(entry["filename"], bool(entry.get("yanked"))) for entry in files]


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
    """The version a wheel's or sdist's name carries; None for any other file, a name past _MAX_FILENAME
    characters or not ASCII, or a release part of _MAX_PART or more (never a 5000-digit version)."""
    if len(filename) > _MAX_FILENAME or not filename.isascii():
        return None
    try:
        if filename.endswith(".whl"):
            version = parse_wheel_filename(filename)[1]
        elif filename.endswith((".tar.gz", ".zip")):
            version = parse_sdist_filename(filename)[1]
        else:
            return None
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None
    return version if max((version.epoch, *version.release)) < _MAX_PART else None
