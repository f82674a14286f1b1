"""`smoke elastic --export-jit-cache FILE` on CPU: stub ranks, a stub preflight and a stub device probe
(epstack.jit.gpuexport.DEVICE_PROBE); the kernels are H200-shaped files in $EP_JIT_CACHE_DIR. A pass
writes the export and its sha256sum line; a failure writes neither; a path that cannot be written is
refused before any rank starts."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from epstack.errors import BAD_INPUT, CHECK_FAILED, ENVIRONMENT, OK
from epstack.jit import gpuexport as export
from epstack.jit.deepep import unpack
from epstack.smoke.__main__ import main as smoke_main
from epstack.smoke.stage import HANG_RANK_ENV, HANG_STAGE_ENV
from tests.jit.test_deepep import fake_nvcc, h200_kernels, write_cache

RUN = ["elastic", "--gpus-per-node", "2", "--timeout", "20"]
H200 = {"arch": "9.0", "device": "NVIDIA H200", "sm_count": 132}


@pytest.fixture
def kernels(stub_cli: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """The kernels a GPU run compiled into $EP_JIT_CACHE_DIR, an H200 the probe reports, nvcc 13.0."""
    files = h200_kernels()
    monkeypatch.setenv("EP_JIT_CACHE_DIR", str(write_cache(tmp_path / "deep_ep", files)))
    monkeypatch.setenv("EP_JIT_NVCC_COMPILER", str(fake_nvcc(tmp_path / "cuda" / "bin", "13.0")))
    monkeypatch.setattr(
        export, "DEVICE_PROBE", (sys.executable, "-c", f"print({json.dumps(json.dumps(H200))})")
    )
    return files


def smoke(tmp_path: Path, out: Path) -> int:
    run = ["--run-dir", str(tmp_path / "run"), "--json", str(tmp_path / "report.json")]
    return smoke_main([*RUN, *run, "--export-jit-cache", str(out)])


def test_a_pass_writes_the_export_its_sha256sum_line_and_the_reports_section(
    kernels: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "exports" / "deep_ep-kernels.tar.gz"
    assert smoke(tmp_path, out) == OK
    data = out.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    sums = out.with_name("deep_ep-kernels.tar.gz.sha256")
    assert sums.read_text() == f"{digest}  deep_ep-kernels.tar.gz\n"
    subprocess.run(["sha256sum", "--check", "--status", sums.name], cwd=out.parent, check=True)
    report = json.loads((tmp_path / "report.json").read_text())
    section = report["jit_export"]
    total = sum(len(d) for d in kernels.values())
    assert (report["verdict"], section["path"], section["sha256"]) == ("pass", str(out), digest)
    assert (section["kernels"], section["files"], section["bytes"]) == (13, 26, total)
    assert section["archive_bytes"] == len(data)
    assert {k: section["key"][k] for k in (*H200, "nvcc")} == {**H200, "nvcc": "13.0"}
    manifest, files = unpack(out, data, digest)
    assert files == kernels and manifest.key.sm_count == 132
    assert f"exported 13 DeepEP kernels ({total:,} bytes)" in capsys.readouterr().err.replace("\n", " ")


def test_a_failing_run_exports_nothing(
    kernels: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STUB_FAIL_RANK", "1")
    monkeypatch.setenv(HANG_STAGE_ENV, "report")
    monkeypatch.setenv(HANG_RANK_ENV, "0")
    out = tmp_path / "deep_ep-kernels.tar.gz"
    run = ["--run-dir", str(tmp_path / "run"), "--json", str(tmp_path / "report.json")]
    assert smoke_main([*RUN, "--timeout", "5", *run, "--export-jit-cache", str(out)]) == CHECK_FAILED
    assert not out.exists() and not out.with_name(f"{out.name}.sha256").exists()
    assert "jit_export" not in json.loads((tmp_path / "report.json").read_text())


@pytest.mark.parametrize("where", ["under a file", "a folder"])
def test_a_path_that_cannot_take_the_export_is_refused_before_any_rank_starts(
    kernels: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "k.tar.gz" if where == "under a file" else tmp_path
    assert smoke(tmp_path, out) == BAD_INPUT
    err = capsys.readouterr().err
    assert "--export-jit-cache" in err and "fix:" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists() and not (tmp_path / "report.json").exists()


def test_a_device_probe_that_fails_is_an_environment_problem_and_no_export(
    kernels: dict[str, bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(
        export, "DEVICE_PROBE", (sys.executable, "-c", "import sys; sys.exit('no CUDA driver')")
    )
    out = tmp_path / "deep_ep-kernels.tar.gz"
    assert smoke(tmp_path, out) == ENVIRONMENT
    assert "could not read the GPU's properties for the export (no CUDA driver)" in capsys.readouterr().err
    assert not out.exists()
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["verdict"] == "pass" and report["exit_code"] == ENVIRONMENT, "the pass is still reported"
    assert "no CUDA driver" in report["jit_export"]["error"]


def test_a_run_that_compiled_no_kernels_exports_nothing(
    kernels: dict[str, bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    empty = tmp_path / "empty-cache"
    monkeypatch.setenv("EP_JIT_CACHE_DIR", str(empty))
    out = tmp_path / "deep_ep-kernels.tar.gz"
    assert smoke(tmp_path, out) == BAD_INPUT
    assert f"{empty}: no compiled DeepEP kernels" in capsys.readouterr().err
    assert not out.exists()
