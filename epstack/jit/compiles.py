"""The JIT toolchains' own compiles, one function each, run by `epstack jit probe` in a process of its own.

Each asks the toolchain itself which compiler it runs (Triton's _find_compiler and ptxas knobs,
FlashInfer's get_cuda_path, DeepGEMM's and DeepEP's find_cuda_home), compiles one real module, and
returns that compiler and its version; on a GPU it also runs what it compiled. Every import of a
toolchain is inside its function: this module is imported in the images' own Python, beside them.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import epstack
from epstack.cmd import run
from epstack.errors import EpstackError

SMOKE_TIMEOUT_S = 900.0
_NVIDIA_RELEASE = re.compile(r"release \d+\.\d+, V(\d+\.\d+\.\d+)")


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

    from epstack.jit.tritonkernel import add  # noqa: PLC0415

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

    from epstack.jit.flashinfer import MODULES  # noqa: PLC0415

    for module, generator in MODULES.values():
        getattr(importlib.import_module(module), generator)().build_and_load()  # nvcc, link, load
    if _gpu():
        import torch  # noqa: PLC0415
        from flashinfer.sampling import sampling_from_probs  # noqa: PLC0415

        probs = torch.softmax(torch.randn(4, 1000, device="cuda"), dim=-1)
        probs[:, 500:] = 0
        tokens = sampling_from_probs(probs / probs.sum(dim=-1, keepdim=True))
        if not bool((tokens < 500).all()):
            raise RuntimeError(f"FlashInfer sampled tokens of probability 0: {tokens.tolist()}")
        _check_rmsnorm()
    nvcc = os.environ.get("FLASHINFER_NVCC") or str(Path(cpp_ext.get_cuda_path()) / "bin" / "nvcc")
    return Compiled(compiler=nvcc, version=_tool_version(nvcc))


def _check_rmsnorm() -> None:
    """FlashInfer's rmsnorm (the `norm` module) against the formula, on the GPU."""
    import torch  # noqa: PLC0415
    from flashinfer.norm import rmsnorm  # noqa: PLC0415

    x = torch.randn(4, 256, device="cuda", dtype=torch.bfloat16)
    weight = torch.rand(256, device="cuda", dtype=torch.bfloat16)
    exact = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()
    if not torch.allclose(rmsnorm(x, weight, 1e-6).float(), exact, atol=3e-2, rtol=3e-2):
        raise RuntimeError("FlashInfer's rmsnorm differs from x / rms(x) * weight")


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
        "--gpus-per-node",
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
    result = run(*epstack_python("epstack.commands.main", "main"), *smoke, timeout=SMOKE_TIMEOUT_S)
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


def child_main() -> int:
    """In the probe's own process: compile, then print what was compiled with what, as JSON."""
    name, work, *archs = sys.argv[1:]
    compiled = PROBES[name](archs, Path(work))
    print(json.dumps(asdict(compiled)))
    return 0


def epstack_python(module: str, function: str) -> list[str]:
    """This Python running `module.function(argv)`, with epstack's folder appended (not prepended) to
    sys.path as the `epstack` command does, so the application's own packages win."""
    tool = str(Path(epstack.__file__).resolve().parent.parent)
    code = f"import sys; sys.path.append({tool!r}); from {module} import {function}; sys.exit({function}())"
    return [sys.executable, "-c", code]
