"""Real images from the real templates on a real Docker engine: the CUDA stand-in and every layer on it.

The module builds hopper-ib once, as `epstack build` does where nvidia/cuda cannot be pulled: the
stand-in, then devel and base (from PyPI and the Ubuntu archive), then deepep and sglang when
EPSTACK_TEST_SOURCES names a folder of `git archive` tarballs (GitHub is out of reach here).
Images the tests make are removed at the end; the build's own images stay for `make image`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from epstack import imagepaths
from epstack.commands.main import main
from epstack.guard.report import GUARD_REPORT, GuardReport
from epstack.guard.start import PROVEN
from epstack.image import cdx
from epstack.image.build import BuildReport, build_target, export_sboms, standin_ref
from epstack.image.engine import DockerEngine
from epstack.image.render import plan_render, source_date, write_plan
from epstack.image.standin import STANDIN_LABEL, SYSTEM_NCCL_VERSION, standin_for
from epstack.jit import deepgemm
from epstack.jit import flashinfer as flashinfer_jit
from epstack.jit.deepep import CacheKey, pack
from epstack.jit.registry import TOOLCHAINS
from epstack.layers import venv_locks
from epstack.pins.load import load_pins
from epstack.python.lockfile import read_lock
from tests.conftest import PINS, REPO, pins_variant
from tests.jit.test_deepgemm import ENTRIES as DEEPGEMM_ENTRIES
from tests.jit.test_deepgemm import write_cache as write_deepgemm_cache

pytestmark = pytest.mark.docker

TARGET = "hopper-ib"
SOURCES = os.environ.get("EPSTACK_TEST_SOURCES", "")
# A pins file whose IMAGE_REPOSITORY differs, so a test build on a shared engine never retags others'
# images (tags come from the pins hash); default pins.env.
BUILD_PINS = Path(os.environ.get("EPSTACK_TEST_PINS") or PINS)
FIXTURES = REPO / "tests" / "fixtures"
# The image's own start, as its ENTRYPOINT has it: hold-env, then the entrypoint.
START = f"{imagepaths.BIN}/hold-env {imagepaths.SCRIPTS}/entrypoint.sh"
SITE_PACKAGES = f"{imagepaths.VENV}/lib/python3.12/site-packages"
SITE = f"$(ls -d {imagepaths.VENV}/lib/python3*/site-packages)"
STDLIB = "$(python -c 'import sysconfig; print(sysconfig.get_paths()[\"stdlib\"])')"


def docker(engine: DockerEngine, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [engine.cli, *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
    )
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, build_engine: DockerEngine) -> BuildReport:
    pins = load_pins(BUILD_PINS)
    sources = Path(SOURCES) if SOURCES else None
    plan = plan_render(pins, created=source_date(), revision="test", sources=sources)
    context = tmp_path_factory.mktemp("build") / "render"
    write_plan(plan, context)
    return build_target(
        pins=pins, plan=plan, context=context, target=TARGET, engine=build_engine, console=Console()
    )


def ref(report: BuildReport, stage: str) -> str:
    return next(image.ref for image in report.built if image.stage == stage)


@pytest.fixture(scope="module")
def made() -> Iterator[list[str]]:
    """Images a test makes on top of the build's; removed when the module ends."""
    images: list[str] = []
    yield images
    if images:
        subprocess.run(["/usr/bin/docker", "rmi", "-f", *images], capture_output=True, check=False)


def test_the_standin_stands_in_for_nvidia_cuda(built: BuildReport, engine: DockerEngine) -> None:
    """Layout, tools and environment as NVIDIA's devel image has them, from the pinned CUDA release."""
    pins = load_pins(BUILD_PINS)
    standin = standin_for(pins)
    assert built.standin == standin
    script = (
        "set -e; readlink /usr/local/cuda; readlink /usr/local/cuda/include; readlink /usr/local/cuda/lib64; "
        "nvcc --version | grep -o 'release [0-9.]*'; cuobjdump --version | grep -c Copyright; "
        "grep -aom1 'libcuda[.]so[.]1' /usr/local/cuda/lib64/stubs/libcuda.so; echo $LIBRARY_PATH; "
        "test -f /usr/local/cuda/include/cccl/cuda/std/version; test -f /usr/local/cuda/include/cusparse.h; "
        "cat /etc/ld.so.conf.d/000_cuda.conf; "
        "test -e /usr/lib/x86_64-linux-gnu/libnccl.so.2 && echo system-nccl"
    )
    devel = docker(engine, "run", "--rm", standin.devel, "bash", "-c", script).stdout.split("\n")
    assert devel[:9] == [
        "cuda-13.0",
        "targets/x86_64-linux/include",
        "targets/x86_64-linux/lib",
        "release 13.0",
        "1",
        "libcuda.so.1",
        "/usr/local/cuda/lib64/stubs",
        "/usr/local/cuda/targets/x86_64-linux/lib",
        "system-nccl",
    ]
    runtime = docker(
        engine,
        "run",
        "--rm",
        standin.runtime,
        "bash",
        "-c",
        "ls /usr/local/cuda/ /usr/local/cuda/targets/x86_64-linux/lib; which nvcc || true",
    )
    assert runtime.stdout.split() == [
        "/usr/local/cuda/:",
        "targets",
        "/usr/local/cuda/targets/x86_64-linux/lib:",
        "libcudart.so.13",
    ], "NVIDIA's base flavour: cudart, no other library, no compiler"
    labels = engine.labels(standin.devel)
    assert "NVIDIA's PyPI wheels" in labels[STANDIN_LABEL]


def test_devel_and_base_are_built_guarded_and_labelled(built: BuildReport, engine: DockerEngine) -> None:
    pins = load_pins(BUILD_PINS)
    assert [image.stage for image in built.built][:2] == ["devel", "base"]
    base = ref(built, "base")
    assert base == standin_ref(pins.image_ref("base", TARGET))
    labels = engine.labels(base)
    for key, value in pins.layer_pins("base", TARGET).items():
        assert labels[f"io.epstack.pin.{key.lower()}"] == value
    assert (
        STANDIN_LABEL in labels and labels["org.opencontainers.image.base.name"] == standin_for(pins).runtime
    )
    reports = docker(
        engine, "run", "--rm", "--entrypoint", "cat", base, f"{imagepaths.REPORTS}/base.json"
    ).stdout
    rows = {row.component: row for row in GUARD_REPORT.loads(reports, f"{base}: base.json").checks}
    assert rows["NCCL (loaded)"].found == pins.nccl_version, "the wheel's NCCL, not the system decoy"
    assert rows["CUDA runtime/driver"].verdict == "skipped"


def test_the_base_image_runs_its_guard_at_start(built: BuildReport, engine: DockerEngine) -> None:
    result = docker(engine, "run", "--rm", ref(built, "base"), "python", "-c", "print('served')")
    assert result.stdout == "served\n"
    assert "no NVIDIA driver in this container" in result.stderr
    assert "guard: ok" in result.stderr


def test_a_start_whose_tmpdir_cannot_be_written_stops_in_one_line(
    built: BuildReport, engine: DockerEngine
) -> None:
    """Without a driver the stub is linked from a folder made in TMPDIR; one under a file cannot be made,
    by root either: the start names it and exits 3 (the environment), not with mktemp's own error."""
    base = ref(built, "base")
    result = docker(engine, "run", "--rm", "-e", "TMPDIR=/etc/passwd/x", base, "echo", "started", check=False)
    assert (result.returncode, result.stdout) == (3, "")
    assert result.stderr == (
        "epstack: TMPDIR=/etc/passwd/x cannot be written, and the CUDA driver stub is linked from a folder "
        "there (no NVIDIA driver here); fix: set TMPDIR to a writable folder\n"
    )


def test_the_runtime_base_is_smaller_than_devel(built: BuildReport) -> None:
    sizes = {image.stage: image.size for image in built.built}
    assert sizes["base"] < sizes["devel"]


def test_the_base_image_holds_the_jits_toolchains_and_cudas_libraries_once(
    built: BuildReport, engine: DockerEngine
) -> None:
    """Python.h for Triton's launcher, the libcudart.so and stub libcuda.so FlashInfer links with, and
    no CUDA library in CUDA_HOME but cudart (NVIDIA's base flavour): torch loads the venv's wheels."""
    headers = "import os, sysconfig; print(os.path.isfile(sysconfig.get_path('include') + '/Python.h'))"
    script = (
        f'python -c "{headers}"; readlink -f /usr/local/cuda/lib64/libcudart.so; '
        "find /usr/local/cuda/ -name 'lib*.so*' | sort"
    )
    found = docker(engine, "run", "--rm", "--entrypoint", "bash", ref(built, "base"), "-c", script).stdout
    assert found.split() == [
        "True",
        "/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcudart.so.13",
        "/usr/local/cuda/nvvm/lib64/libnvvm.so",
        "/usr/local/cuda/nvvm/lib64/libnvvm.so.4",
        "/usr/local/cuda/targets/x86_64-linux/lib/libcudart.so",
        "/usr/local/cuda/targets/x86_64-linux/lib/libcudart.so.13",
        "/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so",
    ]
    rows = {row.component: row for row in guard_report(engine, ref(built, "base"), "base").checks}
    for component in ("nvcc (CUDA_HOME)", "NVVM (CUDA_HOME)", "CUDA headers (CUDA_HOME)", "nvidia-nvjitlink"):
        assert rows[component].verdict == "ok" and rows[component].found.startswith("13.0"), component
    launcher = rows["JIT Triton launcher"]
    assert launcher.verdict == "ok" and "gcc" in launcher.found, "built at image build time, no GPU"


def test_the_entrypoint_reads_the_builds_jit_report_and_refuses_another_cuda_home(
    built: BuildReport, engine: DockerEngine
) -> None:
    started = docker(engine, "run", "--rm", ref(built, "base"), "true")
    row = next(line for line in started.stderr.splitlines() if "JIT Triton launcher" in line)
    assert "ok" in row and "child_main" not in started.stderr, "read from the report, not compiled again"
    steered = docker(
        engine, "run", "--rm", "-e", "CUDA_HOME=/opt/other", ref(built, "base"), "true", check=False
    )
    assert steered.returncode == 1
    row = next(line for line in steered.stderr.splitlines() if "JIT Triton launcher" in line)
    assert "CUDA_HOME=/opt/other" in row and "mismatch" in row


def test_a_toolchain_that_cannot_compile_fails_the_build_with_the_compilers_error(
    tmp_path: Path, built: BuildReport, engine: DockerEngine
) -> None:
    """The runtime before this change: no Python headers, so Triton's launcher cannot build."""
    result = user_layer(
        engine,
        tmp_path,
        f"FROM {ref(built, 'base')}\nRUN rm /usr/include/python3.12/Python.h\n"
        f"RUN {imagepaths.SCRIPTS}/guard-layer.sh base\n",
        "epstack-test/no-python-headers",
    )
    assert result.returncode != 0
    assert "Python.h: No such file or directory" in result.stderr
    assert "jit probe: FAILED" in result.stderr


DRIFT = "nvidia-nvshmem-cu13==3.5.21"


def user_layer(
    engine: DockerEngine, directory: Path, dockerfile: str, tag: str
) -> subprocess.CompletedProcess[str]:
    """A user's own layer over an epstack image (the way drift usually arrives)."""
    (directory / "Dockerfile").write_text(dockerfile)
    return docker(engine, "build", "--progress", "plain", "-t", tag, str(directory), check=False)


def test_a_drifting_layer_fails_its_build_with_the_table(
    tmp_path: Path, built: BuildReport, engine: DockerEngine
) -> None:
    result = user_layer(
        engine,
        tmp_path,
        f"FROM {ref(built, 'base')}\nRUN uv pip install {DRIFT}\n"
        f"RUN {imagepaths.SCRIPTS}/guard-layer.sh base\n",
        "epstack-test/drift-fails",
    )
    assert result.returncode != 0
    row = next(line for line in result.stderr.splitlines() if "│ nvidia-nvshmem-cu13" in line)
    assert "3.4.5" in row and "3.5.21" in row and "mismatch" in row
    headers = next(line for line in result.stderr.splitlines() if "│ NVSHMEM (headers)" in line)
    assert "3.5.21" in headers and "mismatch" in headers


@pytest.fixture(scope="module")
def drifted(
    tmp_path_factory: pytest.TempPathFactory, built: BuildReport, engine: DockerEngine, made: list[str]
) -> str:
    """An image whose own layer moved a pin and skipped the build-time guard."""
    tag = "epstack-test/drifted"
    result = user_layer(
        engine,
        tmp_path_factory.mktemp("drifted"),
        f"FROM {ref(built, 'base')}\nRUN uv pip install {DRIFT}\n",
        tag,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    made.append(tag)
    return tag


@pytest.mark.parametrize(
    ("mode", "exit_code", "ran"),
    [("strict", 1, False), ("warn", 0, True), ("off", 0, True), ("loud", 2, False)],
)
def test_entrypoint_guard_modes_on_a_drifted_image(
    engine: DockerEngine, drifted: str, mode: str, exit_code: int, ran: bool
) -> None:
    show = "echo started; grep -c 'nvidia_nvshmem_cu13-3.5.21.dist-info' /tmp/epstack-guard.json || true"
    result = docker(
        engine, "run", "--rm", "-e", f"EPSTACK_GUARD={mode}", drifted, "sh", "-c", show, check=False
    )
    assert result.returncode == exit_code, result.stderr[-2000:]
    assert ("started" in result.stdout) == ran
    if mode == "warn":  # the layer's files named, the new distribution's among them
        assert result.stdout.split() == ["started", "1"], "report written where the entrypoint says"


def fake_efa_installer(folder: Path) -> str:
    """aws-efa-installer-1.50.0.tar.gz holding tests/fixtures/efa/efa_installer.sh; returns its sha256."""
    archive = folder / "aws-efa-installer-1.50.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(FIXTURES / "efa" / "efa_installer.sh", arcname="aws-efa-installer/efa_installer.sh")
    return hashlib.sha256(archive.read_bytes()).hexdigest()


def test_the_efa_step_runs_the_installer_as_the_real_one_needs(
    tmp_path: Path, built: BuildReport, engine: DockerEngine, made: list[str]
) -> None:
    """The EFA installer cannot be downloaded here: a fake that checks the arguments and preconditions
    of the real one runs in the real step, taken from a sources folder and checked by its sha256."""
    sources = tmp_path / "sources"
    sources.mkdir()
    pins = pins_variant(tmp_path, EFA_INSTALLER_SHA256=fake_efa_installer(sources))
    out = tmp_path / "render"
    render = ["render", "--pins", str(pins), "--out-dir", str(out), "--sources", str(sources)]
    assert main([*render, "--locks", str(REPO / "locks")]) == 0
    image = next(
        i
        for i in json.loads((out / "epstack-render.json").read_text())["images"]
        if i["name"] == "hopper-efa-base"
    )
    standin = standin_for(load_pins(pins))
    tag = "epstack-test/base-efa"
    args = [
        "--build-arg",
        f"CUDA_DEVEL_IMAGE={standin.devel}",
        "--build-arg",
        f"CUDA_RUNTIME_IMAGE={standin.runtime}",
    ]
    dockerfile = str(out / image["dockerfile"])
    result = docker(engine, "build", "--progress", "plain", "-f", dockerfile, "--target", "base",
                    *args, "-t", tag, str(out), check=False)  # fmt: skip
    made.append(tag)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "fake efa_installer.sh: arguments and preconditions of the real installer hold" in result.stderr
    assert "epstack: EFA installer 1.50.0 with aws-ofi-nccl 1.21.1" in result.stderr
    paths = docker(
        engine, "run", "--rm", "--entrypoint", "sh", tag, "-c", "ldconfig -p | grep -c amazon"
    ).stdout
    assert int(paths) >= 1, "the plugin's directories extend the loader's path"


needs_sources = pytest.mark.skipif(
    not SOURCES, reason="EPSTACK_TEST_SOURCES is not set: no DeepEP/fmt/GDRCopy archives and no GitHub here"
)


@needs_sources
def test_deepep_and_sglang_are_built_and_guarded(built: BuildReport, engine: DockerEngine) -> None:
    assert [image.stage for image in built.built] == ["devel", "base", "deepep", "sglang", "vllm"]
    check = (
        "import sglang, deep_ep; from deep_ep import ElasticBuffer; "
        "print(sglang.__version__, ElasticBuffer.__name__)"
    )
    result = docker(engine, "run", "--rm", ref(built, "sglang"), "python", "-c", check)
    assert result.stdout.split() == [load_pins(BUILD_PINS).sglang_version, "ElasticBuffer"]
    assert "guard: ok" in result.stderr


@needs_sources
def test_the_vllm_image_is_built_over_the_same_deepep_image_and_guarded(
    built: BuildReport, engine: DockerEngine
) -> None:
    """vLLM at its pin over the deepep image sglang's is built on, no SGLang in it, and its start's guard
    (vLLM's own deepep_v2 gate among its rows) passes."""
    check = (
        "import importlib.util, vllm, deep_ep; from deep_ep import ElasticBuffer; "
        "print(vllm.__version__, ElasticBuffer.__name__, importlib.util.find_spec('sglang'))"
    )
    result = docker(engine, "run", "--rm", ref(built, "vllm"), "python", "-c", check)
    assert result.stdout.split() == [load_pins(BUILD_PINS).vllm_version, "ElasticBuffer", "None"]
    assert "guard: ok" in result.stderr
    deepep, vllm = (
        json.loads(
            docker(engine, "image", "inspect", "--format", "{{json .RootFS.Layers}}", ref(built, s)).stdout
        )
        for s in ("deepep", "vllm")
    )
    assert vllm[: len(deepep)] == deepep


@needs_sources
def test_the_sglang_image_passes_guard_all(built: BuildReport, engine: DockerEngine) -> None:
    result = docker(
        engine, "run", "--rm", ref(built, "sglang"), "epstack", "guard", "--layer", "all", check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "skipped" in result.stderr and "guard: ok" in result.stderr


def test_without_sources_the_git_layers_say_why(built: BuildReport) -> None:
    if SOURCES:
        assert not built.not_built
        return
    assert set(built.not_built) == {
        standin_ref(load_pins(BUILD_PINS).image_ref(layer, TARGET)) for layer in ("deepep", "sglang")
    }
    assert all("archive in sources/" in why and "--sources" in why for why in built.not_built.values())


@needs_sources
def test_the_sglang_image_proves_every_jit_toolchain_for_its_arch(
    built: BuildReport, engine: DockerEngine
) -> None:
    """Compiled during the build, with no GPU: Triton's launcher and a kernel for sm_90a, FlashInfer's
    sampling module (nvcc, then the -lcudart -lcuda link); DeepGEMM and DeepEP name the device call
    that keeps them for a GPU host, and the compiler they will run."""
    image = ref(built, "sglang")
    rows = {row.component: row for row in guard_report(engine, image, "sglang").checks}
    for component in ("JIT Triton launcher", "JIT Triton kernel", "JIT FlashInfer"):
        assert rows[component].verdict == "ok", rows[component]
    kernel, flashinfer = rows["JIT Triton kernel"], rows["JIT FlashInfer"]
    assert kernel.expected == "compiles for 9.0a" and "ptxas 12.9 for sm_90" in kernel.found
    assert flashinfer.found == "nvcc 13.0.88 (/usr/local/cuda/bin/nvcc)"
    for component in ("JIT DeepGEMM", "JIT DeepEP"):
        assert rows[component].verdict == "skipped" and "cudaGetDeviceProperties" in rows[component].detail
        assert "/usr/local/cuda/bin/nvcc" in rows[component].found
    assert rows["nvidia-cuda-nvcc"].found == "13.0.88" and rows["nvidia-cuda-nvcc"].verdict == "ok"
    assert rows["CUDA major of distributions"].verdict == "ok"


# Each module the image ships, through FlashInfer's own build_and_load: the library it loads, and its sha256.
FLASHINFER_LOAD = (
    "import hashlib, importlib\n"
    f"for module, generator in {json.dumps(list(flashinfer_jit.MODULES.values()))}:\n"
    "    spec = getattr(importlib.import_module(module), generator)(); spec.build_and_load()\n"
    "    so = spec.jit_library_path; print(so, hashlib.sha256(so.read_bytes()).hexdigest())"
)


@needs_sources
def test_the_sglang_image_ships_flashinfers_module_and_flashinfer_loads_it_without_compiling(
    built: BuildReport, engine: DockerEngine
) -> None:
    """Compiled by the build's probe with no GPU and kept in the image: at start the entrypoint copies it
    into FLASHINFER_WORKSPACE_BASE and FlashInfer's own build_and_load (the arch named as an H200 names
    it) loads the shipped .so while ninja runs nothing (its log unchanged), for root and another uid;
    on a read-only root the workspace moves to $TMPDIR, said, and the row warns without failing."""
    image = ref(built, "sglang")
    built_row = next(
        r for r in guard_report(engine, image, "sglang").checks if r.component == "JIT cache FlashInfer"
    )
    assert built_row.verdict == "ok" and built_row.found.startswith("norm, sampling: "), built_row
    assert built_row.found.endswith("9.0a, nvcc 13.0.88") and "copies them into" in built_row.detail
    manifest = json.loads(
        docker(
            engine, "run", "--rm", "--entrypoint", "cat", image, f"{imagepaths.JIT}/flashinfer.json"
        ).stdout
    )
    shipped = {f["path"]: f["sha256"] for f in manifest["files"]}
    names = tuple(f"/{name}.so" for name in flashinfer_jit.MODULES)
    libraries = sorted(path for path in shipped if path.endswith(names))
    assert len(libraries) == len(flashinfer_jit.MODULES), sorted(shipped)
    log = f"{libraries[0].rsplit('/', 1)[0]}/.ninja_log"
    workspace = f"{imagepaths.JIT_CACHES}/flashinfer"
    check = f'cmp "{imagepaths.JIT}/flashinfer/{log}" "{workspace}/{log}" && cat /tmp/epstack-guard.json'
    for user in ("0", "1000:1000"):
        started = docker(
            engine,
            "run",
            "--rm",
            "--user",
            user,
            "-e",
            "FLASHINFER_CUDA_ARCH_LIST=9.0a",
            image,
            "bash",
            "-c",
            f"python -c '{FLASHINFER_LOAD}' && {check}",
        )
        lines = started.stdout.splitlines()
        loaded = sorted(tuple(line.split()) for line in lines[: len(libraries)])
        assert loaded == [(f"{workspace}/{lib}", shipped[lib]) for lib in libraries], started.stderr[-2000:]
        rows = GUARD_REPORT.loads("\n".join(lines[len(libraries) :]), "start").checks
        row = next(r for r in rows if r.component == "JIT cache FlashInfer")
        assert (row.verdict, row.detail) == ("ok", f"in {workspace}: ninja has nothing to build"), user
    read_only = docker(
        engine, "run", "--rm", "--read-only", "--tmpfs", "/tmp", image, "cat", "/tmp/epstack-guard.json"
    )
    assert f"FLASHINFER_WORKSPACE_BASE={workspace} cannot be written" in read_only.stderr
    row = next(
        r for r in GUARD_REPORT.loads(read_only.stdout, "ro").checks if r.component == "JIT cache FlashInfer"
    )
    assert row.verdict == "warn" and "compile again at first use" in row.detail


TRITON_LAUNCH = (
    "import os; from triton.backends.nvidia.driver import CudaUtils; CudaUtils(); "
    "print(' '.join(sorted(os.listdir(os.environ['TRITON_CACHE_DIR']))))"
)
# How GPU nodes give a container its driver (the stub stands in for it): the NVIDIA Container Toolkit
# puts libcuda.so.1 in the image's library folder and runs ldconfig; GKE mounts it in
# /usr/local/nvidia/lib64, found through the image's LD_LIBRARY_PATH; elsewhere, a folder of its own.
STUB = "/usr/local/cuda/lib64/stubs/libcuda.so"
DRIVER_MOUNTS = {
    "/lib/x86_64-linux-gnu": f"cp {STUB} /usr/lib/x86_64-linux-gnu/libcuda.so.1 && ldconfig",
    "/usr/local/nvidia/lib64": f"mkdir -p /usr/local/nvidia/lib64 && cp {STUB} $_/libcuda.so.1",
    # Elsewhere, as the NVIDIA Container Toolkit registers a folder: through ldconfig (a new LD_LIBRARY_PATH
    # is refused: the guard cannot vouch for a folder it never saw).
    "/opt/driver": (
        f"mkdir /opt/driver && cp {STUB} /opt/driver/libcuda.so.1 && "
        "echo /opt/driver > /etc/ld.so.conf.d/zz.conf && ldconfig"
    ),
}


@pytest.mark.parametrize("libcuda_dir", DRIVER_MOUNTS)
def test_a_nodes_first_triton_launch_loads_the_launcher_the_base_image_shipped_for_its_driver(
    built: BuildReport, engine: DockerEngine, libcuda_dir: str
) -> None:
    """Triton's own CudaUtils() at a process's first launch, after the entrypoint: where the driver is
    mounted as GPU nodes mount it, the cache holds only the shipped launchers (none built) and the
    start's row names the one for that folder; a driver elsewhere builds its own, and the row warns."""
    image = ref(built, "base")
    manifest = json.loads(
        docker(engine, "run", "--rm", "--entrypoint", "cat", image, f"{imagepaths.JIT}/triton.json").stdout
    )
    shipped = {
        launcher["libcuda_dir"]: launcher["file"]["path"].split("/")[0] for launcher in manifest["launchers"]
    }
    assert list(shipped) == ["/lib/x86_64-linux-gnu", "/usr/local/nvidia/lib64"]
    mount = DRIVER_MOUNTS[libcuda_dir]
    launch = 'python -c "$TRITON_LAUNCH" && cat /tmp/epstack-guard.json'
    script = f"{mount} && exec {START} bash -c '{launch}'"
    code = f"TRITON_LAUNCH={TRITON_LAUNCH}"
    started = docker(engine, "run", "--rm", "-e", code, "--entrypoint", "bash", image, "-c", script)
    keys, report = started.stdout.split("\n", 1)
    row = next(
        r for r in GUARD_REPORT.loads(report, "start").checks if r.component == "JIT cache Triton launcher"
    )
    if libcuda_dir in shipped:
        assert keys.split() == sorted(shipped.values()), "Triton loaded the shipped launcher, built none"
        assert (row.verdict, row.detail) == (
            "ok",
            f"the one for {libcuda_dir} in {imagepaths.JIT_CACHES}/triton",
        )
    else:
        assert len(keys.split()) == len(shipped) + 1, "a launcher of its own"
        assert row.verdict == "warn" and row.detail.startswith(f"libcuda.so.1 in {libcuda_dir} here")


# ---- locks: the venv is exactly the lock; a drift the pins cannot see, the lock names -----------


def guard_report(engine: DockerEngine, image: str, layer: str) -> GuardReport:
    path = f"{imagepaths.REPORTS}/{layer}.json"
    text = docker(engine, "run", "--rm", "--entrypoint", "cat", image, path)
    return GUARD_REPORT.loads(text.stdout, f"{image}: {path}")


def locked(layer: str) -> set[str]:
    names = set()
    for name in venv_locks(layer):
        lock = read_lock(REPO / "locks", name)
        assert lock is not None
        names |= {p.name for p in lock.resolution.packages}
    return names


def assert_exactly_locked(engine: DockerEngine, image: str, layer: str, built_extra: int = 0) -> None:
    """The guard's distribution count equals the locks' (plus the deep_ep wheel built from its commit)."""
    report = guard_report(engine, image, layer)
    count = len(locked(layer)) + built_extra
    rows = {row.component: row for row in report.checks}
    summary = rows["Python distributions"]
    assert (summary.expected, summary.found, summary.verdict) == (
        f"{count} locked",
        f"{count} installed",
        "ok",
    )
    distributions = report.distributions
    assert len(distributions) == count and {d.verdict for d in distributions} == {"ok"}


def test_the_base_layer_installs_exactly_its_lock(built: BuildReport, engine: DockerEngine) -> None:
    assert_exactly_locked(engine, ref(built, "base"), "base")
    assert_exactly_locked(engine, ref(built, "devel"), "base")


def test_every_built_image_carries_a_valid_sbom(
    tmp_path: Path, built: BuildReport, engine: DockerEngine
) -> None:
    """Written in the image after its guard, copied beside the build report and validated again."""
    report = BuildReport(target=built.target, standin=built.standin, built=list(built.built))
    export_sboms(engine, report, tmp_path / "sbom")
    for image in report.built:
        text = Path(image.sbom).read_text()
        assert cdx.validate(text) == []
        parts = {c["bom-ref"]: c for c in json.loads(text)["components"]}
        python = [ref for ref in parts if ref.startswith("python:")]
        assert len(python) == len(locked(image.layer)), image.ref
        assert sum(ref.startswith("os:") for ref in parts) > 100, "every dpkg package"
        base = next(c for ref, c in parts.items() if ref.startswith("base-image:"))
        assert "epstack:standin" in {p["name"] for p in base["properties"]}, "built on the stand-in"
        nccl = next(c for ref, c in parts.items() if ref.startswith("native:NCCL@"))
        assert len(nccl["hashes"][0]["content"]) == 64, "the sha256 of the libnccl the image holds"


# An unpinned transitive: torch requires filelock with no version, pins.env names none; only the lock has it.
TRANSITIVE_DRIFT = "filelock==4.2.12"


def test_a_drift_the_lock_catches_and_the_pins_do_not(
    tmp_path: Path, built: BuildReport, engine: DockerEngine
) -> None:
    result = user_layer(
        engine,
        tmp_path,
        f"FROM {ref(built, 'base')}\nRUN uv pip install --no-deps {TRANSITIVE_DRIFT}\n"
        f"RUN {imagepaths.SCRIPTS}/guard-layer.sh base\n",
        "epstack-test/transitive-drift",
    )
    assert result.returncode != 0
    failing = [
        line
        for line in result.stderr.splitlines()
        if "│" in line and ("mismatch" in line or "missing" in line)
    ]
    assert len(failing) == 2, "the pins' own rows all pass: only the lock sees it"
    assert "Python distributions" in failing[0] and "1 other version" in failing[0]
    assert "│ filelock" in failing[1] and "4.3.1" in failing[1] and "4.2.12" in failing[1]


@needs_sources
def test_the_sglang_layer_installs_exactly_its_locks_and_deep_ep(
    built: BuildReport, engine: DockerEngine
) -> None:
    assert_exactly_locked(engine, ref(built, "deepep"), "deepep", built_extra=1)
    assert_exactly_locked(engine, ref(built, "sglang"), "sglang", built_extra=1)


@needs_sources
def test_an_sglang_transitive_drift_is_named(
    tmp_path: Path, built: BuildReport, engine: DockerEngine
) -> None:
    """flashinfer, which SGLang requires and pins.env does not name, one patch down."""
    result = user_layer(
        engine,
        tmp_path,
        f"FROM {ref(built, 'sglang')}\nRUN uv pip install --no-deps flashinfer-python==0.7.1\n"
        f"RUN {imagepaths.SCRIPTS}/guard-layer.sh sglang\n",
        "epstack-test/sglang-drift",
    )
    assert result.returncode != 0
    row = next(line for line in result.stderr.splitlines() if "│ flashinfer-python" in line)
    assert "0.7.2" in row and "0.7.1" in row and "mismatch" in row and "sglang.txt" in row


# ---- the guard at start: the build's record trusted while it holds, the full guard when not ------


@pytest.mark.parametrize("stage", ["base", pytest.param("sglang", marks=needs_sources)])
def test_the_start_guard_trusts_the_build_and_checks_the_driver_now(
    built: BuildReport, engine: DockerEngine, stage: str
) -> None:
    """Same rows as the build's report, each marked proven at build, but the driver (the stub here)
    and the JIT caches, checked now; no torch imported, so no torch warning either."""
    image = ref(built, stage)
    started = docker(engine, "run", "--rm", image, "cat", "/tmp/epstack-guard.json")
    assert "full guard" not in started.stderr and "nothing that decides them changed" in started.stderr
    listed, folders = listed_of(started.stderr)
    assert listed > 0 and listed * 100 < folders, "only the folders of the record's own layer listed"
    assert "UserWarning" not in started.stderr
    report = GUARD_REPORT.loads(started.stdout, f"{image}: /tmp/epstack-guard.json")
    assert [row.component for row in report.checks] == [
        row.component for row in guard_report(engine, image, stage).checks
    ]
    live = {
        "CUDA runtime/driver",
        "EP_JIT_CACHE_DIR",
        *(chain.COMPONENT for chain in TOOLCHAINS if chain.CHECKED_AT_START),
    }
    assert all(row.detail.endswith(PROVEN) for row in report.checks if row.component not in live)
    driver = next(row for row in report.checks if row.component == "CUDA runtime/driver")
    assert driver.verdict == "skipped" and driver.detail == "no GPU: cuInit returned 34"


def listed_of(stderr: str) -> tuple[int, int]:
    """The folders a trusted start listed, and how many the record's trees have."""
    found = re.search(r"; ([\d,]+) of ([\d,]+) folders listed, the others unpacked before", stderr)
    assert found, stderr[-3000:]
    listed, folders = (int(group.replace(",", "")) for group in found.groups())
    return listed, folders


def test_guard_walk_full_lists_every_folder_the_record_holds(
    built: BuildReport, engine: DockerEngine
) -> None:
    """EPSTACK_GUARD_WALK=full lists every folder and finds them as the build left them; another value is
    refused in one line."""
    image = ref(built, "base")
    full = docker(engine, "run", "--rm", "-e", "EPSTACK_GUARD_WALK=full", image, "true")
    assert re.search(r"nothing that decides them changed; all [\d,]+ folders listed", full.stderr), (
        full.stderr
    )
    typo = docker(engine, "run", "--rm", "-e", "EPSTACK_GUARD_WALK=fast", image, "true", check=False)
    assert (
        typo.returncode == 2 and "EPSTACK_GUARD_WALK=fast: use changed (the default) or full" in typo.stderr
    )


USER_LAYERS = {  # a layer built FROM the image: what it changes, and the line the start names it by
    "a .pth added": ('touch "{purelib}/user.pth"', f"{SITE_PACKAGES}/user.pth: added"),
    "a module deep in the venv appended to": (
        'echo "#" >> "{purelib}/torch/utils/data/sampler.py"',
        f"{SITE_PACKAGES}/torch/utils/data/sampler.py: size ",
    ),
    "a stdlib module appended to": (
        'echo "#" >> "{stdlib}/json/encoder.py"',
        "/python3.12/json/encoder.py: size ",
    ),
}


@pytest.mark.parametrize("case", USER_LAYERS)
def test_a_user_layer_that_changes_the_trees_is_refused_by_name(
    tmp_path: Path, built: BuildReport, engine: DockerEngine, made: list[str], case: str
) -> None:
    """A layer over the image is unpacked after the build's record, with every folder above what it
    changed: the start lists those, whatever else it keeps, and names the change."""
    change, named = USER_LAYERS[case]
    tag = f"epstack-test/user-layer-{list(USER_LAYERS).index(case)}"
    purelib = "$(python -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))')"
    dockerfile = f"FROM {ref(built, 'base')}\nRUN {change.format(purelib=purelib, stdlib=STDLIB)}\n"
    result = user_layer(engine, tmp_path, dockerfile, tag)
    assert result.returncode == 0, result.stderr[-2000:]
    made.append(tag)
    started = docker(engine, "run", "--rm", tag, "true", check=False)
    assert started.returncode == 1
    assert any(line.startswith("  ") and named in line for line in started.stderr.splitlines()), (
        started.stderr[-3000:]
    )
    assert "full guard" not in started.stderr and PROVEN not in started.stderr


def test_a_folder_mounted_in_the_venv_is_listed_and_named(built: BuildReport, engine: DockerEngine) -> None:
    """A mount's files keep their own times: with a tmpfs on a folder of the venv, the start lists the
    venv whole and names what the mount hides."""
    folder = f"{SITE_PACKAGES}/filelock"
    started = docker(engine, "run", "--rm", "--tmpfs", folder, ref(built, "base"), "true", check=False)
    assert started.returncode == 1
    assert f"  {folder}/__init__.py: removed" in started.stderr.splitlines(), started.stderr[-3000:]


def test_a_preload_is_refused_by_name(built: BuildReport, engine: DockerEngine) -> None:
    """Not a start the build's record can vouch for, nor one the full guard may run in place of it."""
    libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    preloaded = docker(
        engine, "run", "--rm", "-e", f"LD_PRELOAD={libc}", ref(built, "base"), "true", check=False
    )
    assert preloaded.returncode == 1
    assert f"  LD_PRELOAD={libc}, the build had (unset)" in preloaded.stderr.splitlines()


def test_without_a_record_the_full_guard_runs_in_the_venvs_python(
    built: BuildReport, engine: DockerEngine
) -> None:
    """The start's own interpreter is isolated (no site): the full guard replaces it with the venv's."""
    script = f"rm {imagepaths.REPORTS}/base.record.json; exec {START} true"
    started = docker(engine, "run", "--rm", "--entrypoint", "bash", ref(built, "base"), "-c", script)
    assert f"guard: no build record {imagepaths.REPORTS}/base.record.json: full guard" in started.stderr
    assert "guard: ok" in started.stderr and "│ nvcc (CUDA_HOME)" in started.stderr
    assert "│ bytecode" in started.stderr and "│ site-packages (RECORD)" in started.stderr


def test_an_older_nccl_is_refused_at_start_and_named_by_the_full_guard(
    built: BuildReport, engine: DockerEngine
) -> None:
    """The devel image keeps the system NCCL NVIDIA's devel images ship (SYSTEM_NCCL_VERSION, 2.28.9),
    older than the pin. Put first by LD_LIBRARY_PATH or LD_PRELOAD, a loader variable set otherwise
    than the build, the strict start refuses it by name before anything loads (issue 50). The full
    guard in such a container names what loaded: preloaded, the older libnccl.so.2 is mapped beside the
    wheel's (torch loads that one by its path), a mismatch naming both versions and the pin; first on
    LD_LIBRARY_PATH it is not mapped (libtorch_cuda.so finds the wheel's libnccl.so.2 through its RPATH,
    which the loader searches first), and the guard passes."""
    pins, devel, system = load_pins(BUILD_PINS), ref(built, "devel"), "/usr/lib/x86_64-linux-gnu"
    path, preload = f"LD_LIBRARY_PATH={system}", f"LD_PRELOAD={system}/libnccl.so.2"
    for variable in (path, preload):
        started = docker(engine, "run", "--rm", "-e", variable, devel, "echo", "started", check=False)
        assert (started.returncode, started.stdout) == (1, ""), started.stderr
        assert "guard: refused" in started.stderr and f"  {variable}, the build had" in started.stderr
    guard = 'exec epstack guard --layer "${EPSTACK_GUARD_LAYER}"'
    first = docker(engine, "run", "--rm", "--entrypoint", "bash", "-e", path, devel, "-c", guard)
    assert "guard: ok" in first.stdout
    preloaded = docker(
        engine, "run", "--rm", "--entrypoint", "bash", "-e", preload, devel, "-c", guard, check=False
    )
    assert preloaded.returncode == 1
    lines = preloaded.stdout.splitlines()
    at = next(n for n, line in enumerate(lines) if "│ NCCL (loaded)" in line)
    row = " ".join(  # the row's line and the lines its wrapped cells go on to (their layer cell empty)
        [lines[at], *itertools.takewhile(lambda line: line.startswith("│        │"), lines[at + 1 :])]
    )
    assert pins.nccl_version in row and SYSTEM_NCCL_VERSION in row and "mismatch" in row


# Changes made inside a running container before the entrypoint (issues 29 and 50): each is named and
# refuses the start.
IN_CONTAINER = {
    "a library rewritten, size and mtime put back": (
        f'f=$(ls {SITE}/torch/lib/libc10.so); cp -p "$f" /tmp/ref; '
        'head -c "$(stat -c %s "$f")" /dev/urandom > "$f"; touch -r /tmp/ref "$f"',
        "/torch/lib/libc10.so: written in this container",
    ),
    "a module edited at its size, mtime put back": (
        f'f={SITE}/torch/version.py; cp -p "$f" /tmp/ref; sed -i "s/__version__/__verzion__/" "$f"; '
        'touch -r /tmp/ref "$f"',
        "/torch/version.py: written in this container",
    ),
    "unchecked-hash bytecode": (
        'python -c "import glob, importlib.util, py_compile; '
        f"src = glob.glob('{imagepaths.VENV}/lib/python3*/site-packages/torch/version.py')[0]; "
        "py_compile.compile(src, cfile=importlib.util.cache_from_source(src), "
        'invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)"',
        "/torch/__pycache__/version.cpython-312.pyc: ",
    ),
    "the loader's preload file": (
        "echo /usr/lib/x86_64-linux-gnu/libc.so.6 > /etc/ld.so.preload",
        "  /etc/ld.so.preload: added",
    ),
    "the standard library's ctypes appended to": (
        f'echo "#" >> {STDLIB}/ctypes/__init__.py',
        "/ctypes/__init__.py: size ",
    ),
    "a byte of a shipped JIT cache, mtime put back": (
        f'f=$(find {imagepaths.JIT} -type f -name "*.so" | sort | head -n 1); cp -p "$f" /tmp/ref; '
        'printf x | dd of="$f" bs=1 seek=64 conv=notrunc status=none; touch -r /tmp/ref "$f"',
        f"  {imagepaths.JIT}/",
    ),
    "PYTHONPYCACHEPREFIX": (
        "export PYTHONPYCACHEPREFIX=/tmp/pyc",
        "  PYTHONPYCACHEPREFIX=/tmp/pyc, the build had",
    ),
}


@pytest.mark.parametrize("case", IN_CONTAINER)
def test_a_change_inside_the_container_is_refused_by_name(
    built: BuildReport, engine: DockerEngine, case: str
) -> None:
    change, named = IN_CONTAINER[case]
    script = f"set -e; {change}; exec {START} true"
    started = docker(
        engine, "run", "--rm", "--entrypoint", "bash", ref(built, "base"), "-c", script, check=False
    )
    assert started.returncode == 1
    assert any(named in line for line in started.stderr.splitlines()), started.stderr[-3000:]
    assert "guard: refused: " in started.stderr and "full guard" not in started.stderr


# Issue 50's cases: code that the change makes run writes /tmp/probe. Strict: the start is refused by
# name, and the probe proves the changed code never ran (neither in the start nor as the command); warn:
# the same names, then the command runs it (the change is real). Each a shell step made in the container
# before its real start; the command imports what was changed.
PROBE = "import sys; open('/tmp/probe', 'a').write(' '.join(sys.argv) + chr(10))"
PADDED = (  # a module's text replaced by PROBE at its size, its mtime put back, its bytecode removed
    "import importlib.util, os, sys; f = sys.argv[1]; s = os.stat(f); p = sys.argv[2] + chr(10); "
    "open(f, 'w').write(p + '#' * (s.st_size - len(p) - 1) + chr(10)); "
    "os.utime(f, ns=(s.st_atime_ns, s.st_mtime_ns)); "
    "os.remove(importlib.util.cache_from_source(f))"
)
AUDIT = (  # an audit library: the loader calls its la_version first, in every process it is named for
    '#include <stdio.h>\\nunsigned int la_version(unsigned int v) { FILE *f = fopen("/tmp/probe", "a"); '
    'if (f) { fputs("audit ", f); fclose(f); } return v; }\\n'
)
PROBED = {
    "an unchecked-hash .pyc of deep_ep": (
        f'printf \'%s\\n\' "{PROBE}" > /tmp/tampered.py; python -c "import importlib.util, py_compile; '
        f"src = '$(ls {SITE}/deep_ep/__init__.py)'; py_compile.compile('/tmp/tampered.py', "
        "cfile=importlib.util.cache_from_source(src), "
        'invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)"',
        "",
        "python -c 'import deep_ep'",
        "/deep_ep/__pycache__/__init__.cpython-312.pyc: size ",
    ),
    "a sitecustomize.py in the standard library": (
        f"printf '%s\\n' \"{PROBE}\" > {STDLIB}/sitecustomize.py",
        "",
        "python -c pass",
        "/python3.12/sitecustomize.py: size ",
    ),
    "a new .pth in the venv's site-packages": (
        f"printf '%s\\n' \"{PROBE}\" > {SITE}/zz-probe.pth",
        "",
        "python -c pass",
        "/site-packages/zz-probe.pth: added",
    ),
    "LD_AUDIT set": (
        f"printf '{AUDIT}' > /tmp/audit.c; gcc -shared -fPIC -o /tmp/audit.so /tmp/audit.c",
        "LD_AUDIT=/tmp/audit.so",
        "true",
        "  LD_AUDIT=/tmp/audit.so, the build had (unset)",
    ),
    "an edited stdlib module, size kept, touch -r": (
        f'python -c "{PADDED}" {STDLIB}/html/__init__.py "{PROBE}"',
        "",
        "python -c 'import html'",
        "/python3.12/html/__init__.py: written in this container",
    ),
    "an edited .py in the venv, size kept, touch -r": (
        f'python -c "{PADDED}" {SITE}/filelock/__init__.py "{PROBE}"',
        "",
        "python -c 'import filelock'",
        "/site-packages/filelock/__init__.py: written in this container",
    ),
}


@needs_sources
@pytest.mark.parametrize("case", PROBED)
@pytest.mark.parametrize("mode", ["strict", "warn"])
def test_a_change_that_runs_code_is_refused_before_it_runs(
    built: BuildReport, engine: DockerEngine, case: str, mode: str
) -> None:
    change, variables, command, named = PROBED[case]
    script = (
        f"set -e; {change}; set +e; env EPSTACK_GUARD={mode} {variables} {START} {command}; "
        "echo exit=$?; cat /tmp/probe 2>/dev/null || echo no-probe"
    )
    started = docker(engine, "run", "--rm", "--entrypoint", "bash", ref(built, "deepep"), "-c", script)
    assert any(line.startswith("  ") and named in line for line in started.stderr.splitlines()), (
        started.stderr[-3000:]
    )
    if mode == "strict":
        assert started.stdout.split() == ["exit=1", "no-probe"], "refused, and the changed code never ran"
        assert "EPSTACK_GUARD=warn starts anyway" in started.stderr
    else:
        assert started.stdout.split()[0] == "exit=0" and "no-probe" not in started.stdout, "it runs"
        assert "starting despite the differences above (EPSTACK_GUARD=warn)" in started.stderr


def test_a_shipped_cache_changed_in_the_container_is_never_copied(
    built: BuildReport, engine: DockerEngine
) -> None:
    """The entrypoint copies a shipped cache only as its sha256 list names it: Triton's launcher with a
    byte changed stays out of the writable cache (the guard names the change, as above)."""
    change = (
        f'f=$(find {imagepaths.JIT}/triton -type f -name "*.so" | sort | head -n 1); '
        'printf x | dd of="$f" bs=1 seek=64 conv=notrunc status=none'
    )
    script = f'set -e; {change}; EPSTACK_GUARD=off {START} ls -A "$TRITON_CACHE_DIR"'
    started = docker(engine, "run", "--rm", "--entrypoint", "bash", ref(built, "base"), "-c", script)
    assert started.stdout.split() == [], started.stdout
    assert f"epstack: {imagepaths.JIT}/triton differs from its sha256 list" in started.stderr
    untouched = f'EPSTACK_GUARD=off {START} ls -A "$TRITON_CACHE_DIR"'
    control = docker(engine, "run", "--rm", "--entrypoint", "bash", ref(built, "base"), "-c", untouched)
    assert len(control.stdout.split()) >= 1 and "differs" not in control.stderr


def test_a_start_after_other_processes_that_change_nothing_is_trusted(
    built: BuildReport, engine: DockerEngine
) -> None:
    """The control: a shell as the first process, Python run before the entrypoint (it may write its
    own bytecode), and the start still trusts the build."""
    script = f"python -c 'import json, email.parser'; exec {START} true"
    started = docker(engine, "run", "--rm", "--entrypoint", "bash", ref(built, "base"), "-c", script)
    assert "nothing that decides them changed" in started.stderr, started.stderr[-3000:]


# ---- the kernels layer (issue 17): DeepEP's kernels shipped over the sglang image ---------------

KEY_SCRIPT = (
    f"import sys, json, os, dataclasses; sys.path.append({str(imagepaths.TOOL)!r}); "
    "from epstack.jit.deepep import image_key; print(json.dumps(dataclasses.asdict(image_key(os.environ))))"
)


def key_of(engine: DockerEngine, image: str, **changes: str) -> CacheKey:
    """The key DeepEP's kernels have in `image` (its install's side read in it; an H200's device side)."""
    here = docker(engine, "run", "--rm", "-e", "EPSTACK_GUARD=off", image, "python", "-c", KEY_SCRIPT).stdout
    device = {"arch": "9.0", "device": "NVIDIA H200", "sm_count": 132}
    return CacheKey(**{**json.loads(here), **device, **changes})


def kernels_export(folder: Path, key: CacheKey) -> Path:
    """An export of one made-up kernel (its bytes stand in for a GPU's) under `key`; returns the file."""
    kernel = folder / "cache" / "cache" / f"kernel.dispatch.{'c' * 32}"
    kernel.mkdir(parents=True)
    (kernel / "kernel.cu").write_text("// dispatch_impl<..., 132, ...>\n")
    (kernel / "kernel.cubin").write_bytes(b"\x7fELF" + bytes(64))
    data, _ = pack(folder / "cache", key)
    export = folder / "deep_ep-kernels.tar.gz"
    export.write_bytes(data)
    return export


@needs_sources
def test_the_kernels_layer_ships_deepeps_kernels_and_the_start_copies_them(
    tmp_path: Path, built: BuildReport, engine: DockerEngine, made: list[str]
) -> None:
    """`epstack jit layer` over the built sglang image, with an export made for its key (read in it):
    the guard's row, the kernels copied into the writable cache at start, a read-only root."""
    sglang = ref(built, "sglang")
    export = kernels_export(tmp_path, key_of(engine, sglang))
    tag = "epstack-test/kernels:ok"
    assert main(["jit", "layer", "--image", sglang, "--export", str(export), "--tag", tag]) == 0
    made.append(tag)
    report = GUARD_REPORT.loads(
        docker(engine, "run", "--rm", "--entrypoint", "cat", tag, f"{imagepaths.REPORTS}/sglang.json").stdout,
        "sglang.json",
    )
    row = next(check for check in report.checks if check.component == "JIT cache DeepEP")
    assert row.verdict == "ok" and row.found.startswith("1 kernels, 2 files"), row
    listing = f'ls "$EP_JIT_CACHE_DIR/cache"; test ! -L "$EP_JIT_CACHE_DIR/cache/kernel.dispatch.{"c" * 32}"'
    started = docker(engine, "run", "--rm", tag, "bash", "-c", listing)
    assert started.stdout.split() == [f"kernel.dispatch.{'c' * 32}"], "copied in, not linked"
    read_only = docker(engine, "run", "--rm", "--read-only", "--tmpfs", "/tmp", tag, "bash", "-c", listing)
    assert read_only.stdout.split() == [f"kernel.dispatch.{'c' * 32}"]
    assert "cannot be written (a read-only root?)" in read_only.stderr


DEEPGEMM_KEY_SCRIPT = (
    f"import sys, json, os, dataclasses; sys.path.append({str(imagepaths.TOOL)!r}); "
    "from epstack.jit.deepgemm import image_key; print(json.dumps(dataclasses.asdict(image_key(os.environ))))"
)


@needs_sources
def test_the_kernels_layer_ships_deepgemms_kernels_beside_deepeps(
    tmp_path: Path, built: BuildReport, engine: DockerEngine, made: list[str]
) -> None:
    """Both exports in one layer: DeepGEMM's row ok, its entries copied at start into the cache SGLang
    points DeepGEMM at (SGLANG_DG_CACHE_DIR), each with its commit marker."""
    sglang = ref(built, "sglang")
    deepep = kernels_export(tmp_path / "ep", key_of(engine, sglang))
    here = docker(
        engine, "run", "--rm", "-e", "EPSTACK_GUARD=off", sglang, "python", "-c", DEEPGEMM_KEY_SCRIPT
    )
    key = deepgemm.CacheKey(
        **{**json.loads(here.stdout), "arch": "9.0", "device": "NVIDIA H200", "sm_count": 132}
    )
    assert key.deep_gemm, "the sglang image has DeepGEMM"
    data, _ = deepgemm.pack(write_deepgemm_cache(tmp_path / "dg"), key)
    (tmp_path / "deep_gemm-kernels.tar.gz").write_bytes(data)
    tag = "epstack-test/kernels:deepgemm"
    exports = ["--export", str(deepep), "--export", str(tmp_path / "deep_gemm-kernels.tar.gz")]
    assert main(["jit", "layer", "--image", sglang, *exports, "--tag", tag]) == 0
    made.append(tag)
    report = GUARD_REPORT.loads(
        docker(engine, "run", "--rm", "--entrypoint", "cat", tag, f"{imagepaths.REPORTS}/sglang.json").stdout,
        "sglang.json",
    )
    row = next(check for check in report.checks if check.component == "JIT cache DeepGEMM")
    assert row.verdict == "ok" and row.found.startswith("2 kernels,"), row
    listing = 'ls "$SGLANG_DG_CACHE_DIR/cache"; ls -A "$SGLANG_DG_CACHE_DIR/cache/"*/ | grep -c .committed'
    started = docker(engine, "run", "--rm", tag, "bash", "-c", listing)
    assert started.stdout.split() == [*sorted(DEEPGEMM_ENTRIES), "2"], started.stdout


@needs_sources
def test_an_export_made_for_another_install_is_refused_by_the_layers_build(
    tmp_path: Path, built: BuildReport, engine: DockerEngine, capfd: pytest.CaptureFixture[str]
) -> None:
    sglang = ref(built, "sglang")
    export = kernels_export(tmp_path, key_of(engine, sglang, nvcc="12.9"))
    tag = "epstack-test/kernels:other-nvcc"
    assert main(["jit", "layer", "--image", sglang, "--export", str(export), "--tag", tag]) != 0
    assert not engine.image_exists(tag)
    captured = capfd.readouterr()
    assert "nvcc 12.9 != 13.0" in captured.out + captured.err
