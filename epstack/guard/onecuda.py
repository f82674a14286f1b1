"""One CUDA per image: every component versioned with the CUDA release is at the pinned minor.

The compiler, NVVM and headers in CUDA_HOME (what every nvcc JIT runs and reads), and the venv's
toolkit wheels (stack.CUDA_RELEASE_WHEELS: cudart, NVRTC, nvJitLink, the wheel nvcc, ...) are each one
guard row with where they live and their version; CUDA_MINOR_EXCEPTIONS names the wheels that may be of
another minor. No distribution may be built for another CUDA major (nvidia-...-cu12 in a CUDA 13 image).
Versions come from the files themselves (the compiler banner inside nvcc and cicc, cuda.h), so a check
at container start runs no compiler.
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path

from packaging.utils import canonicalize_name

from epstack.checkrow import Check, Verdict
from epstack.python.distinfo import broken, find, name_of
from epstack.stack import CudaWheels, other_cuda_major

# What nvcc --version prints and cicc carries: "Cuda compilation tools, release 13.0, V13.0.88".
_BANNER = re.compile(rb"Cuda compilation tools, release (\d+\.\d+), V(\d+\.\d+\.\d+)")
_HEADER = re.compile(r"^#define CUDA_VERSION (\d+)$", re.MULTILINE)


def cuda_home(env: Mapping[str, str]) -> Path:
    """The CUDA_HOME the JITs use: CUDA_HOME, else CUDA_PATH, else /usr/local/cuda (their own order)."""
    return Path(env.get("CUDA_HOME") or env.get("CUDA_PATH") or "/usr/local/cuda")


def banner_version(binary: Path) -> str | None:
    """The CUDA release a compiler binary was built as (13.0.88), read from its banner; None if none."""
    try:
        with binary.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            found = _BANNER.search(data)
            return found[2].decode() if found else None
    except (OSError, ValueError):  # missing, unreadable, or empty (mmap refuses length 0)
        return None


def header_version(header: Path) -> str | None:
    """cuda.h's CUDA_VERSION (13000) as a release (13.0); None if unreadable."""
    try:
        found = _HEADER.search(header.read_text(errors="replace"))
    except OSError:
        return None
    return f"{int(found[1]) // 1000}.{int(found[1]) % 1000 // 10}" if found else None


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def cuda_home_checks(pinned_minor: str, home: Path) -> list[Check]:
    """CUDA_HOME's nvcc, NVVM (cicc) and headers: present and of the pinned release."""
    parts = (
        ("nvcc (CUDA_HOME)", home / "bin" / "nvcc", banner_version),
        ("NVVM (CUDA_HOME)", home / "nvvm" / "bin" / "cicc", banner_version),
        ("CUDA headers (CUDA_HOME)", home / "include" / "cuda.h", header_version),
    )
    rows = []
    for component, path, read in parts:
        version = read(path)
        verdict: Verdict
        if version is None:
            found, verdict = ("not found" if not path.exists() else "no version in it"), "missing"
        else:
            found, verdict = version, "ok" if _minor(version) == pinned_minor else "mismatch"
        rows.append(
            Check(component=component, expected=pinned_minor, found=found, verdict=verdict, detail=str(path))
        )
    return rows


def release_wheel_checks(pinned_minor: str, wheels: CudaWheels, exceptions: Iterable[str]) -> list[Check]:
    """Each installed toolkit wheel versioned with the release at the pinned minor; an excepted one at
    another minor is `override (pinned)`. Wheels that are not installed have no row."""
    excepted = set(exceptions)
    rows = []
    for name in wheels.release:
        dist = find(name)
        if dist is None:
            continue
        if dist.problem:
            rows.append(broken(name, f"{pinned_minor}.*", dist))
            continue
        verdict: Verdict = "ok" if _minor(dist.version) == pinned_minor else "mismatch"
        detail = Path(dist.location).name
        if verdict == "mismatch" and name in excepted:
            verdict, detail = "override (pinned)", f"CUDA_MINOR_EXCEPTIONS names it; {detail}"
        rows.append(
            Check(
                component=name,
                expected=f"{pinned_minor}.*",
                found=dist.version,
                verdict=verdict,
                detail=detail,
            )
        )
    return rows


def other_major_check(major: int, distributions: Iterable[metadata.Distribution]) -> Check:
    """No distribution built for another CUDA major than the image's (nvidia-cutlass-dsl-libs-cu12 in 13)."""
    names = {canonicalize_name(name_of(d)) for d in distributions}
    others = sorted(name for name in names if other_cuda_major(name, major))
    return Check(
        component="CUDA major of distributions",
        expected=f"cu{major} only",
        found=", ".join(others) or "none of another major",
        verdict="mismatch" if others else "ok",
        detail="a library of another CUDA major is never the one this image's CUDA runs" if others else "",
    )
