"""deep_ep: who installed it, where it came from, its patches, what it links and what its JIT needs."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path

from packaging.utils import canonicalize_name

from epstack.checkrow import Check, Verdict
from epstack.deepepmanifest import DEEPEP_MANIFEST
from epstack.errors import BadInput, EpstackError
from epstack.guard.expected import Expected
from epstack.guard.libraries import try_import
from epstack.guard.loaded import (
    interposition_example,
    libstdcxx_interposition,
    linked_library,
    mapped_libraries,
)
from epstack.python.distinfo import files, name_of
from epstack.stack import DEEP_EP_PROVIDERS

LIBSTDCXX_FIX = "rebuild DeepEP with CC=/usr/bin/gcc CXX=/usr/bin/g++ and CUDAHOSTCXX unset"


def deep_ep_owners(distributions: Iterable[metadata.Distribution]) -> dict[str, list[Path]]:
    """Distributions whose RECORD lists files under deep_ep/, with those files' paths."""
    owners: dict[str, list[Path]] = {}
    for dist in distributions:
        owned = [f for f in files(dist)[0] if f.parts and f.parts[0] == "deep_ep"]
        if owned:
            owners.setdefault(name_of(dist), []).extend(Path(str(dist.locate_file(f))) for f in owned)
    return owners


def unreadable_deep_ep_records(distributions: Iterable[metadata.Distribution]) -> dict[str, str]:
    """Distributions that would bring deep_ep (by name) whose RECORD cannot be read: what is wrong."""
    names = {canonicalize_name(name) for name in DEEP_EP_PROVIDERS}
    return {
        name_of(dist): problem
        for dist in distributions
        if canonicalize_name(name_of(dist)) in names and (problem := files(dist)[1])
    }


def check_deep_ep_owner(
    owners: Mapping[str, list[Path]], unreadable: Mapping[str, str] | None = None
) -> Check:
    names = ", ".join(sorted(owners))
    if unreadable:
        return Check(
            component="deep_ep owner",
            expected="1 distribution",
            found=names or "unknown",
            verdict="mismatch",
            detail="; ".join(f"{name}: {problem}" for name, problem in sorted(unreadable.items())),
        )
    if not owners:
        return Check(component="deep_ep owner", expected="1 distribution", found="none", verdict="missing")
    if len(owners) > 1:
        return Check(
            component="deep_ep owner",
            expected="1 distribution",
            found=names,
            verdict="mismatch",
            detail=f"{len(owners)} distributions own deep_ep files; keep only the one built from DEEPEP_REF",
        )
    return Check(component="deep_ep owner", expected="1 distribution", found=names, verdict="ok")


def check_deep_ep_source(pins: Expected, manifest: Path) -> Check:
    """The build-time manifest records the repo and commit deep_ep was built from."""
    expected = f"{pins.deepep_repo}@{pins.deepep_ref[:12]}"
    if not manifest.exists():
        return Check(
            component="deep_ep source",
            expected=expected,
            found="no manifest",
            verdict="missing",
            detail=str(manifest),
        )
    try:
        source = DEEPEP_MANIFEST.read(manifest)
    except BadInput as exc:
        return Check(
            component="deep_ep source",
            expected=expected,
            found="unreadable manifest",
            verdict="mismatch",
            detail=str(exc),
        )
    same = source.repo == pins.deepep_repo and source.commit == pins.deepep_ref
    return Check(
        component="deep_ep source",
        expected=expected,
        found=f"{source.repo}@{source.commit[:12]}",
        verdict="ok" if same else "mismatch",
        detail=f"{manifest}; TORCH_CUDA_ARCH_LIST={source.torch_cuda_arch_list}",
    )


def _patch_files(patches: Iterable[str]) -> str:
    return ", ".join(patch.split("#")[0].rsplit("/", 1)[-1] for patch in patches) or "none"


def check_deep_ep_patches(pins: Expected, manifest: Path) -> Check:
    """The patches applied at build time (the manifest) are the ones the image's pins name."""
    component, expected = "deep_ep patches", pins.deepep_patches
    try:
        found = DEEPEP_MANIFEST.read(manifest).patches
    except BadInput as exc:
        detail = str(exc)
        return Check(component=component, expected="-", found="no manifest", verdict="skipped", detail=detail)
    if expected is None:
        detail = "pins.env names no fabric: the image's deepep.pins.env does"
        return Check(
            component=component, expected="-", found=_patch_files(found), verdict="skipped", detail=detail
        )
    return Check(
        component=component,
        expected=_patch_files(expected),
        found=_patch_files(found),
        verdict="ok" if found == expected else "mismatch",
        detail=str(manifest),
    )


def check_elastic_buffer(owners: Mapping[str, list[Path]]) -> Check:
    """`import deep_ep` works and has ElasticBuffer (DeepEP V2); imported only when installed."""
    if not owners:
        return Check(
            component="deep_ep.ElasticBuffer",
            expected="importable",
            found="deep_ep not installed",
            verdict="missing",
        )
    module, error = try_import("deep_ep")
    if module is None:
        return Check(
            component="deep_ep.ElasticBuffer",
            expected="importable",
            found="import failed",
            verdict="mismatch",
            detail=error,
        )
    has = hasattr(module, "ElasticBuffer")
    return Check(
        component="deep_ep.ElasticBuffer",
        expected="importable",
        found="importable" if has else "absent",
        verdict="ok" if has else "mismatch",
    )


def check_libstdcxx(shared_object: Path | None) -> Check:
    """A _C.so exporting libstdc++ definitions interposes them: DeepEP's JIT segfaults on first dispatch."""
    component, expected = "deep_ep _C.so libstdc++", "no libstdc++ exports"
    if shared_object is None:
        return Check(component=component, expected=expected, found="no _C.so", verdict="missing")
    try:
        symbols = libstdcxx_interposition(shared_object)
    except EpstackError as exc:
        return Check(component=component, expected=expected, found="-", verdict="skipped", detail=str(exc))
    if not symbols:
        return Check(
            component=component, expected=expected, found="none", verdict="ok", detail=str(shared_object)
        )
    example = interposition_example(symbols)
    return Check(
        component=component,
        expected=expected,
        found=f"{len(symbols)} exported (e.g. {example})",
        verdict="mismatch",
        detail=f"{shared_object} was built with a mismatched toolchain; fix: {LIBSTDCXX_FIX}",
    )


def check_nccl_link(extension: Path | None, maps_text: str) -> Check:
    """The libnccl deep_ep/_C.so resolves to (its rpath: the pinned wheel's) is the one the process
    loaded; two NCCLs in one process, or DeepEP's calls landing in another, break its GIN setup."""
    component, loaded = "deep_ep NCCL link", mapped_libraries(maps_text, "libnccl.so")
    expected = os.path.realpath(loaded[0]) if loaded else "the loaded libnccl"
    if extension is None:
        return Check(component=component, expected=expected, found="no _C.so", verdict="missing")
    try:
        linked = linked_library(extension, "libnccl.so")
    except EpstackError as exc:
        return Check(component=component, expected=expected, found="-", verdict="skipped", detail=str(exc))
    if linked is None or not loaded:
        found = "no libnccl resolved" if linked is None else os.path.realpath(linked)
        return Check(
            component=component, expected=expected, found=found, verdict="missing", detail=str(extension)
        )
    found = os.path.realpath(linked)
    verdict: Verdict = "ok" if found == expected else "mismatch"
    return Check(component=component, expected=expected, found=found, verdict=verdict, detail=str(extension))


def check_jit_prerequisites(env: Mapping[str, str], nccl_header: Path | None) -> list[Check]:
    """DeepEP V2 JITs its kernels at run time: nvcc, cuobjdump, CUDA and NCCL headers, a writable cache."""
    cuda_home = Path(env.get("CUDA_HOME") or env.get("CUDA_PATH") or "/usr/local/cuda")
    rows = []
    for tool in ("nvcc", "cuobjdump"):
        local = cuda_home / "bin" / tool
        found = shutil.which(tool, path=env.get("PATH", "")) or (
            str(local) if os.access(local, os.X_OK) else None
        )
        rows.append(
            Check(
                component=tool,
                expected="on PATH or $CUDA_HOME/bin",
                found=found or "not found",
                verdict="ok" if found else "missing",
            )
        )
    for component, header in (
        ("CUDA headers", cuda_home / "include" / "cuda.h"),
        ("NCCL headers", nccl_header),
    ):
        present = header is not None and header.is_file()
        rows.append(
            Check(
                component=component,
                expected="present",
                found=str(header) if present else "not found",
                verdict="ok" if present else "missing",
            )
        )
    return [*rows, check_jit_cache(env)]


JIT_CACHE = "EP_JIT_CACHE_DIR"


def check_jit_cache(env: Mapping[str, str]) -> Check:
    """DeepEP's JIT cache can be created and written, as this process's user, now."""
    cache = Path(env.get(JIT_CACHE) or Path(env.get("HOME", "~")).expanduser() / ".deep_ep")
    problem = _cache_problem(cache)
    return Check(
        component=JIT_CACHE,
        expected="writable",
        found=str(cache),
        verdict="mismatch" if problem else "ok",
        detail=problem,
    )


def _cache_problem(cache: Path) -> str:
    """Why DeepEP could not create and write its JIT cache at `cache`; '' when it can."""
    existing = next(p for p in (cache, *cache.parents) if _exists(p))
    name_max = os.pathconf(existing, "PC_NAME_MAX")
    longest = max((len(os.fsencode(name)) for name in cache.relative_to(existing).parts), default=0)
    if longest > name_max:
        return f"a name in it has {longest} bytes, over the {name_max} its file system allows"
    if not (existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)):
        return f"{existing} is not a writable directory"
    return ""


def _exists(path: Path) -> bool:
    """Whether `path` exists; a name too long for its file system names nothing."""
    try:
        return path.exists()
    except OSError:
        return False
