"""A shipped JIT cache: a read-only folder under imagepaths.JIT, its manifest beside it (<folder>.json,
each file's sha256) and the same digests as a sha256sum list (<folder>.sha256), which the entrypoint
checks before it copies the folder into a writable cache (epstack.jit.install); and the guard row of
a cache none is shipped of."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from epstack.checkrow import Check
from epstack.errors import BadInput


@dataclass(frozen=True, kw_only=True)
class CacheFile:
    path: str  # relative to the cache folder, e.g. cache/kernel.dispatch.<hash>/kernel.cubin
    sha256: str
    bytes: int


def none_shipped(component: str, expected: str, detail: str, fix: str) -> Check:
    """The guard row of a cache the image does not ship: skipped, with what the tool does without it."""
    return Check(
        component=component,
        expected=expected,
        found="none shipped",
        verdict="skipped",
        detail=detail,
        fix=fix,
    )


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cache_file(relative: str, data: bytes) -> CacheFile:
    return CacheFile(path=relative, sha256=sha256_hex(data), bytes=len(data))


def changed_files(folder: Path, files: Iterable[CacheFile]) -> list[str]:
    """The files of a shipped cache in `folder` missing or whose bytes differ from their sha256."""
    return [
        f.path
        for f in files
        if not (folder / f.path).is_file() or sha256_hex((folder / f.path).read_bytes()) != f.sha256
    ]


def manifest_beside(folder: Path) -> Path:
    """Where the manifest of the cache shipped in `folder` is kept: <folder>.json."""
    return folder.with_name(f"{folder.name}.json")


def sums_beside(folder: Path) -> Path:
    """Where its sha256sum list is kept: <folder>.sha256 (`sha256sum --check` in the folder)."""
    return folder.with_name(f"{folder.name}.sha256")


def sums_text(files: Iterable[CacheFile]) -> str:
    """sha256sum's own format, one `<sha256>  ./<path>` line per file."""
    return "".join(f"{f.sha256}  ./{f.path}\n" for f in files)


def install_folder(
    into: Path, manifest: str, files: Iterable[CacheFile], fill: Callable[[Path], None], *, refusal: str
) -> None:
    """A new folder `into` that `fill` fills (handed a staging folder beside it), its folders readable
    by every user, `manifest` and the sha256sum list of `files` beside it: renamed into place, so a
    failure leaves no half folder. BadInput `<into>: <refusal>` when `into` or its manifest is there."""
    if into.exists() or manifest_beside(into).exists():
        raise BadInput(f"{into}: {refusal}")
    into.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{into.name}.", dir=into.parent))
    beside = {manifest_beside(into): manifest, sums_beside(into): sums_text(files)}
    staged = {target: staging.with_name(f"{staging.name}{target.suffix}") for target in beside}
    try:
        fill(staging)
        for folder in (staging, *(p for p in staging.rglob("*") if p.is_dir())):
            folder.chmod(0o755)
        for target, path in staged.items():
            path.write_text(beside[target])
            path.chmod(0o644)
        staging.rename(into)
        for target, path in staged.items():
            path.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        for path in staged.values():
            path.unlink(missing_ok=True)
