"""A package index on 127.0.0.1 made of small wheels written by the test (PEP 503 simple pages), for
uv to resolve against as it would against PyPI: `pins bump`, `pins predict`, `pins outdated`."""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import threading
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

# What the shipped pins.env needs, and the releases the tests move to: (name, version, requirements).
# torch pins its NCCL exactly, as on PyPI (torch 2.14.1: nvidia-nccl-cu13==2.30.7); pins.env installs
# a newer one over it (the base lock's override). NCCL 3.0.0 is another major, which no rule allows.
RELEASES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("torch", "2.14.1", ("nvidia-nccl-cu13==2.30.7", "nvidia-nvshmem-cu13==3.4.5")),
    ("torch", "2.15.0", ("nvidia-nccl-cu13==2.33.1", "nvidia-nvshmem-cu13==3.4.5")),
    ("nvidia-nccl-cu13", "2.30.7", ()),
    ("nvidia-nccl-cu13", "2.32.6", ()),
    ("nvidia-nccl-cu13", "2.33.1", ()),
    ("nvidia-nccl-cu13", "3.0.0", ()),
    ("nvidia-nvshmem-cu13", "3.4.5", ()),
    ("uv", "0.13.9", ()),
    ("uv", "0.14.0", ()),
    ("pip", "25.3", ()),
    ("setuptools", "81.0.0", ()),
    ("wheel", "0.48.0", ()),
    ("ninja", "1.13.2", ()),
    ("tinydep", "1.0", ()),
    ("tinydep", "2.0", ()),
    ("sglang", "0.5.23", ("torch==2.14.1", "tinydep<2")),
    ("sglang", "0.5.24", ("torch==2.14.1", "tinydep>=2")),
    ("sglang", "0.6.0", ("torch==2.15.0", "tinydep>=2")),
    # as on PyPI: the nixl module requires both CUDA builds (the locks exclude the other major's)
    ("nixl", "1.5.1", ("nixl-cu12==1.5.1", "nixl-cu13==1.5.1")),
    ("nixl-cu12", "1.5.1", ("torch",)),
    ("nixl-cu13", "1.5.1", ("torch",)),
    # as on PyPI: vllm 0.33.0 asks for torch 2.14.0, which its lock overrides to the pin
    ("vllm", "0.33.0", ("torch==2.14.0", "tinydep")),
)


def write_wheel(
    folder: Path, name: str, version: str, requires: Sequence[str] = (), files: Mapping[str, bytes] = {}
) -> Path:
    """A py3-none-any wheel holding `files` (path in the wheel -> bytes) and its dist-info (METADATA,
    WHEEL, RECORD)."""
    stem = f"{str(canonicalize_name(name)).replace('-', '_')}-{version}"
    info = f"{stem}.dist-info"
    contents: dict[str, bytes] = {
        **files,
        f"{info}/METADATA": (
            "\n".join(
                ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
                + [f"Requires-Dist: {r}" for r in requires]
            )
            + "\n"
        ).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: epstack-tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = []
    for path, data in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    contents[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    wheel = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in contents.items():
            archive.writestr(path, data)
    return wheel


def build_index(root: Path, releases: Sequence[tuple[str, str, tuple[str, ...]]] = RELEASES) -> Path:
    """files/*.whl and simple/<name>/index.html linking each with its sha256; returns root."""
    files = root / "files"
    files.mkdir(parents=True)
    links: dict[str, list[str]] = {}
    for name, version, requires in releases:
        wheel = write_wheel(files, name, version, requires)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        links.setdefault(str(canonicalize_name(name)), []).append(
            f'<a href="../../files/{wheel.name}#sha256={digest}">{wheel.name}</a>'
        )
    for name, anchors in links.items():
        page = root / "simple" / name / "index.html"
        page.parent.mkdir(parents=True)
        page.write_text("<!DOCTYPE html><html><body>\n" + "<br>\n".join(anchors) + "\n</body></html>\n")
    return root


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def served(root: Path) -> Iterator[str]:
    """Serve `root` on 127.0.0.1 (a free port); yields the simple index's URL."""
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def use_index(monkeypatch: pytest.MonkeyPatch, url: str, cache: Path) -> None:
    """uv resolves against `url` alone, with its own cache; no other index variable leaks in."""
    for name in ("UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_INDEX", "UV_OFFLINE", "UV_FIND_LINKS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("UV_DEFAULT_INDEX", url)
    monkeypatch.setenv("UV_CACHE_DIR", str(cache))
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
