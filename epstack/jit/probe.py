"""Each JIT toolchain an image runs at first use compiles one real module, now (`epstack jit probe`).

A process that serves SGLang compiles code the first time it needs it: Triton its C launcher (gcc,
Python.h, libcuda.so.1) and each kernel (with its own ptxas), FlashInfer its modules (nvcc, ninja, a
link with -lcudart -lcuda), DeepGEMM and DeepEP their kernels (nvcc). A toolchain missing a piece fails
at the first request, on a GPU node. The probe compiles one module of each toolchain of a layer for
the target's archs, each in a process of its own with an empty cache, timed, and writes the layer's
report (imagepaths.REPORTS/jit-<layer>.json), which the guard turns into rows: the entrypoint
compiles nothing. A failure is exit 1 with the compiler's own error. DeepGEMM and DeepEP read the GPU
before they compile (each names the call): without one their row says so, and a GPU host proves them.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from epstack.checkrow import Check
from epstack.cmd import run
from epstack.errors import EpstackError
from epstack.jit.compiles import Compiled, epstack_python
from epstack.jit.probereport import JitReport, Probe, read_report, report_path

TIMEOUT_S = 1200.0
# Environment variables that decide which compiler a toolchain runs: recorded by the probe, compared
# by the guard (a container that sets another CUDA_HOME runs another compiler than the one proven).
STEERING = (
    *("CUDA_HOME", "CUDA_PATH", "CC", "CXX"),
    *("TRITON_PTXAS_PATH", "FLASHINFER_NVCC", "EP_JIT_NVCC_COMPILER", "DG_JIT_NVCC_COMPILER"),
)


@dataclass(frozen=True, kw_only=True)
class ProbeTarget:
    """What `jit probe` compiles for one toolchain, and in which layer (the toolchain: jit.toolchain)."""

    name: str  # the probe's name on the command line
    title: str
    layers: tuple[str, ...]  # the image layers that bring it (their guards show the row)
    module: str  # what the probe compiles
    needs_gpu: str = ""  # why it cannot compile without a GPU: the call that reads the device
    per_arch: bool = False  # a process per arch: its modules in that arch's folder, as a GPU finds them


PROBES = (
    ProbeTarget(
        name="triton-launcher",
        title="Triton launcher",
        layers=("base",),
        module="cuda_utils (triton/backends/nvidia/driver.c), as a process's first kernel launch builds it",
    ),
    ProbeTarget(
        name="deepep",
        title="DeepEP",
        layers=("deepep",),
        module="ElasticBuffer's dispatch and combine kernels (the elastic smoke on one rank)",
        needs_gpu="its JIT puts the device's arch and SM count into each kernel "
        "(csrc/jit/device_runtime.hpp: cudaGetDeviceProperties)",
    ),
    ProbeTarget(
        name="triton-kernel",
        title="Triton kernel",
        layers=("sglang", "vllm"),
        module="a vector add, compiled to a cubin for each arch (and run, on a GPU)",
    ),
    ProbeTarget(
        name="flashinfer",
        title="FlashInfer",
        layers=("sglang", "vllm"),
        module="sampling (flashinfer.jit.sampling), SGLang's and vLLM's default sampler (and sampling, "
        "on a GPU)",
        per_arch=True,
    ),
    ProbeTarget(
        name="deepgemm",
        title="DeepGEMM",
        layers=("sglang",),  # sgl-deep-gemm; vLLM's own DeepGEMM (vllm.third_party) reads the GPU too
        module="bf16_gemm_nt, one kernel",
        needs_gpu="every deep_jit Runtime reads the device's arch and SM count before it compiles "
        "(deep_jit/backend/cuda/options.hpp: Device::get_prop, cudaGetDeviceProperties)",
    ),
)


def _empty_caches(work: Path, archs: Sequence[str]) -> dict[str, str]:
    """Every toolchain's cache in `work`: the probe compiles, never loads what an earlier run left."""
    return {
        "TRITON_CACHE_DIR": str(work / "triton"),
        "FLASHINFER_WORKSPACE_BASE": str(work / "flashinfer"),
        "FLASHINFER_CUDA_ARCH_LIST": " ".join(archs),
        "DG_JIT_CACHE_DIR": str(work / "deep_gemm"),
        "EP_JIT_CACHE_DIR": str(work / "deep_ep"),
    }


def run_probe(
    toolchain: ProbeTarget, archs: Sequence[str], timeout: float, keep: Mapping[str, str] | None = None
) -> Probe:
    """Compile the toolchain's module in a process of its own (one per arch for a per-arch one), each
    cache empty; `keep` names cache variables set to folders of the caller's, kept after the probe."""
    steering = {key: os.environ[key] for key in STEERING if key in os.environ}
    base = Probe(
        toolchain=toolchain.name,
        title=toolchain.title,
        module=toolchain.module,
        verdict="ok",
        steering=steering,
    )
    runs = [[arch] for arch in archs] if toolchain.per_arch and archs else [list(archs)]
    with tempfile.TemporaryDirectory(prefix=f"epstack-jit-{toolchain.name}-") as work:
        child = epstack_python("epstack.jit.compiles", "child_main")
        start = time.monotonic()
        for chosen in runs:
            env = {**os.environ, **_empty_caches(Path(work), chosen), **(keep or {})}
            try:
                result = run(*child, toolchain.name, work, *chosen, env=env, timeout=timeout)
            except EpstackError as exc:
                elapsed = round(time.monotonic() - start, 1)
                return replace(base, verdict="failed", detail=str(exc), seconds=elapsed)
            if result.returncode != 0:
                elapsed = round(time.monotonic() - start, 1)
                return replace(base, verdict="failed", seconds=elapsed, detail=result.stderr.strip()[-4000:])
        elapsed = round(time.monotonic() - start, 1)
    compiled = Compiled(**json.loads(result.stdout.strip().splitlines()[-1]))
    if compiled.skipped:
        detail = f"{compiled.skipped}: {toolchain.needs_gpu}; a GPU host proves it (`epstack jit probe`)"
        return replace(
            base,
            verdict="skipped",
            compiler=compiled.compiler,
            compiler_version=compiled.version,
            detail=detail,
        )
    return replace(base, compiler=compiled.compiler, compiler_version=compiled.version, seconds=elapsed)


def probe_layer(
    layer: str,
    archs: Sequence[str],
    timeout: float = TIMEOUT_S,
    keep: Mapping[str, str] | None = None,
    only: Sequence[str] = (),
) -> JitReport:
    """Every toolchain of `layer` ("all": of every layer), in order; those named in `only`, if any."""
    chosen = [t for t in PROBES if (layer == "all" or layer in t.layers) and (not only or t.name in only)]
    return JitReport(
        layer=layer, archs=tuple(archs), probes=tuple(run_probe(t, archs, timeout, keep) for t in chosen)
    )


# ---- the guard's rows --------------------------------------------------------------------------


def probe_rows(report: JitReport, env: Mapping[str, str]) -> list[Check]:
    """One row per probe; a steering variable set otherwise than when the probe ran fails its row."""
    rows = []
    expected = f"compiles for {' '.join(report.archs)}" if report.archs else "compiles"
    for probe in report.probes:
        component = f"JIT {probe.title}"
        changed = [key for key in STEERING if env.get(key) != probe.steering.get(key)]
        if probe.verdict == "failed":
            rows.append(
                Check(
                    component=component,
                    expected=expected,
                    found="failed",
                    verdict="mismatch",
                    detail=probe.detail.splitlines()[-1] if probe.detail else "",
                )
            )
        elif changed:
            was = ", ".join(f"{key}={probe.steering.get(key, '(unset)')}" for key in changed)
            rows.append(
                Check(
                    component=component,
                    expected=f"the compiler the build proved ({was})",
                    found=", ".join(f"{key}={env.get(key, '(unset)')}" for key in changed),
                    verdict="mismatch",
                    detail="a JIT may now run another compiler; fix: restore it, or run "
                    "`epstack jit probe` with it",
                )
            )
        else:
            found = f"{probe.compiler_version} ({probe.compiler})"
            detail = probe.detail if probe.verdict == "skipped" else f"{probe.module}: {probe.seconds:g} s"
            rows.append(
                Check(
                    component=component,
                    expected=expected,
                    found=found,
                    verdict="skipped" if probe.verdict == "skipped" else "ok",
                    detail=detail,
                )
            )
    return rows


def layer_rows(layer: str, env: Mapping[str, str]) -> list[Check]:
    """The rows of a layer's JIT report; `skipped` where there is none (a bare host, an old image)."""
    path = report_path(layer)
    if not path.exists():
        return [
            Check(
                component=f"JIT ({layer} layer)",
                expected="a probe report",
                found="none",
                verdict="skipped",
                detail=f"no {path}; fix: `epstack jit probe --layer {layer}`",
            )
        ]
    return probe_rows(read_report(path), env)
