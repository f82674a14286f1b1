"""What `jit probe --ship` leaves in an image at build time, from the probe's own compiles: FlashInfer's
modules (compiled in the image's workspace, then kept read-only with their key) and Triton's launcher for
each folder GPU nodes mount the driver in. The kernels made on a GPU ship by export instead
(epstack.jit.gpuexport, `jit layer`)."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path

from epstack.errors import BadInput, EnvironmentProblem
from epstack.jit import flashinfer, triton
from epstack.jit.probereport import JitReport

WORKSPACE_VARIABLE = "FLASHINFER_WORKSPACE_BASE"


def shipping_workspace(env: Mapping[str, str]) -> dict[str, str]:
    """The environment FlashInfer's probe compiles in when it ships: the image's own workspace, which
    must hold no module yet (the probe compiles from an empty cache)."""
    base = flashinfer.workspace(env)
    if flashinfer.module_dirs(base):
        raise BadInput(
            f"{base}: already holds compiled FlashInfer modules, and the probe compiles from an empty "
            f"cache; fix: {WORKSPACE_VARIABLE}=<an empty folder>, or remove them"
        )
    return {WORKSPACE_VARIABLE: str(base)}


def ship_flashinfer(report: JitReport, base: Path, into: Path) -> flashinfer.ShippedModules | None:
    """The modules FlashInfer's probe compiled in `base`, into `into` with their key (None: not probed)."""
    probe = next((p for p in report.probes if p.toolchain == "flashinfer"), None)
    if probe is None:
        return None
    key = flashinfer.ModulesKey(
        flashinfer=flashinfer.installed_version(),
        archs=report.archs,
        nvcc=probe.compiler_version,
        workspace=str(base),
    )
    return flashinfer.ship(base, key, into)


def ship_triton(report: JitReport, into: Path, env: Mapping[str, str]) -> triton.ShippedLaunchers | None:
    """Triton's launcher, built against the driver stub for each node folder of libcuda.so.1, into `into`
    (None: the launcher was not probed)."""
    if not any(p.toolchain == "triton-launcher" for p in report.probes):
        return None
    dirs = triton.node_libcuda_dirs(env)
    stub = env.get("EPSTACK_CUDA_STUB") or (f"{dirs[0]}/libcuda.so.1" if dirs else "")
    if not stub:
        raise EnvironmentProblem(
            "no libcuda.so.1 to link Triton's launcher against; fix: source scripts/image/cuda-stub.sh"
        )
    with tempfile.TemporaryDirectory(prefix="epstack-triton-") as work:
        launchers = triton.build(Path(work) / "cache", stub, Path(work))
        return triton.ship(Path(work) / "cache", launchers, into)
