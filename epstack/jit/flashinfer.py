"""FlashInfer's JIT modules, compiled when the image is built (no GPU needed) and shipped in it.

FlashInfer compiles a module at its first use, with ninja, into
$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/<version>/<arch>/cached_ops/<module>/ (flashinfer/jit/env.py;
SGLang's default sampler, `sampling`: 86-456 s of nvcc on a cold pod). Its build.ninja names every
object by absolute path and ninja rebuilds an output whose command or path its log does not hold, so a
module is reused only in the folder it was built in, with its timestamps. The <arch> folder is the GPU's
own (90a on an H200) unless FLASHINFER_CUDA_ARCH_LIST names others: a GPU of another arch looks in
another folder and compiles, never loads these; another FlashInfer version looks in another too.

At build, `epstack jit probe --ship` compiles MODULES in the image's FLASHINFER_WORKSPACE_BASE, one
process per arch as a GPU node names its folder, and `ship` moves the tree under imagepaths.JIT with a
manifest (their key, each file's sha256). At start the entrypoint copies it back into that folder,
timestamps kept (epstack.jit.install); `ninja -n` then has nothing to do (`pending`), which the
guard's row (`guard_rows`) checks with the rest.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

from epstack import imagepaths
from epstack.checkrow import Check
from epstack.cmd import run
from epstack.document import Schema
from epstack.errors import BadInput, EpstackError
from epstack.jit.install import CacheHome
from epstack.jit.probereport import read_report, report_path
from epstack.jit.shipped import (
    CacheFile,
    changed_files,
    install_folder,
    manifest_beside,
    none_shipped,
    sha256_hex,
)

SHIPPED = Path(imagepaths.JIT) / "flashinfer"  # the workspace's .cache/flashinfer tree, read-only
NAME = "flashinfer"
TITLE = "FlashInfer"
COMPONENT = f"JIT cache {TITLE}"
GUARD_SCOPES: tuple[str, ...] = ("sglang", "vllm")
CHECKED_AT_START = True  # where its modules are, and whether ninja would build them again
# The modules SGLang 0.5.23 compiles on its serve path for the profiles epstack knows: its default
# sampler is FlashInfer's (`_sampling_backend_default`, srt/arg_groups/overrides.py), and sglang-kernel's
# rmsnorm calls FlashInfer's `norm` (sgl_kernel/elementwise.py), whose CUDA JIT module took 35-39 s of
# every cold start's first forward on an H200 (benchmarks/serve/results/cold-start-sampled/, sampled stacks).
# The image sets FLASHINFER_USE_CUDA_NORM=1, so FlashInfer takes that shipped module rather than its
# CuTe DSL kernels, which compile at run time. Attention comes precompiled in sglang-kernel, and
# FlashInfer's allreduce fusion stays off beside an all-to-all backend such as deepep_v2.
MODULES: dict[str, tuple[str, str]] = {
    "sampling": ("flashinfer.jit.sampling", "gen_sampling_module"),
    "norm": ("flashinfer.jit.norm", "gen_norm_module"),
}
_LOCKS = "tmp"  # cached_ops/tmp holds FlashInfer's lock files, never shipped
USE_CUDA_NORM = "FLASHINFER_USE_CUDA_NORM"  # "1" (the sglang image's ENV): rmsnorm from the `norm` module


@dataclass(frozen=True, kw_only=True)
class ModulesKey:
    """What decides whether FlashInfer loads a shipped module or compiles it again."""

    flashinfer: str  # flashinfer-python's version: a folder of the path
    archs: tuple[str, ...]  # FLASHINFER_CUDA_ARCH_LIST of each compile, one arch each
    nvcc: str  # `nvcc 13.0.88`: the compiler the build's probe ran
    workspace: str  # FLASHINFER_WORKSPACE_BASE they were built in: every object's path starts there


@dataclass(frozen=True, kw_only=True)
class ShippedModules:
    key: ModulesKey
    modules: tuple[str, ...]
    files: tuple[CacheFile, ...]  # relative to the workspace, e.g. .cache/flashinfer/0.7.2/90a/...

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)


FLASHINFER_CACHE = Schema(
    name="flashinfer-cache",
    version=1,
    model=ShippedModules,
    what="a FlashInfer module cache manifest",
    fix="rebuild the image: its sglang guard step ships them (`epstack jit probe --ship`)",
)


def norm_compiles_cute_dsl(env: Mapping[str, str]) -> bool:
    """FlashInfer's rmsnorm takes its CuTe DSL kernels, compiled at first use, rather than the `norm`
    module: without FLASHINFER_USE_CUDA_NORM=1 wherever the CuTe DSL (`cutlass`) is installed."""
    return env.get(USE_CUDA_NORM) != "1" and importlib.util.find_spec("cutlass") is not None


def workspace(env: Mapping[str, str]) -> Path:
    """FlashInfer's workspace base as it reads it: FLASHINFER_WORKSPACE_BASE, else the home folder."""
    return Path(env.get("FLASHINFER_WORKSPACE_BASE") or Path(env.get("HOME", "~")).expanduser())


HOME = CacheHome(
    variable="FLASHINFER_WORKSPACE_BASE",
    default=workspace,
    name=SHIPPED.name,
    entries=(".cache/flashinfer/*/*/*/*",),
    what="FlashInfer's modules compile at first use into",
    copy_when_moved=False,  # its objects are named by absolute path: moved, its modules compile there
)


def installed_version() -> str:
    """flashinfer-python's version here ("" when it is not installed)."""
    try:
        return metadata.version("flashinfer-python")
    except metadata.PackageNotFoundError:
        return ""


def _cache_files(base: Path) -> list[Path]:
    """Every file of the compiled tree under a workspace (or a shipped copy), lock files left out."""
    root = base / ".cache" / "flashinfer"
    return sorted(
        path
        for path in root.rglob("*")
        if path.is_file()
        and not path.is_symlink()
        and path.relative_to(root).parts[2:4] != ("cached_ops", _LOCKS)
    )


def module_dirs(base: Path) -> list[Path]:
    """The module folders under a workspace (or a shipped copy): <version>/<arch>/cached_ops/<module>."""
    found = (base / ".cache" / "flashinfer").glob("*/*/cached_ops/*")
    return sorted(path for path in found if path.is_dir() and path.name != _LOCKS)


def ship(base: Path, key: ModulesKey, into: Path = SHIPPED) -> ShippedModules:
    """Move what the probe compiled in workspace `base` into a new folder `into` (readable by every
    user) with its manifest beside; `base` is left empty for the copy at start. Renames keep each
    file's timestamp, which ninja reads."""
    files = _cache_files(base)
    modules = tuple(sorted({path.name for path in module_dirs(base)}))
    if not modules:
        raise BadInput(f"{base}: no compiled FlashInfer module to ship; fix: run `epstack jit probe --ship`")
    manifest = ShippedModules(
        key=key,
        modules=modules,
        files=tuple(
            CacheFile(path=p.relative_to(base).as_posix(), sha256=sha256_hex(data), bytes=len(data))
            for p, data in ((p, p.read_bytes()) for p in files)
        ),
    )

    def fill(staging: Path) -> None:
        for path in files:
            target = staging / path.relative_to(base)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(path, target)
            target.chmod(0o755 if target.stat().st_mode & 0o111 else 0o644)

    refusal = "already holds FlashInfer modules; fix: ship into a new image layer or folder"
    install_folder(into, FLASHINFER_CACHE.dumps(manifest), manifest.files, fill, refusal=refusal)
    shutil.rmtree(base / ".cache", ignore_errors=True)
    return manifest


def read_manifest(into: Path = SHIPPED) -> ShippedModules | None:
    """The manifest of the modules shipped in `into`; None when none are."""
    path = manifest_beside(into)
    return FLASHINFER_CACHE.read(path) if path.is_file() else None


def pending(base: Path, manifest: ShippedModules) -> dict[str, str]:
    """Each shipped module that ninja would build again in workspace `base`, with ninja's first step
    (or why ninja could not tell); a module not copied there yet is `not copied`."""
    found = {}
    shipped = sorted({Path(f.path).parent for f in manifest.files if Path(f.path).name == "build.ninja"})
    for relative in shipped:
        folder = base / relative
        if not (folder / "build.ninja").is_file():
            found[relative.as_posix()] = "not copied"
            continue
        try:
            result = run(
                "ninja", "-n", "-C", str(folder), "-f", str(folder / "build.ninja"), echo=False, timeout=60
            )
        except (EpstackError, OSError) as exc:
            found[relative.as_posix()] = f"ninja did not run: {exc}"
            continue
        lines = result.stdout.strip().splitlines()
        if result.returncode != 0 or not lines or "no work to do" not in lines[-1]:
            steps = [line for line in lines if line.startswith("[")]
            found[relative.as_posix()] = (steps or lines or [result.stderr.strip()])[0]
    return found


FIX = "rebuild the image: its sglang guard step compiles and ships them (`jit probe --ship`)"


def _probed_nvcc(layer: str = "sglang") -> str:
    """The compiler version FlashInfer's probe ran in this image's build ("" without its report)."""
    path = report_path(layer)
    if not path.is_file():
        return ""
    probes = read_report(path).probes
    return next((p.compiler_version for p in probes if p.toolchain == "flashinfer"), "")


def guard_rows(
    env: Mapping[str, str],
    archs: Sequence[str],
    folder: Path = SHIPPED,
    *,
    verify_bytes: bool = True,
) -> list[Check]:
    """FlashInfer's shipped modules: intact (`verify_bytes`; the start trusts the build's record for
    them), made for this image, and where FlashInfer looks now (copied there at start, ninja idle)."""
    manifest = read_manifest(folder)
    expected = f"FlashInfer modules for {' '.join(archs) or 'the image'}"
    if manifest is None:
        return [
            none_shipped(
                COMPONENT,
                expected,
                "each module compiles at first use (sampling: 86-456 s of nvcc)",
                FIX,
            )
        ]
    key = manifest.key
    row = Check(
        component=COMPONENT,
        expected=expected,
        found=f"{', '.join(manifest.modules)}: {len(manifest.files)} files, {manifest.bytes:,} bytes; "
        f"flashinfer {key.flashinfer}, {' '.join(key.archs)}, {key.nvcc}",
        verdict="ok",
    )
    problem = _foreign(manifest, folder, archs, verify_bytes)
    if problem:
        return [
            replace(
                row,
                expected=f"{expected}, made in this image",
                verdict="mismatch",
                detail=problem,
                fix=FIX,
            )
        ]
    if "norm" in manifest.modules and norm_compiles_cute_dsl(env):
        return [
            replace(
                row,
                verdict="warn",
                detail=f"{USE_CUDA_NORM} is not 1: FlashInfer's rmsnorm takes its CuTe DSL "
                "kernels, compiled at first use, not the shipped norm module",
                fix=f"{USE_CUDA_NORM}=1 (the image sets it)",
            )
        ]
    return [_placement(row, manifest, folder, workspace(env))]


def _foreign(manifest: ShippedModules, folder: Path, archs: Sequence[str], verify_bytes: bool) -> str:
    """Why the shipped modules are not this image's ("" when they are)."""
    broken = changed_files(folder, manifest.files) if verify_bytes else []
    if broken:
        return (
            f"{len(broken)} files missing or changed since {manifest_beside(folder).name}, e.g. {broken[0]}"
        )
    key = manifest.key
    made = {"flashinfer": key.flashinfer, "archs": " ".join(key.archs), "nvcc": key.nvcc}
    here = {
        "flashinfer": installed_version(),
        "archs": " ".join(archs),
        "nvcc": _probed_nvcc() or key.nvcc,
    }
    differences = [f"{name} {made[name]} != {value}" for name, value in here.items() if made[name] != value]
    if differences:
        return (
            f"made for another install ({'; '.join(differences)}): FlashInfer would compile them "
            "again, never load these"
        )
    return ""


def _placement(row: Check, manifest: ShippedModules, folder: Path, base: Path) -> Check:
    """The row as FlashInfer will find the modules in workspace `base`: copied there, ninja idle."""
    built_in = manifest.key.workspace
    if str(base) != built_in:
        return replace(
            row,
            verdict="warn",
            detail=f"FLASHINFER_WORKSPACE_BASE is {base}; they were built in {built_in} and FlashInfer "
            "names its objects by absolute path, so they compile again at first use",
            fix=f"FLASHINFER_WORKSPACE_BASE={built_in}, writable (a cluster job's cache mount is)",
        )
    rebuilt = pending(base, manifest)
    if rebuilt and set(rebuilt.values()) == {"not copied"}:
        return replace(row, detail=f"{folder}; the entrypoint copies them into {base} at start")
    if rebuilt:
        module, step = next(iter(rebuilt.items()))
        return replace(
            row,
            verdict="warn",
            detail=f"in {base}, ninja would build {len(rebuilt)} again, e.g. {module}: {step}",
            fix="start through the image's entrypoint, which copies them with their timestamps",
        )
    return replace(row, detail=f"in {base}: ninja has nothing to build")
