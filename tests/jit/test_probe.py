"""`epstack jit probe` and the guard rows it leaves: the report a build writes, read at container start.

The toolchains themselves (Triton, FlashInfer, DeepGEMM, DeepEP) compile in the images' builds
(tests/image/test_docker_build.py) and on a GPU host (benchmarks/elastic/); here, the probe's own process,
its report and the rows, with a real child process where the test venv has no toolchain to import."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from epstack.commands.main import main
from epstack.errors import BadInput
from epstack.jit import flashinfer, triton
from epstack.jit import probe as jitprobe
from epstack.jit.probe import STEERING, layer_rows, probe_rows
from epstack.jit.probereport import JitReport, Probe, read_report, report_path

FLASHINFER = Probe(
    toolchain="flashinfer",
    title="FlashInfer",
    module="sampling",
    verdict="ok",
    compiler="/usr/local/cuda/bin/nvcc",
    compiler_version="nvcc 13.0.88",
    seconds=111.5,
    steering={"CUDA_HOME": "/usr/local/cuda"},
)
DEEPGEMM = Probe(
    toolchain="deepgemm",
    title="DeepGEMM",
    module="bf16_gemm_nt",
    verdict="skipped",
    compiler="/usr/local/cuda/bin/nvcc",
    compiler_version="nvcc 13.0.88",
    detail="no GPU: it reads the device",
    steering={"CUDA_HOME": "/usr/local/cuda"},
)
IMAGE_ENV = {"CUDA_HOME": "/usr/local/cuda", "PATH": "/usr/bin"}


def test_rows_name_the_compiler_the_module_and_the_time() -> None:
    ok, skipped = probe_rows(
        JitReport(layer="sglang", archs=("9.0a",), probes=(FLASHINFER, DEEPGEMM)), IMAGE_ENV
    )
    assert (ok.component, ok.expected, ok.verdict) == ("JIT FlashInfer", "compiles for 9.0a", "ok")
    assert "nvcc 13.0.88" in ok.found and "/usr/local/cuda/bin/nvcc" in ok.found and "111.5 s" in ok.detail
    assert (skipped.verdict, skipped.detail) == ("skipped", "no GPU: it reads the device")
    assert not skipped.failed


def test_a_failed_compile_fails_its_row_with_the_compilers_last_line() -> None:
    failed = Probe(**{**FLASHINFER.__dict__, "verdict": "failed",
                      "detail": "ninja: build stopped\n/usr/bin/ld: cannot find -lcudart"})  # fmt: skip
    (row,) = probe_rows(JitReport(layer="sglang", archs=("9.0a",), probes=(failed,)), IMAGE_ENV)
    assert (row.found, row.verdict, row.detail) == ("failed", "mismatch", "/usr/bin/ld: cannot find -lcudart")


@pytest.mark.parametrize(
    ("env", "was", "now"),
    [
        ({"CUDA_HOME": "/opt/other-cuda"}, "CUDA_HOME=/usr/local/cuda", "CUDA_HOME=/opt/other-cuda"),
        ({}, "CUDA_HOME=/usr/local/cuda", "CUDA_HOME=(unset)"),
        ({**IMAGE_ENV, "CC": "/opt/gcc/bin/gcc"}, "CC=(unset)", "CC=/opt/gcc/bin/gcc"),
    ],
)
def test_a_container_that_steers_another_compiler_fails_the_row(
    env: dict[str, str], was: str, now: str
) -> None:
    """The mixed-toolchain case: the build proved one compiler, the container would run another."""
    (row,) = probe_rows(JitReport(layer="sglang", archs=("9.0a",), probes=(FLASHINFER,)), env)
    assert row.verdict == "mismatch" and was in row.expected and now in row.found
    assert "epstack jit probe" in row.detail


def test_steering_names_every_variable_the_jits_read() -> None:
    assert {"CUDA_HOME", "CUDA_PATH", "CC", "CXX", "TRITON_PTXAS_PATH", "EP_JIT_NVCC_COMPILER"} <= set(
        STEERING
    )


def test_a_report_round_trips_and_a_stranger_is_bad_input(tmp_path: Path) -> None:
    report = JitReport(layer="sglang", archs=("9.0a", "10.0a"), probes=(FLASHINFER, DEEPGEMM))
    path = tmp_path / "jit-sglang.json"
    path.write_text(report.to_json())
    assert read_report(path) == report
    assert json.loads(path.read_text())["schema"] == "jit-report/1"
    for text, problem in (
        ('{"schema": "jit-report/2", "probes": []}', "schema 'jit-report/2' unknown"),
        ("[]", "no schema, so not a JIT probe report"),
        ('{"schema": "jit-report/1", "layer": "x"}', "archs: field required"),
        ("not json", "not JSON"),
    ):
        path.write_text(text)
        with pytest.raises(BadInput, match=re.escape(f"{path}: {problem}")):
            read_report(path)


def test_a_layer_without_a_report_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EPSTACK_REPORTS", str(tmp_path))
    (row,) = layer_rows("deepep", IMAGE_ENV)
    assert (row.verdict, row.found) == (
        "skipped",
        "none",
    ) and "epstack jit probe --layer deepep" in row.detail
    report_path("deepep").write_text(JitReport(layer="deepep", archs=("9.0a",), probes=(DEEPGEMM,)).to_json())
    assert [r.component for r in layer_rows("deepep", IMAGE_ENV)] == ["JIT DeepGEMM"]


@pytest.mark.skipif(importlib.util.find_spec("triton") is not None, reason="Triton is installed here")
def test_a_toolchain_that_fails_fails_the_command_with_its_own_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The probe's own process fails (no Triton in the test venv): exit 1, the error in the log and the
    report, the report written anyway (the build log and the image keep it)."""
    out = tmp_path / "jit-base.json"
    assert main(["jit", "probe", "--layer", "base", "--json", str(out)]) == 1
    (probe,) = json.loads(out.read_text())["probes"]
    assert probe["toolchain"] == "triton-launcher" and probe["verdict"] == "failed"
    assert "No module named 'triton'" in probe["detail"]
    assert "No module named 'triton'" in capsys.readouterr().out


def test_arches_come_from_the_flag_or_the_images_pins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["jit", "probe", "--layer", "sglang", "--arch", "9.1x"]) == 2
    assert "--cuda-arch 9.1x: not a GPU architecture" in capsys.readouterr().err
    monkeypatch.delenv("EPSTACK_PINS", raising=False)
    assert main(["jit", "probe", "--layer", "sglang", "--json", str(tmp_path / "r.json")]) == 2
    assert "no arch to compile for" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists(), "bad input writes nothing"


FAKE_CHILD = """
import json, os, pathlib, sys
toolchain, work, *archs = sys.argv[1:]
with open(os.environ["PROBE_LOG"], "a") as log:
    log.write(f"{toolchain} {' '.join(archs)} {os.environ.get('FLASHINFER_CUDA_ARCH_LIST')} "
              f"{os.environ['FLASHINFER_WORKSPACE_BASE']}\\n")
if os.environ.get("TRITON_LIBCUDA_PATH"):  # Triton's launcher, keyed by the driver's folder
    key = pathlib.Path(os.environ["TRITON_CACHE_DIR"], str(abs(hash(os.environ["TRITON_LIBCUDA_PATH"]))))
    key.mkdir(parents=True)
    (key / "cuda_utils.so").write_text(os.environ["TRITON_LIBCUDA_PATH"])
if toolchain == "flashinfer":  # what FlashInfer leaves for the arch it compiled
    arch = os.environ["FLASHINFER_CUDA_ARCH_LIST"].replace(".", "")
    base = pathlib.Path(os.environ["FLASHINFER_WORKSPACE_BASE"], ".cache/flashinfer/0.7.2")
    module = base / arch / "cached_ops/sampling"
    module.mkdir(parents=True)
    (module / "sampling.so").write_bytes(arch.encode())
print(json.dumps({"compiler": "/usr/local/cuda/bin/nvcc", "version": "nvcc 13.0.88"}))
"""


@pytest.fixture
def fake_toolchains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every probe's child a real process that logs what it was given instead of compiling."""
    monkeypatch.setattr(jitprobe, "epstack_python", lambda *_: [sys.executable, "-c", FAKE_CHILD])
    monkeypatch.setenv("PROBE_LOG", str(tmp_path / "probe.log"))
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path / "workspace"))
    monkeypatch.setattr(flashinfer, "SHIPPED", tmp_path / "jit" / "flashinfer")
    monkeypatch.setattr(triton, "epstack_python", lambda *_: [sys.executable, "-c", FAKE_CHILD])
    monkeypatch.setattr(triton, "SHIPPED", tmp_path / "jit" / "triton")
    return tmp_path / "probe.log"


def test_flashinfer_compiles_in_a_process_per_arch_and_ships_into_the_images_folder(
    fake_toolchains: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One FlashInfer process per arch, each with that arch alone (the folder a GPU node looks in) and
    the image's workspace; the others once with every arch and an empty workspace of their own."""
    out = tmp_path / "jit-sglang.json"
    args = [
        "jit",
        "probe",
        "--layer",
        "sglang",
        "--arch",
        "9.0a",
        "--arch",
        "10.0a",
        "--ship",
        "--json",
        str(out),
    ]
    assert main(args) == 0
    workspace = tmp_path / "workspace"
    lines = fake_toolchains.read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["triton-kernel", "flashinfer", "flashinfer", "deepgemm"]
    assert lines[1:3] == [f"flashinfer 9.0a 9.0a {workspace}", f"flashinfer 10.0a 10.0a {workspace}"]
    manifest = flashinfer.read_manifest(tmp_path / "jit" / "flashinfer")
    assert manifest is not None and manifest.modules == ("sampling",)
    assert manifest.key.archs == ("9.0a", "10.0a") and manifest.key.workspace == str(workspace)
    assert manifest.key.nvcc == "nvcc 13.0.88"
    assert [f.path for f in manifest.files] == [
        ".cache/flashinfer/0.7.2/100a/cached_ops/sampling/sampling.so",
        ".cache/flashinfer/0.7.2/90a/cached_ops/sampling/sampling.so",
    ]
    assert not (workspace / ".cache").exists()
    assert "shipped FlashInfer's sampling for 9.0a 10.0a (2 files, 7 bytes)" in capsys.readouterr().err


def test_ship_into_keeps_the_caches_in_the_folder_named(
    fake_toolchains: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--ship-into: a start's own $EPSTACK_HOME/jit (benchmarks/serve/cold_start.py), not the image's."""
    into = tmp_path / "home" / "jit"
    args = ["jit", "probe", "--layer", "sglang", "--cuda-arch", "9.0a", "--ship", "--ship-into", str(into)]
    assert main([*args, "--json", str(tmp_path / "r.json")]) == 0
    manifest = flashinfer.read_manifest(into / "flashinfer")
    assert manifest is not None and manifest.modules == ("sampling",)
    assert flashinfer.read_manifest(tmp_path / "jit" / "flashinfer") is None, "the image's folder untouched"
    assert f"into {into / 'flashinfer'}" in capsys.readouterr().err


def test_without_ship_flashinfers_workspace_is_the_probes_own(fake_toolchains: Path, tmp_path: Path) -> None:
    assert (
        main(["jit", "probe", "--layer", "sglang", "--arch", "9.0a", "--json", str(tmp_path / "r.json")]) == 0
    )
    probed = next(line for line in fake_toolchains.read_text().splitlines() if line.startswith("flashinfer"))
    assert str(tmp_path / "workspace") not in probed, "an empty cache of the probe's own"
    assert flashinfer.read_manifest(tmp_path / "jit" / "flashinfer") is None


def test_ship_refuses_a_workspace_that_already_holds_modules(
    fake_toolchains: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "workspace/.cache/flashinfer/0.7.2/90a/cached_ops/sampling").mkdir(parents=True)
    out = tmp_path / "r.json"
    assert main(["jit", "probe", "--layer", "sglang", "--arch", "9.0a", "--ship", "--json", str(out)]) == 2
    assert "already holds compiled FlashInfer modules" in capsys.readouterr().err
    assert not out.exists() and not fake_toolchains.exists(), "nothing probed, nothing written"


def test_toolchain_narrows_the_layers_probes(fake_toolchains: Path, tmp_path: Path) -> None:
    args = ["jit", "probe", "--layer", "sglang", "--toolchain", "flashinfer", "--arch", "9.0a"]
    assert main([*args, "--json", str(tmp_path / "r.json")]) == 0
    assert [line.split()[0] for line in fake_toolchains.read_text().splitlines()] == ["flashinfer"]
    assert [p.toolchain for p in read_report(tmp_path / "r.json").probes] == ["flashinfer"]


def test_the_base_layers_ship_builds_tritons_launcher_for_each_driver_folder(
    fake_toolchains: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The probe (an empty cache of its own), then one launcher per folder GPU nodes mount the driver
    in, linked against the stub cuda-stub.sh names; shipped under the image's JIT folder."""
    (tmp_path / "libcuda.so").write_text("stub")
    monkeypatch.setenv("EPSTACK_CUDA_STUB", str(tmp_path / "libcuda.so"))
    assert main(["jit", "probe", "--layer", "base", "--ship", "--json", str(tmp_path / "r.json")]) == 0
    manifest = triton.read_manifest(tmp_path / "jit" / "triton")
    assert manifest is not None
    assert [launcher.libcuda_dir for launcher in manifest.launchers] == list(triton.LIBCUDA_DIRS)
    for launcher in manifest.launchers:
        assert (tmp_path / "jit" / "triton" / launcher.file.path).read_text() == launcher.libcuda_dir
    assert "shipped Triton" in capsys.readouterr().err
    assert flashinfer.read_manifest(tmp_path / "jit" / "flashinfer") is None, "no FlashInfer in base"


def test_a_second_ship_keeps_what_the_first_shipped_and_probes_in_its_own_cache(
    fake_toolchains: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """guard-layer.sh runs again in built images (publish re-proves them; users run it in their own
    layers, or after the entrypoint copied the modules in): the shipped caches stay, and FlashInfer's
    probe compiles in an empty cache of its own."""
    (tmp_path / "libcuda.so").write_text("stub")
    monkeypatch.setenv("EPSTACK_CUDA_STUB", str(tmp_path / "libcuda.so"))
    args = ["jit", "probe", "--layer", "all", "--arch", "9.0a", "--ship", "--json", str(tmp_path / "r.json")]
    assert main(args) == 0
    manifests = {tool: (tmp_path / "jit" / f"{tool}.json").read_text() for tool in ("triton", "flashinfer")}
    (tmp_path / "workspace/.cache/flashinfer/0.7.2/90a/cached_ops/sampling").mkdir(parents=True)
    fake_toolchains.unlink()
    assert main(args) == 0
    assert manifests == {tool: (tmp_path / "jit" / f"{tool}.json").read_text() for tool in manifests}
    probed = next(line for line in fake_toolchains.read_text().splitlines() if line.startswith("flashinfer"))
    assert str(tmp_path / "workspace") not in probed, "an empty cache of the probe's own"
    assert len(fake_toolchains.read_text().splitlines()) == 5, "the five probes; no launcher built again"
