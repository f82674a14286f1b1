"""The guard's row for the DeepEP kernels an image ships (epstack.jitcache): present and intact, and
made for this image (its deep_ep, nvcc, arch and install paths), with their count and bytes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from epstack.checkrow import Check
from epstack.jitcache import (
    KERNEL_CACHE,
    SHIPPED,
    install_differences,
    manifest_beside,
    sha256_hex,
)

COMPONENT = "JIT cache DeepEP"
FIX_EXPORT = (
    "on a GPU, `epstack smoke elastic --export-jit-cache FILE` in this image, then "
    "`epstack jit layer --image IMAGE --export FILE`"
)


def _damaged(folder: Path, files: Sequence[tuple[str, str]]) -> list[str]:
    """The files missing or whose bytes differ from the manifest's sha256."""
    bad = []
    for relative, sha256 in files:
        path = folder / relative
        if not path.is_file() or sha256_hex(path.read_bytes()) != sha256:
            bad.append(relative)
    return bad


def kernel_cache_rows(env: Mapping[str, str], archs: Sequence[str], folder: Path = SHIPPED) -> list[Check]:
    manifest_path = manifest_beside(folder)
    expected = f"DeepEP kernels for {' '.join(archs) or 'the image'}"
    if not manifest_path.is_file():
        return [
            Check(
                component=COMPONENT,
                expected=expected,
                found="none shipped",
                verdict="skipped",
                detail="each kernel compiles at first use (3.6-6.1 s on an H200)",
                fix=FIX_EXPORT,
            )
        ]
    manifest = KERNEL_CACHE.read(manifest_path)
    key = manifest.key
    found = (
        f"{manifest.kernels} kernels, {len(manifest.files)} files, {manifest.bytes:,} bytes; "
        f"sm {key.arch} ({key.device}, {key.sm_count} SMs), nvcc {key.nvcc}"
    )
    damaged = _damaged(folder, [(f.path, f.sha256) for f in manifest.files])
    if damaged:
        return [
            Check(
                component=COMPONENT,
                expected=f"{expected}, as {manifest_path.name} lists them",
                found=found,
                verdict="mismatch",
                detail=f"{len(damaged)} missing or changed, e.g. {damaged[0]}",
                fix=f"rebuild the layer; {FIX_EXPORT}",
            )
        ]
    differences = install_differences(key, archs, env)
    if differences:
        return [
            Check(
                component=COMPONENT,
                expected=f"{expected}, made in this image",
                found=found,
                verdict="mismatch",
                detail=f"made for another install ({'; '.join(differences)}): DeepEP would compile "
                "every kernel again, never load these",
                fix=FIX_EXPORT,
            )
        ]
    return [Check(component=COMPONENT, expected=expected, found=found, verdict="ok", detail=str(folder))]
