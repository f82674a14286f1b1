"""Native libraries loaded into this process: NCCL and CUDA as the loader mapped them."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from packaging.version import Version

from epstack.checkrow import Check, Verdict
from epstack.guard.distributions import same_release
from epstack.guard.expected import Expected
from epstack.guard.loaded import (
    cuda_device_problem,
    decode_cuda_version,
    library_version,
    mapped_libraries,
    nccl_version,
)


def _readable_version(library: str) -> str:
    try:
        return nccl_version(library)
    except (OSError, AttributeError):
        return "unreadable"


def check_nccl_loaded(pinned: str, maps_text: str) -> Check:
    """Exactly one libnccl mapped, and its own ncclGetVersion equals the pin; where several are, each
    one's version (in the order mapped) and path."""
    libraries = mapped_libraries(maps_text, "libnccl.so")
    if not libraries:
        return Check(
            component="NCCL (loaded)",
            expected=pinned,
            found="not loaded",
            verdict="missing",
            detail="no libnccl mapped after import torch",
        )
    if len(libraries) > 1:
        found = f"{len(libraries)} libnccl mapped: {', '.join(_readable_version(lib) for lib in libraries)}"
        return Check(
            component="NCCL (loaded)",
            expected=pinned,
            found=found,
            verdict="mismatch",
            detail=" ".join(libraries),
        )
    try:
        version = nccl_version(libraries[0])
    except (OSError, AttributeError) as exc:
        return Check(
            component="NCCL (loaded)",
            expected=pinned,
            found="unreadable",
            verdict="mismatch",
            detail=str(exc),
        )
    verdict: Verdict = "ok" if same_release(version, pinned) else "mismatch"
    return Check(
        component="NCCL (loaded)", expected=pinned, found=version, verdict=verdict, detail=libraries[0]
    )


def check_cuda(pins: Expected, torch: ModuleType | None, maps: Callable[[], str]) -> list[Check]:
    """CUDA runtime (the loaded libcudart) equals the pin, driver at least as new; skipped without a GPU."""
    expected = pins.cuda_major_minor
    if torch is None or not torch.cuda.is_available():
        reason = "torch not importable" if torch is None else "no GPU: torch.cuda.is_available() is False"
        return [cuda_skipped(expected, reason)]
    torch.cuda.init()
    return cuda_rows(expected, loaded_cuda_runtime(maps()), driver_version())


def live_cuda_rows(expected: str, runtime: LoadedRuntime, library: str = "libcuda.so.1") -> list[Check]:
    """check_cuda's rows without torch: the driver as mounted now, the runtime as the build's `import
    torch` loaded it (the same files and environment load the same one)."""
    problem = cuda_device_problem(library)
    if problem:
        return [cuda_skipped(expected, problem)]
    return cuda_rows(expected, runtime, driver_version(library))


@dataclass(frozen=True, kw_only=True)
class LoadedRuntime:
    """The libcudart a process mapped: its version ("not loaded" if none) and paths."""

    version: str
    paths: tuple[str, ...]


def loaded_cuda_runtime(maps_text: str) -> LoadedRuntime:
    runtimes = mapped_libraries(maps_text, "libcudart.so")
    if not runtimes:
        return LoadedRuntime(version="not loaded", paths=())
    version = decode_cuda_version(library_version(runtimes[0], "cudaRuntimeGetVersion"))
    return LoadedRuntime(version=version, paths=tuple(runtimes))


def driver_version(library: str = "libcuda.so.1") -> str:
    return decode_cuda_version(library_version(library, "cuDriverGetVersion"))


# The components of check_cuda's rows: one skipped row without a GPU, two with one.
CUDA_SKIPPED, CUDA_RUNTIME, CUDA_DRIVER = "CUDA runtime/driver", "CUDA runtime (loaded)", "CUDA driver"


def cuda_skipped(expected: str, reason: str) -> Check:
    return Check(component=CUDA_SKIPPED, expected=expected, found="-", verdict="skipped", detail=reason)


def cuda_rows(expected: str, runtime: LoadedRuntime, driver: str) -> list[Check]:
    return [
        Check(
            component=CUDA_RUNTIME,
            expected=expected,
            found=runtime.version,
            verdict="ok" if runtime.version == expected else "mismatch",
            detail=" ".join(runtime.paths),
        ),
        Check(
            component=CUDA_DRIVER,
            expected=f">= {expected}",
            found=driver,
            verdict="ok" if Version(driver) >= Version(expected) else "mismatch",
        ),
    ]


def try_import(name: str) -> tuple[ModuleType | None, str]:
    """The module, or None and why it would not import."""
    try:
        return importlib.import_module(name), ""
    except Exception as exc:  # an import can fail any way (ImportError, OSError from a .so, ...)
        return None, f"{type(exc).__name__}: {exc}"
