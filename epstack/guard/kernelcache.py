"""The guard's rows for the JIT caches an image ships: DeepEP's kernels (epstack.jit.deepep), DeepGEMM's
(epstack.jit.deepgemm), FlashInfer's modules (epstack.jit.flashinfer) and Triton's launcher
(epstack.jit.triton), each present and intact, made for this image (its versions, nvcc, archs and
paths), with their count and bytes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from epstack.checkrow import Check
from epstack.jit import flashinfer, triton
from epstack.jit import probe as jitprobe
from epstack.jit.deepep import KERNEL_CACHE, SHIPPED, install_differences
from epstack.jit.shipped import changed_files, manifest_beside
from epstack.jit.toolchain import Placed


def _none_shipped(component: str, expected: str, detail: str, fix: str) -> Check:
    """The row of a cache the image does not ship: skipped, with what the tool does without it."""
    return Check(
        component=component,
        expected=expected,
        found="none shipped",
        verdict="skipped",
        detail=detail,
        fix=fix,
    )


COMPONENT = "JIT cache DeepEP"
FIX_EXPORT = (
    "on a GPU, `epstack smoke elastic --export-jit-cache FILE` in this image, then "
    "`epstack jit layer --image IMAGE --export FILE`"
)


def kernel_cache_rows(env: Mapping[str, str], archs: Sequence[str], folder: Path = SHIPPED) -> list[Check]:
    manifest_path = manifest_beside(folder)
    expected = f"DeepEP kernels for {' '.join(archs) or 'the image'}"
    if not manifest_path.is_file():
        return [
            _none_shipped(
                COMPONENT, expected, "each kernel compiles at first use (3.6-6.1 s on an H200)", FIX_EXPORT
            )
        ]
    manifest = KERNEL_CACHE.read(manifest_path)
    key = manifest.key
    found = (
        f"{manifest.kernels} kernels, {len(manifest.files)} files, {manifest.bytes:,} bytes; "
        f"sm {key.arch} ({key.device}, {key.sm_count} SMs), nvcc {key.nvcc}"
    )
    damaged = changed_files(folder, manifest.files)
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


def cache_component(chain: Placed) -> str:
    """The guard row's component of a toolchain's shipped kernels: "JIT cache DeepGEMM"."""
    return f"JIT cache {chain.TITLE}"


def _fix_exported(chain: Placed) -> str:
    return (
        f"on a GPU, serve once in this image, `epstack jit export --toolchain {chain.NAME} --out FILE`, then "
        "`epstack jit layer --image IMAGE --export FILE`"
    )


def exported_cache_rows(
    chain: Placed,
    env: Mapping[str, str],
    archs: Sequence[str],
    folder: Path | None = None,
    verify_bytes: bool = True,
) -> list[Check]:
    """The shipped kernels of a toolchain a serve run exports (DeepGEMM, SGLang's JIT): intact and made
    for this install (`verify_bytes`; the start trusts the build's record for both), and in the cache the
    toolchain reads (copied there at start)."""
    folder = folder or chain.SHIPPED
    component, fix = cache_component(chain), _fix_exported(chain)
    manifest = chain.read_manifest(folder)
    expected = f"{chain.TITLE} kernels for {' '.join(archs) or 'the image'}"
    if manifest is None:
        return [_none_shipped(component, expected, f"compiled before SGLang serves ({chain.COLD_S})", fix)]
    key = manifest.key
    row = Check(
        component=component,
        expected=expected,
        found=f"{manifest.kernels} kernels, {manifest.bytes:,} bytes; {chain.made_with(key)}, "
        f"sm {key.arch} ({key.device}, {key.sm_count} SMs), nvcc {key.nvcc}",
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
    cache = chain.cache_dir(env)
    entries = chain.entries(manifest)
    missing = [entry for entry in entries if not chain.placed(cache, entry)]
    if len(missing) == len(entries):
        return [replace(row, detail=f"{folder}; the entrypoint copies them into {cache} at start")]
    if missing:
        return [
            replace(
                row,
                verdict="warn",
                detail=f"{len(missing)} of {len(entries)} not in {cache}, e.g. {missing[0]}: {chain.TITLE} "
                "compiles them at start",
                fix="start through the image's entrypoint, which copies them there",
            )
        ]
    return [replace(row, detail=f"in {cache}")]


FLASHINFER = "JIT cache FlashInfer"
FIX_FLASHINFER = "rebuild the image: its sglang guard step compiles and ships them (`jit probe --ship`)"


def _probed_nvcc(layer: str = "sglang") -> str:
    """The compiler version FlashInfer's probe ran in this image's build ("" without its report)."""
    path = jitprobe.report_path(layer)
    if not path.is_file():
        return ""
    probes = jitprobe.read_report(path).probes
    return next((p.compiler_version for p in probes if p.toolchain == "flashinfer"), "")


def flashinfer_cache_rows(
    env: Mapping[str, str],
    archs: Sequence[str],
    folder: Path = flashinfer.SHIPPED,
    verify_bytes: bool = True,
) -> list[Check]:
    """FlashInfer's shipped modules: intact (`verify_bytes`; the start trusts the build's record for
    them), made for this image, and where FlashInfer looks now (copied there at start, ninja idle)."""
    manifest = flashinfer.read_manifest(folder)
    expected = f"FlashInfer modules for {' '.join(archs) or 'the image'}"
    if manifest is None:
        return [
            _none_shipped(
                FLASHINFER,
                expected,
                "each module compiles at first use (sampling: 86-456 s of nvcc)",
                FIX_FLASHINFER,
            )
        ]
    key = manifest.key
    row = Check(
        component=FLASHINFER,
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
                fix=FIX_FLASHINFER,
            )
        ]
    if "norm" in manifest.modules and flashinfer.norm_compiles_cute_dsl(env):
        return [
            replace(
                row,
                verdict="warn",
                detail=f"{flashinfer.USE_CUDA_NORM} is not 1: FlashInfer's rmsnorm takes its CuTe DSL "
                "kernels, compiled at first use, not the shipped norm module",
                fix=f"{flashinfer.USE_CUDA_NORM}=1 (the image sets it)",
            )
        ]
    return [_placement(row, manifest, folder, flashinfer.workspace(env))]


def _foreign(
    manifest: flashinfer.ShippedModules, folder: Path, archs: Sequence[str], verify_bytes: bool
) -> str:
    """Why the shipped modules are not this image's ("" when they are)."""
    broken = changed_files(folder, manifest.files) if verify_bytes else []
    if broken:
        return (
            f"{len(broken)} files missing or changed since {manifest_beside(folder).name}, e.g. {broken[0]}"
        )
    key = manifest.key
    made = {"flashinfer": key.flashinfer, "archs": " ".join(key.archs), "nvcc": key.nvcc}
    here = {
        "flashinfer": flashinfer.installed_version(),
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


def _placement(row: Check, manifest: flashinfer.ShippedModules, folder: Path, workspace: Path) -> Check:
    """The row as FlashInfer will find the modules in `workspace`: copied there, ninja idle."""
    built_in = manifest.key.workspace
    if str(workspace) != built_in:
        return replace(
            row,
            verdict="warn",
            detail=f"FLASHINFER_WORKSPACE_BASE is {workspace}; they were built in {built_in} and FlashInfer "
            "names its objects by absolute path, so they compile again at first use",
            fix=f"FLASHINFER_WORKSPACE_BASE={built_in}, writable (a cluster job's cache mount is)",
        )
    pending = flashinfer.pending(workspace, manifest)
    if pending and set(pending.values()) == {"not copied"}:
        return replace(row, detail=f"{folder}; the entrypoint copies them into {workspace} at start")
    if pending:
        module, step = next(iter(pending.items()))
        return replace(
            row,
            verdict="warn",
            detail=f"in {workspace}, ninja would build {len(pending)} again, e.g. {module}: {step}",
            fix="start through the image's entrypoint, which copies them with their timestamps",
        )
    return replace(row, detail=f"in {workspace}: ninja has nothing to build")


TRITON = "JIT cache Triton launcher"
FIX_TRITON = "rebuild the image: its base guard step builds and ships it (`jit probe --ship`)"


def triton_launcher_rows(
    env: Mapping[str, str], folder: Path = triton.SHIPPED, verify_bytes: bool = True
) -> list[Check]:
    """Triton's shipped launchers: intact (`verify_bytes`), made for this triton, and whether the
    folder this node's libcuda.so.1 is in (as Triton finds it) is one they were built for."""
    manifest = triton.read_manifest(folder)
    expected = f"Triton's launcher for libcuda.so.1 in {' or '.join(triton.LIBCUDA_DIRS)}"
    if manifest is None:
        return [
            _none_shipped(
                TRITON, expected, f"a process's first kernel launch builds it ({triton.LAUNCH_S})", FIX_TRITON
            )
        ]
    built_for = [launcher.libcuda_dir for launcher in manifest.launchers]
    row = Check(
        component=TRITON,
        expected=expected,
        found=f"triton {manifest.triton}: {', '.join(built_for)}",
        verdict="ok",
    )
    broken = changed_files(folder, [item.file for item in manifest.launchers]) if verify_bytes else []
    if broken:
        return [replace(row, verdict="mismatch", detail=f"{broken[0]} missing or changed", fix=FIX_TRITON)]
    here = triton.installed_version()
    if manifest.triton != here:
        detail = f"built for triton {manifest.triton}, here {here}: a first launch builds another"
        return [replace(row, verdict="mismatch", detail=detail, fix=FIX_TRITON)]
    if env.get("EPSTACK_CUDA_STUB"):
        return [replace(row, detail="no driver mounted here: a GPU node's is checked at its start")]
    return [_triton_placement(row, manifest, env)]


def _triton_placement(row: Check, manifest: triton.ShippedLaunchers, env: Mapping[str, str]) -> Check:
    """The row as this node's Triton will find its launcher: built for its driver's folder, copied in."""
    dirs = triton.node_libcuda_dirs(env)
    launcher = next((item for item in manifest.launchers if [item.libcuda_dir] == dirs), None)
    if launcher is None:
        return replace(
            row,
            verdict="warn",
            detail=f"libcuda.so.1 in {', '.join(dirs) or 'no folder'} here: a process's first kernel launch "
            f"builds its launcher ({triton.LAUNCH_S})",
        )
    cache = triton.cache_dir(env)
    if not (cache / launcher.file.path).is_file():
        return replace(
            row,
            verdict="warn",
            detail=f"the one for {launcher.libcuda_dir} is not in {cache}: a first launch builds it",
            fix="start through the image's entrypoint, which copies it there",
        )
    return replace(row, detail=f"the one for {launcher.libcuda_dir} in {cache}")
