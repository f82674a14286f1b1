"""The guard's rows for the native libraries a process loaded: the one libnccl mapped and its own
version, the libcudart `import torch` mapped and the driver, skipped without a GPU. Real libraries built
here with gcc (tests.guard.test_loaded), maps text as Linux writes it, torch as a stand-in that says
whether it has a GPU."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from epstack.checkrow import Check, Verdict
from epstack.guard import libraries
from epstack.guard.expected import load_expected
from epstack.guard.libraries import (
    LoadedRuntime,
    check_cuda,
    check_nccl_loaded,
    cuda_rows,
    driver_version,
    live_cuda_rows,
    loaded_cuda_runtime,
    try_import,
)
from tests.conftest import PINS, REPO
from tests.guard.test_guard import compiler
from tests.guard.test_loaded import fake_library, maps_line

# ---- NCCL --------------------------------------------------------------------------------------


def test_no_libnccl_mapped_is_missing() -> None:
    assert check_nccl_loaded("2.30.7", maps_line("/venv/lib/libtorch.so")) == Check(
        component="NCCL (loaded)",
        expected="2.30.7",
        found="not loaded",
        verdict="missing",
        detail="no libnccl mapped after import torch",
    )


def test_two_libnccl_mapped_is_a_mismatch_naming_both() -> None:
    maps = maps_line("/venv/nvidia/nccl/lib/libnccl.so.2") + maps_line(
        "/usr/lib/libnccl.so.2", 0x7F0000100000
    )
    assert check_nccl_loaded("2.30.7", maps) == Check(
        component="NCCL (loaded)",
        expected="2.30.7",
        found="2 libnccl mapped: unreadable, unreadable",  # no such files: no version to read
        verdict="mismatch",
        detail="/venv/nvidia/nccl/lib/libnccl.so.2 /usr/lib/libnccl.so.2",
    )


@pytest.mark.parametrize(
    ("code", "found", "verdict"), [(23007, "2.30.7", "ok"), (22809, "2.28.9", "mismatch")]
)
def test_the_one_libnccl_mapped_answers_its_own_version(
    tmp_path: Path, code: int, found: str, verdict: Verdict
) -> None:
    library = fake_library(tmp_path, "libnccl.so.2", nccl=code)
    assert check_nccl_loaded("2.30.7", maps_line(library)) == Check(
        component="NCCL (loaded)", expected="2.30.7", found=found, verdict=verdict, detail=str(library)
    )


def test_an_nccl_whose_version_call_fails_is_unreadable_not_a_traceback(tmp_path: Path) -> None:
    failing = fake_library(tmp_path / "failing", "libnccl.so.2", status=5)
    assert check_nccl_loaded("2.30.7", maps_line(failing)) == Check(
        component="NCCL (loaded)",
        expected="2.30.7",
        found="unreadable",
        verdict="mismatch",
        detail="ncclGetVersion returned 5",
    )
    (tmp_path / "other.c").write_text("int other(void) { return 0; }\n")
    no_call = tmp_path / "libnccl.so.2"
    subprocess.run([compiler("gcc"), "-shared", "-fPIC", "-o", no_call, tmp_path / "other.c"], check=True)
    row = check_nccl_loaded("2.30.7", maps_line(no_call))
    assert (row.found, row.verdict) == ("unreadable", "mismatch") and "ncclGetVersion" in row.detail
    gone = check_nccl_loaded("2.30.7", maps_line(tmp_path / "gone" / "libnccl.so.2"))
    assert (gone.found, gone.verdict) == ("unreadable", "mismatch")
    assert gone.detail.startswith(f"{tmp_path / 'gone' / 'libnccl.so.2'}: cannot open shared object file")


# ---- CUDA --------------------------------------------------------------------------------------


def fake_torch(available: bool) -> SimpleNamespace:
    """torch as check_cuda asks it: whether CUDA is available, and cuda.init() (recorded)."""
    calls: list[str] = []
    cuda = SimpleNamespace(is_available=lambda: available, init=lambda: calls.append("init"), calls=calls)
    return SimpleNamespace(cuda=cuda)


def no_maps() -> str:
    raise AssertionError("without a GPU nothing reads the maps")


def test_without_torch_or_a_gpu_the_cuda_row_is_skipped_saying_why() -> None:
    pins = load_expected(PINS, ["python", "base"])
    assert check_cuda(pins, None, no_maps) == [
        Check(
            component="CUDA runtime/driver",
            expected="13.0",
            found="-",
            verdict="skipped",
            detail="torch not importable",
        )
    ]
    torch = fake_torch(available=False)
    (row,) = check_cuda(pins, torch, no_maps)  # type: ignore[arg-type]
    assert (row.component, row.verdict, row.detail) == (
        "CUDA runtime/driver",
        "skipped",
        "no GPU: torch.cuda.is_available() is False",
    )
    assert torch.cuda.calls == [], "no GPU: CUDA is never initialized"


def test_with_a_gpu_the_runtime_torch_mapped_and_the_driver_are_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = fake_library(tmp_path, "libcudart.so.13", runtime=13000)
    monkeypatch.setattr(libraries, "driver_version", lambda library="libcuda.so.1": "13.2")
    torch = fake_torch(available=True)
    rows = check_cuda(load_expected(PINS, ["python", "base"]), torch, lambda: maps_line(runtime))  # type: ignore[arg-type]
    assert torch.cuda.calls == ["init"], (
        "CUDA initialized before the maps are read: torch maps libcudart lazily"
    )
    assert rows == [
        Check(
            component="CUDA runtime (loaded)",
            expected="13.0",
            found="13.0",
            verdict="ok",
            detail=str(runtime),
        ),
        Check(component="CUDA driver", expected=">= 13.0", found="13.2", verdict="ok"),
    ]


def test_the_runtime_mapped_is_the_first_libcudart_with_every_path_named(tmp_path: Path) -> None:
    first = fake_library(tmp_path / "venv", "libcudart.so.13", runtime=12090)
    second = fake_library(tmp_path / "cuda", "libcudart.so.13", runtime=13000)
    maps = (
        maps_line("/venv/lib/libtorch.so")
        + maps_line(first, 0x7F0000100000)
        + maps_line(second, 0x7F0000200000)
    )
    assert loaded_cuda_runtime(maps) == LoadedRuntime(version="12.9", paths=(str(first), str(second)))
    assert loaded_cuda_runtime(maps_line("/venv/lib/libtorch.so")) == LoadedRuntime(
        version="not loaded", paths=()
    )


@pytest.mark.parametrize(
    ("runtime", "driver", "verdicts"),
    [
        ("13.0", "13.0", ("ok", "ok")),
        ("13.0", "13.10", ("ok", "ok")),
        ("13.1", "13.2", ("mismatch", "ok")),
        ("12.9", "12.9", ("mismatch", "mismatch")),
        ("not loaded", "13.0", ("mismatch", "ok")),
    ],
)
def test_the_runtime_must_equal_the_pin_and_the_driver_be_at_least_as_new(
    runtime: str, driver: str, verdicts: tuple[str, str]
) -> None:
    rows = cuda_rows(
        "13.0", LoadedRuntime(version=runtime, paths=("/a/libcudart.so.13", "/b/libcudart.so.13")), driver
    )
    assert [(row.component, row.expected, row.found) for row in rows] == [
        ("CUDA runtime (loaded)", "13.0", runtime),
        ("CUDA driver", ">= 13.0", driver),
    ]
    assert tuple(row.verdict for row in rows) == verdicts
    assert rows[0].detail == "/a/libcudart.so.13 /b/libcudart.so.13" and rows[1].detail == ""


def test_the_driver_version_is_the_drivers_own_answer(tmp_path: Path) -> None:
    assert driver_version(str(fake_library(tmp_path, "libcuda.so.1", driver=12080))) == "12.8"


DEFAULT_DRIVER = """
import json
from epstack.guard.libraries import LoadedRuntime, driver_version, live_cuda_rows
runtime = LoadedRuntime(version="13.0", paths=("/venv/libcudart.so.13",))
print(json.dumps([driver_version(), [row.found for row in live_cuda_rows("13.0", runtime)]]))
"""


def test_the_driver_is_the_libcuda_so_1_the_loader_finds(tmp_path: Path) -> None:
    """As the NVIDIA container runtime mounts it: libcuda.so.1 on the loader's path."""
    runtime = LoadedRuntime(version="13.0", paths=("/venv/libcudart.so.13",))
    if ctypes.util.find_library("cuda") is None:  # this host has no driver: the default finds none
        with pytest.raises(OSError, match=r"^libcuda\.so\.1: cannot open shared object file"):
            driver_version()
        (skipped,) = live_cuda_rows("13.0", runtime)
        assert skipped.detail.startswith("no GPU: libcuda.so.1: cannot open shared object file")
    fake_library(tmp_path, "libcuda.so.1", driver=13020)
    result = subprocess.run(
        [sys.executable, "-c", DEFAULT_DRIVER],
        env={**os.environ, "LD_LIBRARY_PATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    assert result.stdout.strip() == '["13.2", ["13.0", "13.2"]]'


# ---- imports -----------------------------------------------------------------------------------


def test_a_module_that_will_not_import_is_none_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, why = try_import("json")
    assert module is not None and module.__name__ == "json" and why == ""
    assert try_import("epstack_no_such_module") == (
        None,
        "ModuleNotFoundError: No module named 'epstack_no_such_module'",
    )
    (tmp_path / "epstack_broken_extension.py").write_text("raise OSError('libcudart.so.13: cannot open')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert try_import("epstack_broken_extension") == (None, "OSError: libcudart.so.13: cannot open")
