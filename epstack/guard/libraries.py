"""Native libraries loaded into this process: NCCL and CUDA as the loader mapped them."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

from packaging.version import Version

from epstack.checkrow import Check, Verdict
from epstack.guard.distributions import same_release
from epstack.guard.expected import Expected
from epstack.guard.loaded import (
    decode_cuda_version,
    library_version,
    mapped_libraries,
    nccl_version,
)


def check_nccl_loaded(pinned: str, maps_text: str) -> Check:
    """Exactly one libnccl mapped, and its own ncclGetVersion equals the pin."""
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
        found = f"{len(libraries)} libnccl mapped"
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
        return [
            Check(
                component="CUDA runtime/driver",
                expected=expected,
                found="-",
                verdict="skipped",
                detail=reason,
            )
        ]
    torch.cuda.init()
    runtimes = mapped_libraries(maps(), "libcudart.so")
    runtime = "not loaded"
    if runtimes:
        runtime = decode_cuda_version(library_version(runtimes[0], "cudaRuntimeGetVersion"))
    driver = decode_cuda_version(library_version("libcuda.so.1", "cuDriverGetVersion"))
    driver_ok = Version(driver) >= Version(expected)
    return [
        Check(
            component="CUDA runtime (loaded)",
            expected=expected,
            found=runtime,
            verdict="ok" if runtime == expected else "mismatch",
            detail=" ".join(runtimes),
        ),
        Check(
            component="CUDA driver",
            expected=f">= {expected}",
            found=driver,
            verdict="ok" if driver_ok else "mismatch",
        ),
    ]


def try_import(name: str) -> tuple[ModuleType | None, str]:
    """The module, or None and why it would not import."""
    try:
        return importlib.import_module(name), ""
    except Exception as exc:  # an import can fail any way (ImportError, OSError from a .so, ...)
        return None, f"{type(exc).__name__}: {exc}"
