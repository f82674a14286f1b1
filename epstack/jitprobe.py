"""`epstack jit probe`: each JIT toolchain an image runs at first use compiles one real module, now.

A process that serves SGLang compiles code the first time it needs it: Triton its C launcher (gcc,
Python.h, libcuda.so.1) and each kernel (with its own ptxas), FlashInfer its modules (nvcc, ninja, a
link with -lcudart -lcuda), DeepGEMM and DeepEP their kernels (nvcc). A toolchain missing a piece fails
at the first request, on a GPU node. The probe compiles one module of each toolchain of a layer for
the target's archs, each in a process of its own with an empty cache, timed, and writes the layer's
report (/opt/epstack/reports/jit-<layer>.json), which the guard turns into rows: the entrypoint
compiles nothing. A failure is exit 1 with the compiler's own error. DeepGEMM and DeepEP read the GPU
before they compile (each names the call): without one their row says so, and a GPU host proves them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from epstack.checkrow import Check
from epstack.cmd import run
from epstack.command import SubParsers, path_arg, seconds
from epstack.errors import BadInput, EpstackError
from epstack.inputs import read_text
from epstack.output import write_file
from epstack.stack import GPU_ARCHS

SCHEMA = 1
REPORTS = Path("/opt/epstack/reports")
TIMEOUT_S = 1200.0
# Environment variables that decide which compiler a toolchain runs: recorded by the probe, compared
# by the guard (a container that sets another CUDA_HOME runs another compiler than the one proven).
STEERING = (
    *("CUDA_HOME", "CUDA_PATH", "CC", "CXX"),
    *("TRITON_PTXAS_PATH", "FLASHINFER_NVCC", "EP_JIT_NVCC_COMPILER"),
)
Verdict = Literal["ok", "failed", "skipped"]
_NVIDIA_RELEASE = re.compile(r"release \d+\.\d+, V(\d+\.\d+\.\d+)")


@dataclass(frozen=True, kw_only=True)
class Toolchain:
    name: str  # the probe's name on the command line
    title: str
    layer: str  # the image layer that brings it (its guard shows the row)
    module: str  # what the probe compiles
    needs_gpu: str = ""  # why it cannot compile without a GPU: the call that reads the device


TOOLCHAINS = (
    Toolchain(
        name="triton-launcher",
        title="Triton launcher",
        layer="base",
        module="cuda_utils (triton/backends/nvidia/driver.c), as a process's first kernel launch builds it",
    ),
    Toolchain(
        name="deepep",
        title="DeepEP",
        layer="deepep",
        module="ElasticBuffer's dispatch and combine kernels (the elastic smoke on one rank)",
        needs_gpu="its JIT puts the device's arch and SM count into each kernel "
        "(csrc/jit/device_runtime.hpp: cudaGetDeviceProperties)",
    ),
    Toolchain(
        name="triton-kernel",
        title="Triton kernel",
        layer="sglang",
        module="a vector add, compiled to a cubin for each arch (and run, on a GPU)",
    ),
    Toolchain(
        name="flashinfer",
        title="FlashInfer",
        layer="sglang",
        module="sampling (flashinfer.jit.sampling), SGLang's default sampler (and sampling, on a GPU)",
    ),
    Toolchain(
        name="deepgemm",
        title="DeepGEMM",
        layer="sglang",
        module="bf16_gemm_nt, one kernel",
        needs_gpu="every deep_jit Runtime reads the device's arch and SM count before it compiles "
        "(deep_jit/backend/cuda/options.hpp: Device::get_prop, cudaGetDeviceProperties)",
    ),
)
LAYERS = ("base", "deepep", "sglang")


@dataclass(frozen=True, kw_only=True)
class Probe:
    """How one toolchain's compile went."""

    toolchain: str
    title: str
    module: str
    verdict: Verdict
    compiler: str = ""  # the compiler the toolchain runs, as it chooses it
    compiler_version: str = ""
    seconds: float = 0.0
    detail: str = ""  # the compiler's own error, or why it was skipped
    steering: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class JitReport:
    layer: str
    archs: tuple[str, ...]
    probes: tuple[Probe, ...]

    @property
    def ok(self) -> bool:
        return all(probe.verdict != "failed" for probe in self.probes)

    def to_json(self) -> str:
        document = {
            "schema": SCHEMA,
            "layer": self.layer,
            "archs": list(self.archs),
            "probes": [asdict(probe) for probe in self.probes],
        }
        return json.dumps(document, indent=2) + "\n"


def report_path(layer: str, reports: Path | None = None) -> Path:
    """Where the image keeps a layer's JIT report; EPSTACK_REPORTS names another folder."""
    folder = reports or Path(os.environ.get("EPSTACK_REPORTS") or REPORTS)
    return folder / f"jit-{layer}.json"


def read_report(path: Path) -> JitReport:
    """A report the probe wrote; BadInput naming the file for anything else."""
    try:
        document = json.loads(read_text(path, what="a JIT probe report"))
        if document.get("schema") != SCHEMA:
            raise ValueError(f"schema {document.get('schema')!r}, not {SCHEMA}")
        probes = tuple(Probe(**probe) for probe in document["probes"])
        return JitReport(layer=document["layer"], archs=tuple(document["archs"]), probes=probes)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BadInput(f"{path}: not a JIT probe report ({exc}); fix: `epstack jit probe` again") from None


# ---- the probes, each run in a process of its own ---------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Compiled:
    compiler: str
    version: str
    skipped: str = ""  # why the module was not compiled here


def _tool_version(compiler: str) -> str:
    """`nvcc 13.0.88`, `gcc 13.3.0`: the compiler's name and the version its --version prints."""
    try:
        result = run(compiler, "--version", echo=False, timeout=60)
    except EpstackError as exc:
        return f"{Path(compiler).name} unknown ({exc})"
    nvidia = _NVIDIA_RELEASE.search(result.stdout)
    first = (result.stdout.strip().splitlines() or ["unknown"])[0].split()
    return f"{Path(compiler).name} {nvidia[1] if nvidia else first[-1]}"


def _capabilities(archs: Sequence[str]) -> list[int]:
    """9.0a -> 90, 10.0a -> 100: Triton's GPUTarget capability (the 'a' features follow from it)."""
    return [int(arch.rstrip("af").replace(".", "")) for arch in archs]


def _gpu() -> bool:
    import torch  # noqa: PLC0415  (the application's torch, in the probe's own process)

    return bool(torch.cuda.is_available())


def probe_triton_launcher(archs: Sequence[str], work: Path) -> Compiled:
    from triton.backends.nvidia.driver import CudaUtils  # noqa: PLC0415
    from triton.runtime import build  # noqa: PLC0415

    CudaUtils()  # compiles driver.c into TRITON_CACHE_DIR and loads it
    finder = getattr(build, "_find_compiler", None)
    compiler = finder("c") if finder else os.environ.get("CC") or shutil.which("gcc") or "gcc"
    return Compiled(compiler=compiler, version=_tool_version(compiler))


def probe_triton_kernel(archs: Sequence[str], work: Path) -> Compiled:
    import triton  # noqa: PLC0415
    from triton import knobs  # noqa: PLC0415
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415
    from triton.backends.nvidia import compiler as nvidia  # noqa: PLC0415
    from triton.compiler import ASTSource  # noqa: PLC0415

    from epstack.tritonkernel import add  # noqa: PLC0415

    tools = []
    for capability in _capabilities(archs):
        signature = {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32"}
        source = ASTSource(add, signature, constexprs={"BLOCK": 128})
        kernel = triton.compile(source, target=GPUTarget("cuda", capability, 32))
        if not kernel.asm.get("cubin"):
            raise RuntimeError(f"Triton produced no cubin for sm_{capability}")
        # Triton 3.8 picks a ptxas per arch (get_ptxas); older ones have one.
        ptxas = nvidia.get_ptxas(capability) if hasattr(nvidia, "get_ptxas") else knobs.nvidia.ptxas
        tools.append((ptxas.path, f"ptxas {ptxas.version} for sm_{capability}"))
    if _gpu():
        _run_triton_add(add)
    return Compiled(
        compiler=", ".join(dict.fromkeys(p for p, _ in tools)), version=", ".join(v for _, v in tools)
    )


def _run_triton_add(add: object) -> None:
    """On a GPU: launch the kernel as a request would (JIT for this device, launcher, run) and check it."""
    import torch  # noqa: PLC0415

    x, y = torch.rand(1000, device="cuda"), torch.rand(1000, device="cuda")
    out = torch.empty_like(x)
    add[(8,)](x, y, out, 1000, BLOCK=128)  # type: ignore[index]
    if not torch.equal(out, x + y):
        raise RuntimeError("Triton's kernel computed a wrong sum")


def probe_flashinfer(archs: Sequence[str], work: Path) -> Compiled:
    from flashinfer.jit import cpp_ext  # noqa: PLC0415
    from flashinfer.jit.sampling import gen_sampling_module  # noqa: PLC0415

    gen_sampling_module().build_and_load()  # nvcc, then the link, then loading the .so
    if _gpu():
        import torch  # noqa: PLC0415
        from flashinfer.sampling import sampling_from_probs  # noqa: PLC0415

        probs = torch.softmax(torch.randn(4, 1000, device="cuda"), dim=-1)
        probs[:, 500:] = 0
        tokens = sampling_from_probs(probs / probs.sum(dim=-1, keepdim=True))
        if not bool((tokens < 500).all()):
            raise RuntimeError(f"FlashInfer sampled tokens of probability 0: {tokens.tolist()}")
    nvcc = os.environ.get("FLASHINFER_NVCC") or str(Path(cpp_ext.get_cuda_path()) / "bin" / "nvcc")
    return Compiled(compiler=nvcc, version=_tool_version(nvcc))


def probe_deepgemm(archs: Sequence[str], work: Path) -> Compiled:
    import deep_gemm  # noqa: PLC0415
    from deep_gemm.cuda_helpers import find_cuda_home  # noqa: PLC0415

    nvcc = str(Path(find_cuda_home()) / "bin" / "nvcc")
    if not _gpu():
        return Compiled(compiler=nvcc, version=_tool_version(nvcc), skipped="no GPU")
    import torch  # noqa: PLC0415

    a = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    d = torch.empty(256, 256, device="cuda", dtype=torch.bfloat16)
    deep_gemm.bf16_gemm_nt(a, b, d)
    error = (d.float() - a.float() @ b.float().T).abs().max().item()
    if error > 1.0:
        raise RuntimeError(f"DeepGEMM's kernel computed a wrong product (max error {error})")
    return Compiled(compiler=nvcc, version=_tool_version(nvcc))


def probe_deepep(archs: Sequence[str], work: Path) -> Compiled:
    import deep_ep  # noqa: PLC0415

    nvcc = os.environ.get("EP_JIT_NVCC_COMPILER") or str(Path(deep_ep.find_cuda_home()) / "bin" / "nvcc")
    if not _gpu():
        return Compiled(compiler=nvcc, version=_tool_version(nvcc), skipped="no GPU")
    smoke = [
        "smoke",
        "elastic",
        "--nproc-per-node",
        "1",
        "--num-tokens",
        "128",
        "--hidden",
        "2048",
        "--num-experts",
        "32",
        "--num-topk",
        "4",
        "--skip-bench",
        "--timeout",
        "600",
        "--run-dir",
        str(work / "smoke"),
        "--json",
        str(work / "smoke.json"),
    ]
    result = run(*epstack_python("epstack.cli", "main"), *smoke, timeout=TIMEOUT_S)
    if result.returncode != 0:
        raise RuntimeError(f"the elastic smoke exited {result.returncode}:\n{result.stderr[-3000:]}")
    return Compiled(compiler=nvcc, version=_tool_version(nvcc))


PROBES: dict[str, Callable[[Sequence[str], Path], Compiled]] = {
    "triton-launcher": probe_triton_launcher,
    "deepep": probe_deepep,
    "triton-kernel": probe_triton_kernel,
    "flashinfer": probe_flashinfer,
    "deepgemm": probe_deepgemm,
}


def _empty_caches(work: Path, archs: Sequence[str]) -> dict[str, str]:
    """Every toolchain's cache in `work`: the probe compiles, never loads what an earlier run left."""
    return {
        "TRITON_CACHE_DIR": str(work / "triton"),
        "FLASHINFER_WORKSPACE_BASE": str(work / "flashinfer"),
        "FLASHINFER_CUDA_ARCH_LIST": " ".join(archs),
        "DG_JIT_CACHE_DIR": str(work / "deep_gemm"),
        "EP_JIT_CACHE_DIR": str(work / "deep_ep"),
    }


def child_main() -> int:
    """In the probe's own process: compile, then print what was compiled with what, as JSON."""
    name, work, *archs = sys.argv[1:]
    compiled = PROBES[name](archs, Path(work))
    print(json.dumps(asdict(compiled)))
    return 0


def epstack_python(module: str, function: str) -> list[str]:
    """This Python running `module.function(argv)`, with epstack's folder appended (not prepended) to
    sys.path as the `epstack` command does, so the application's own packages win."""
    tool = str(Path(__file__).resolve().parent.parent)
    code = f"import sys; sys.path.append({tool!r}); from {module} import {function}; sys.exit({function}())"
    return [sys.executable, "-c", code]


def run_probe(toolchain: Toolchain, archs: Sequence[str], timeout: float) -> Probe:
    steering = {key: os.environ[key] for key in STEERING if key in os.environ}
    base = Probe(
        toolchain=toolchain.name,
        title=toolchain.title,
        module=toolchain.module,
        verdict="ok",
        steering=steering,
    )
    with tempfile.TemporaryDirectory(prefix=f"epstack-jit-{toolchain.name}-") as work:
        child = epstack_python("epstack.jitprobe", "child_main")
        env = {**os.environ, **_empty_caches(Path(work), archs)}
        start = time.monotonic()
        try:
            result = run(*child, toolchain.name, work, *archs, env=env, timeout=timeout)
        except EpstackError as exc:
            return _replace(base, verdict="failed", detail=str(exc), seconds=time.monotonic() - start)
        elapsed = round(time.monotonic() - start, 1)
    if result.returncode != 0:
        return _replace(base, verdict="failed", seconds=elapsed, detail=result.stderr.strip()[-4000:])
    compiled = Compiled(**json.loads(result.stdout.strip().splitlines()[-1]))
    if compiled.skipped:
        detail = f"{compiled.skipped}: {toolchain.needs_gpu}; a GPU host proves it (`epstack jit probe`)"
        return _replace(
            base,
            verdict="skipped",
            compiler=compiled.compiler,
            compiler_version=compiled.version,
            detail=detail,
        )
    return _replace(base, compiler=compiled.compiler, compiler_version=compiled.version, seconds=elapsed)


def _replace(probe: Probe, **changes: object) -> Probe:
    return Probe(**{**asdict(probe), **changes})


def probe_layer(layer: str, archs: Sequence[str], timeout: float = TIMEOUT_S) -> JitReport:
    """Every toolchain of `layer` ("all": of every layer), in order."""
    chosen = [t for t in TOOLCHAINS if layer in ("all", t.layer)]
    return JitReport(
        layer=layer, archs=tuple(archs), probes=tuple(run_probe(t, archs, timeout) for t in chosen)
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


# ---- the command -------------------------------------------------------------------------------


def _archs(values: Sequence[str] | None) -> tuple[str, ...]:
    """--arch values, else the image's TORCH_CUDA_ARCH_LIST (its layer pins file, EPSTACK_PINS)."""
    if values:
        archs = tuple(values)
    else:
        pins = os.environ.get("EPSTACK_PINS")
        listed = ""
        if pins and Path(pins).is_file():
            from epstack.pins import read_layer_pins  # noqa: PLC0415

            listed = read_layer_pins(Path(pins)).get("TORCH_CUDA_ARCH_LIST", "")
        archs = tuple(listed.split())
    unknown = [arch for arch in archs if arch not in GPU_ARCHS]
    if unknown:
        raise BadInput(f"--arch {unknown[0]}: not a GPU architecture; fix: e.g. --arch 9.0a")
    return archs


def cmd_probe(args: argparse.Namespace, console: Console) -> int:
    archs = _archs(args.arch)
    if not archs and args.layer != "base":
        raise BadInput(
            "no arch to compile for: no --arch and no TORCH_CUDA_ARCH_LIST in $EPSTACK_PINS; fix: --arch 9.0a"
        )
    out = args.json or report_path(args.layer)
    report = probe_layer(args.layer, archs, args.timeout)
    table = Table(
        "toolchain", "module", "compiler", "seconds", "verdict", title=f"epstack jit probe {args.layer}"
    )
    for probe in report.probes:
        style = {"ok": "green", "failed": "red", "skipped": "yellow"}[probe.verdict]
        table.add_row(
            escape(probe.title),
            escape(probe.module),
            escape(f"{probe.compiler_version} ({probe.compiler})"),
            f"{probe.seconds:g}",
            f"[{style}]{probe.verdict}[/]",
        )
    console.print(table)
    for probe in report.probes:
        if probe.verdict != "ok":
            console.print(f"[bold]{escape(probe.title)}[/] {probe.verdict}:\n{escape(probe.detail)}")
    write_file(out, report.to_json(), what="the JIT probe report")
    console.print(f"jit probe: {'ok' if report.ok else 'FAILED'}; report {escape(str(out))}")
    return 0 if report.ok else 1


def register(subparsers: SubParsers) -> None:
    """Add `jit probe` to the top-level subcommands."""
    jit = subparsers.add_parser("jit", help="prove the JIT toolchains an image runs at first use")
    actions = jit.add_subparsers(dest="action", required=True, metavar="ACTION")
    probe = actions.add_parser("probe", help="compile one real module of each toolchain of a layer, now")
    probe.add_argument("--layer", choices=(*LAYERS, "all"), default="all", help="default all")
    probe.add_argument(
        "--arch", action="append", help="GPU arch to compile for (repeatable; default: the image's)"
    )
    probe.add_argument("--json", type=path_arg, metavar="FILE", help="default: the image's jit-<layer>.json")
    probe.add_argument("--timeout", type=seconds, default=TIMEOUT_S, help="seconds per toolchain")
    probe.set_defaults(func=cmd_probe)
