"""The JIT phases (issue 17), each in a CUDA_HOME made from the built image's own file list
(results/image-cuda-home.txt): first-request, kernels-export, kernels-shipped, flashinfer-shipped,
triton-shipped."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from benchmarks.elastic.h200.host import DEPS, NO_COMPILERS, Host, count_lines, matches, tail_file, verdicts
from benchmarks.elastic.h200.install import epstack_dependencies
from benchmarks.elastic.h200.smoke import elastic
from epstack import imagepaths

IMAGE_CUDA_HOME = "benchmarks/elastic/results/image-cuda-home.txt"
SITE_JIT = "/tmp/site-jit"  # FlashInfer, tvm-ffi, DeepGEMM as the sglang lock pins them ($GPU_SRC/python)
# The guard's rows for the shipped caches, as JSON ($OUT/<toolchain>-row.json).
FLASHINFER_ROW = """import json, os, dataclasses; from epstack.jit import flashinfer
print(json.dumps([dataclasses.asdict(r) for r in flashinfer.guard_rows(os.environ, ["9.0a"])], indent=2))"""
TRITON_ROW = """import json, os, dataclasses; from epstack.jit import triton
print(json.dumps([dataclasses.asdict(r) for r in triton.guard_rows(os.environ, [])], indent=2))"""
# An nvcc that logs each run's arguments to the folder's nvcc.log, then runs the real one.
NVCC_LOGGER = '#!/bin/sh\necho "$*" >> {folder}/nvcc.log\nexec "$(dirname "$0")/nvcc.real" "$@"\n'


def toolkit(host: Host) -> Path:
    """The full CUDA toolkit on the host: the folder above the bin/ of the nvcc on PATH."""
    nvcc = shutil.which("nvcc", path=host.env.get("PATH"))
    return Path(os.path.realpath(nvcc or "nvcc")).parent.parent


def image_cuda_home(host: Host, home: Path, summary: Path, *, quiet: bool = False) -> None:
    """CUDA_HOME at `home` with the image's files, copied from the toolkit; its summary in `summary`."""
    argv = [host.python, "-m", "benchmarks.elastic.cuda_home_from_list", IMAGE_CUDA_HOME, toolkit(host), home,
            "--json", summary]  # fmt: skip
    host.run(argv, console=Path(os.devnull) if quiet else None)


def logged_cuda_home(host: Host, home: Path, folder: Path, summary: Path) -> None:
    """The image's CUDA_HOME whose nvcc logs every run into folder/nvcc.log."""
    image_cuda_home(host, home, summary, quiet=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.rename(nvcc.with_name("nvcc.real"))
    nvcc.write_text(NVCC_LOGGER.format(folder=folder))
    nvcc.chmod(0o755)


def with_cuda_home(host: Host, home: Path, **more: str | None) -> dict[str, str]:
    """The phase's environment with CUDA_HOME (and its bin/ first on PATH), without the host's compilers."""
    cuda = {"CUDA_HOME": str(home), "CUDA_PATH": str(home), "PATH": f"{home}/bin:{host.env.get('PATH', '')}"}
    return host.environ({**NO_COMPILERS, **cuda, **more})


def unpack_site_jit(host: Host) -> None:
    for pack in matches(host.sources / "python", "*.tar.xz"):
        host.run(["tar", "-xJf", pack, "-C", host.at(SITE_JIT)])


def disk_usage(host: Host, path: Path, flag: str) -> str:
    """`du FLAG PATH | cut -f1`."""
    return host.output(["du", flag, path]).split("\t")[0]


def entrypoint_copy(host: Host, env: dict[str, str]) -> dict[str, str]:
    """The environment after the entrypoint's scripts/image/jit-caches.sh, sourced by bash as the
    image's start does: the shipped caches copied into the writable ones its variables name."""
    dump = host.output(["bash", "-c", '. "$1" >&2 && env -0', "bash", "scripts/image/jit-caches.sh"], env=env)
    return dict(entry.split("=", 1) for entry in dump.split("\0") if "=" in entry) or env


def kernels_in(cache: str) -> int:
    return len(list(Path(cache, "cache").glob("kernel.*")))


def first_request(host: Host) -> None:
    """The first request's JIT toolchains with every cache empty: the smoke (DeepEP's JIT), then
    `epstack jit probe --layer all`, each process's mapped libraries recorded."""
    full, home, work = toolkit(host), host.at("/tmp/cuda-home-image"), host.at("/tmp/first-request")
    host.remove(home, work, host.at(SITE_JIT))
    (work / "maps").mkdir(parents=True)
    host.at(SITE_JIT).mkdir(parents=True)
    image_cuda_home(host, home, host.out / "first-request-cuda-home.json")
    unpack_site_jit(host)
    size = disk_usage(host, home, "-sh")
    host.note(f"first-request: CUDA_HOME={home} ({size}) from the image's list, empty caches")
    hook = f"{Path.cwd()}/benchmarks/elastic/maps_hook:{host.at(SITE_JIT)}:{host.env.get('PYTHONPATH', '')}"
    maps = {"EPSTACK_MAPS_DIR": str(work / "maps")}
    argv = [*elastic(host), "--timeout", "300", "--skip-bench", "--run-dir", work / "smoke",
            "--json", host.out / "first-request-smoke.json"]  # fmt: skip
    host.record(argv, before=f"CUDA_HOME={home} EP_JIT_CACHE_DIR=<empty> ")
    env = with_cuda_home(host, home, PYTHONPATH=hook, EP_JIT_CACHE_DIR=str(work / "ep-cache"), **maps)
    status = host.run(argv, env=env, console=work / "smoke.console")
    compiled = sum(path.is_file() for path in (work / "ep-cache").rglob("*"))
    host.note(f"first-request: smoke exit {status}; DeepEP kernels compiled: {compiled} files")
    tail_file(work / "smoke.console", 12)
    argv = [host.python, "-m", "epstack", "jit", "probe", "--layer", "all", "--cuda-arch", "9.0a",
            "--json", host.out / "first-request-jit.json"]  # fmt: skip
    host.record(argv, before=f"CUDA_HOME={home} ")
    status = host.run(
        argv, env=with_cuda_home(host, home, PYTHONPATH=hook, **maps), console=work / "jit.console"
    )
    host.note(f"first-request: jit probe exit {status}")
    tail_file(work / "jit.console", 40)
    argv = [host.python, "-m", "benchmarks.elastic.mapped_libraries", work / "maps", "--cuda-home", home,
            "--toolkit", full, "--json", host.out / "first-request-maps.json"]  # fmt: skip
    status = host.run(argv, env=host.environ({**NO_COMPILERS, **maps}))
    host.note(f"first-request: mapped libraries exit {status}")


KERNELS = "/tmp/kernels"


def _preset(host: Host, phase: str, env: dict[str, str], preset: str, name: str, *flags: str | Path) -> None:
    """The smoke at one model preset in the image's CUDA_HOME (nvcc runs counted) and EP_JIT_CACHE_DIR."""
    work = host.at(KERNELS)
    argv = [*elastic(host), "--profile", preset, "--skip-bench", "--timeout", "300",
            "--run-dir", work / f"run-{name}", "--json", host.out / f"{name}.json", *flags]  # fmt: skip
    host.record(
        argv, before=f"EP_JIT_CACHE_DIR={env['EP_JIT_CACHE_DIR']} CUDA_HOME=<the image's, nvcc logged> "
    )
    log = work / "nvcc.log"
    log.write_text("")
    status = host.run(argv, env=env, console=work / f"{name}.console")
    tail_file(work / f"{name}.console", 4)
    compiles, versions = count_lines(log, "--version", matching=False), count_lines(log, "--version")
    host.note(f"{phase}: {name} exit {status}; nvcc runs: {compiles} compiles, {versions} --version")
    shutil.copy(log, host.out / f"{name}.nvcc.log")


def kernels_export(host: Host) -> None:
    """The smoke at both model presets with an empty cache, the second with --export-jit-cache."""
    work = host.at(KERNELS)
    host.remove(work)
    work.mkdir(parents=True)
    logged_cuda_home(host, work / "cuda-home", work, host.out / "kernels-cuda-home.json")
    prefix = host.output([host.python, "-c", "import sys; print(sys.prefix)"]).strip()
    host.note(f"kernels-export: empty cache, sys.prefix {prefix}")
    env = with_cuda_home(host, work / "cuda-home", EP_JIT_CACHE_DIR=str(work / "made"))
    _preset(host, "kernels-export", env, "qwen3-30b-a3b", "kernels-empty-qwen3")
    export = work / "deep_ep-kernels.tar.gz"
    _preset(
        host, "kernels-export", env, "deepseek-v3", "kernels-empty-deepseek-v3", "--export-jit-cache", export
    )
    for path in sorted(work.glob("deep_ep-kernels.tar.gz*")):
        shutil.copy(path, host.out)


def kernels_shipped(host: Host) -> None:
    """kernels-export's export unpacked read-only as the kernels layer does, copied into a new writable
    cache by the entrypoint's script, then both presets again."""
    work = host.at(KERNELS)
    shipped = work / "home"
    export = work / "deep_ep-kernels.tar.gz"
    sha = Path(f"{export}.sha256").read_text().split(" ")[0]
    argv = [host.python, "-m", "epstack", "jit", "unpack", export, "--sha256", sha,
            "--into", shipped / "jit" / "deep_ep"]  # fmt: skip
    host.record(argv)
    status = host.run(argv, env=host.environ({**NO_COMPILERS, "EPSTACK_HOME": str(shipped)}))
    size = disk_usage(host, shipped / "jit", "-sb")
    host.note(f"kernels-shipped: unpack exit {status}; {size} bytes on disk")
    host.run(["chmod", "-R", "a-w", shipped / "jit"])
    env = with_cuda_home(
        host, work / "cuda-home", EPSTACK_HOME=str(shipped), EP_JIT_CACHE_DIR=str(work / "writable")
    )
    env = entrypoint_copy(host, env)
    cache = env["EP_JIT_CACHE_DIR"]
    host.note(f"kernels-shipped: copied {kernels_in(cache)} kernels into {cache}")
    _preset(host, "kernels-shipped", env, "qwen3-30b-a3b", "kernels-shipped-qwen3")
    _preset(host, "kernels-shipped", env, "deepseek-v3", "kernels-shipped-deepseek-v3")
    host.note(f"kernels-shipped: kernels in the cache after both presets: {kernels_in(cache)} "
              "(the copied ones and any compiled)")  # fmt: skip


def _guard_row(host: Host, code: str, env: dict[str, str], json: Path) -> str:
    """A guard row written to `json`; its verdicts."""
    json.write_text(host.output([host.python, "-c", code], env=env))
    return verdicts(json)


def flashinfer_shipped(host: Host) -> None:
    """FlashInfer's modules built with the GPU hidden and shipped (`jit probe --ship`), the entrypoint's
    copy, then the sampler's first call on the GPU in a new process, against one from an empty workspace."""
    work, jit = host.at("/tmp/flashinfer"), host.at(imagepaths.JIT)
    workspace = host.at(imagepaths.JIT_CACHES / "flashinfer")
    host.remove(work, host.at(SITE_JIT), jit, host.at(imagepaths.JIT_CACHES))
    work.mkdir(parents=True)
    host.at(SITE_JIT).mkdir(parents=True)
    if not host.at(DEPS).is_dir():
        epstack_dependencies(host)
    unpack_site_jit(host)
    logged_cuda_home(host, work / "cuda-home", work, host.out / "flashinfer-cuda-home.json")
    env = with_cuda_home(
        host, work / "cuda-home", PYTHONPATH=f"{host.at(SITE_JIT)}:{host.env.get('PYTHONPATH', '')}",
        EPSTACK_HOME=str(jit.parent), EPSTACK_REPORTS=str(work / "reports"),
        FLASHINFER_WORKSPACE_BASE=str(workspace),
    )  # fmt: skip
    (work / "reports").mkdir(parents=True)
    workspace.mkdir(parents=True)
    log = work / "nvcc.log"
    log.write_text("")
    # FlashInfer alone: DeepGEMM's wheel does not load under this host's torch (README).
    argv = [host.python, "-m", "epstack", "jit", "probe", "--layer", "sglang", "--toolchain", "flashinfer",
            "--cuda-arch", "9.0a", "--ship", "--json", host.out / "flashinfer-build-jit.json"]  # fmt: skip
    host.record(argv, before="CUDA_VISIBLE_DEVICES= ")
    status = host.run(argv, env={**env, "CUDA_VISIBLE_DEVICES": ""}, console=work / "build.console")
    shipped = disk_usage(host, jit / "flashinfer", "-sb")
    compiles = count_lines(log, "--version", matching=False)
    host.note(
        f"flashinfer-shipped: build (no GPU) exit {status}; nvcc compiles {compiles}; shipped {shipped} bytes"
    )
    tail_file(work / "build.console", 8)
    host.run(["chmod", "-R", "a-w", jit])
    env = entrypoint_copy(host, env)
    row = _guard_row(host, FLASHINFER_ROW, env, host.out / "flashinfer-row.json")
    host.note(f"flashinfer-shipped: copied at start; row {row}")
    runs = [
        ("shipped", "shipped", env["FLASHINFER_WORKSPACE_BASE"]),
        ("empty", "empty-workspace", str(work / "empty")),
    ]
    for name, what, workspace_base in runs:
        log.write_text("")
        argv = [host.python, "-m", "benchmarks.elastic.flashinfer_first_call", "--json",
                host.out / f"flashinfer-{name}.json"]  # fmt: skip
        status = host.run(argv, env={**env, "FLASHINFER_WORKSPACE_BASE": workspace_base})
        compiles = count_lines(log, "--version", matching=False)
        host.note(f"flashinfer-shipped: {what} first call exit {status}; nvcc compiles {compiles}")
        shutil.copy(log, host.out / f"flashinfer-{name}.nvcc.log")


def triton_shipped(host: Host) -> None:
    """Triton's launcher built against the CUDA stub for each folder GPU nodes mount the driver in
    (`jit probe --layer base --ship`), the entrypoint's copy, then a new process's CudaUtils() against
    one with an empty cache; this host's ldconfig decides which launcher loads."""
    work, jit, full = host.at("/tmp/triton-shipped"), host.at(imagepaths.JIT), toolkit(host)
    host.remove(work, jit / "triton", jit / "triton.json")
    (work / "reports").mkdir(parents=True)
    if not host.at(DEPS).is_dir():
        epstack_dependencies(host)
    libcuda = [line for line in host.output(["/sbin/ldconfig", "-p"]).splitlines() if "libcuda.so.1 " in line]
    (host.out / "triton-ldconfig.txt").write_text("".join(f"{line}\n" for line in libcuda))
    places = {"EPSTACK_HOME": str(jit.parent), "EPSTACK_REPORTS": str(work / "reports")}
    env = host.environ({**NO_COMPILERS, **places, "TRITON_CACHE_DIR": str(work / "cache")})
    argv = [host.python, "-m", "epstack", "jit", "probe", "--layer", "base", "--ship",
            "--json", host.out / "triton-build-jit.json"]  # fmt: skip
    host.record(argv, before="EPSTACK_CUDA_STUB=<the toolkit's stub> ")
    stub = {"EPSTACK_CUDA_STUB": str(full / "lib64" / "stubs" / "libcuda.so")}
    status = host.run(argv, env={**env, **stub}, console=work / "build.console")
    last = (work / "build.console").read_text(errors="replace").splitlines()[-1:]
    host.note(f"triton-shipped: build exit {status}; {''.join(last)}")
    host.run(["chmod", "-R", "a-w", jit / "triton"])
    env = entrypoint_copy(host, env)
    row = _guard_row(host, TRITON_ROW, env, host.out / "triton-row.json")
    host.note(f"triton-shipped: copied at start; row {row}")
    for name, cache in (("shipped", env["TRITON_CACHE_DIR"]), ("empty", str(work / "empty"))):
        argv = [
            host.python,
            "-m",
            "benchmarks.elastic.triton_first_launch",
            "--json",
            host.out / f"triton-{name}.json",
        ]
        host.note(f"triton-shipped: {name} exit {host.run(argv, env={**env, 'TRITON_CACHE_DIR': cache})}")
