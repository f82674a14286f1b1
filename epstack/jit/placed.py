"""The guard row of a toolchain a serve run exports (epstack.jit.toolchain.Placed: DeepGEMM, SGLang's
JIT, Triton's kernels): its shipped kernels intact, made for this install, and in the cache the toolchain
reads, entry by entry (the entrypoint copies them there at start). Each such module's `guard_rows` is this
one, given the module itself (which it imports by name, so that mypy checks it against Placed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from epstack.checkrow import Check
from epstack.jit.shipped import changed_files, manifest_beside, none_shipped
from epstack.jit.toolchain import Placed


def _fix(chain: Placed) -> str:
    return (
        f"on a GPU, serve once in this image, `epstack jit export --toolchain {chain.NAME} --out FILE`, then "
        "`epstack jit layer --image IMAGE --export FILE`"
    )


def placed_rows(
    chain: Placed,
    env: Mapping[str, str],
    archs: Sequence[str],
    folder: Path | None = None,
    *,
    verify_bytes: bool = True,
) -> list[Check]:
    """The shipped kernels of `chain` in `folder` (its SHIPPED): intact and made for this install
    (`verify_bytes`; the start trusts the build's record for both), and in the cache it reads."""
    folder = folder or chain.SHIPPED
    component, fix = chain.COMPONENT, _fix(chain)
    manifest = chain.read_manifest(folder)
    expected = f"{chain.TITLE} kernels for {' '.join(archs) or 'the image'}"
    if manifest is None:
        return [none_shipped(component, expected, f"compiled before the server serves ({chain.COLD_S})", fix)]
    key = manifest.key
    row = Check(
        component=component,
        expected=expected,
        found=f"{manifest.kernels} kernels, {manifest.bytes:,} bytes; {chain.made_with(key)}, "
        f"sm {key.arch} ({key.device}, {key.sm_count} SMs)",
        verdict="ok",
    )
    broken = changed_files(folder, manifest.files) if verify_bytes else []
    if broken:
        return [
            replace(
                row,
                expected=f"{expected}, as {manifest_beside(folder).name} lists them",
                verdict="mismatch",
                detail=f"{len(broken)} missing or changed, e.g. {broken[0]}",
                fix=f"rebuild the layer; {fix}",
            )
        ]
    # At start (verify_bytes False) the build's record vouches for the install the key was checked
    # against at build; checking it again would run nvcc at every container start.
    differences = chain.install_differences(key, archs, env) if verify_bytes else []
    if differences:
        return [
            replace(
                row,
                expected=f"{expected}, made in this image",
                verdict="mismatch",
                detail=f"made for another install ({'; '.join(differences)}): {chain.TITLE} would compile "
                "every kernel again, never load these",
                fix=fix,
            )
        ]
    return [_placement(row, chain, manifest, folder, env)]


def _placement(row: Check, chain: Placed, manifest: Any, folder: Path, env: Mapping[str, str]) -> Check:
    """The row as the toolchain finds its kernels in its live cache: all there, none yet, or some."""
    cache = chain.cache_dir(env)
    entries = manifest.entries
    missing = [entry for entry in entries if not chain.placed(cache, entry)]
    if len(missing) == len(entries):
        return replace(row, detail=f"{folder}; the entrypoint copies them into {cache} at start")
    if missing:
        return replace(
            row,
            verdict="warn",
            detail=f"{len(missing)} of {len(entries)} not in {cache}, e.g. {missing[0]}: {chain.TITLE} "
            "compiles them at start",
            fix="start through the image's entrypoint, which copies them there",
        )
    return replace(row, detail=f"in {cache}")
