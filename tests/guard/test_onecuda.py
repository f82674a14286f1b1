"""One CUDA per image: CUDA_HOME's compiler, NVVM and headers and the venv's toolkit wheels, each at the
pinned minor; no distribution of another CUDA major. Real files: compiler binaries stand-ins that carry
the banner nvcc and cicc carry, cuda.h lines as NVIDIA writes them, dist-info directories."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from epstack.checkrow import Check
from epstack.guard.onecuda import (
    banner_version,
    cuda_home,
    cuda_home_checks,
    header_version,
    other_major_check,
    release_wheel_checks,
)
from epstack.stack import cuda_wheels
from tests.conftest import write_dist


def compiler_binary(path: Path, release: str, version: str) -> None:
    """Bytes around the banner, as in nvcc and cicc (the banner sits deep inside the binary)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    banner = f"Cuda compilation tools, release {release}, V{version}".encode()
    path.write_bytes(b"\x7fELF" + bytes(4096) + banner + b"\0" + bytes(64))


def toolkit(home: Path, *, nvcc: str = "13.0.88", cicc: str = "13.0.88", header: int = 13000) -> Path:
    for part, version in (("bin/nvcc", nvcc), ("nvvm/bin/cicc", cicc)):
        compiler_binary(home / part, ".".join(version.split(".")[:2]), version)
    (home / "include").mkdir(parents=True)
    (home / "include" / "cuda.h").write_text(f"#ifndef __cuda_cuda_h__\n#define CUDA_VERSION {header}\n")
    return home


def rows(checks: list) -> dict[str, tuple[str, str]]:  # type: ignore[type-arg]
    return {check.component: (check.found, check.verdict) for check in checks}


def test_versions_are_read_from_the_files(tmp_path: Path) -> None:
    compiler_binary(tmp_path / "nvcc", "13.0", "13.0.88")
    assert banner_version(tmp_path / "nvcc") == "13.0.88"
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "other").write_bytes(b"\x7fELF no banner")
    assert banner_version(tmp_path / "empty") is None and banner_version(tmp_path / "other") is None
    assert banner_version(tmp_path / "absent") is None and banner_version(tmp_path) is None
    (tmp_path / "cuda.h").write_text("#define CUDA_VERSION_MAJOR 12\n#define CUDA_VERSION 12090\n")
    assert header_version(tmp_path / "cuda.h") == "12.9"


def test_cuda_home_of_the_pinned_release_passes(tmp_path: Path) -> None:
    checks = cuda_home_checks("13.0", toolkit(tmp_path / "cuda"))
    assert rows(checks) == {
        "nvcc (CUDA_HOME)": ("13.0.88", "ok"),
        "NVVM (CUDA_HOME)": ("13.0.88", "ok"),
        "CUDA headers (CUDA_HOME)": ("13.0", "ok"),
    }
    assert checks[0].detail == str(tmp_path / "cuda" / "bin" / "nvcc")


def test_a_part_of_another_release_is_a_mismatch(tmp_path: Path) -> None:
    """NVVM of 13.5 under a 13.0 nvcc: the mix the image must never hold."""
    found = rows(cuda_home_checks("13.0", toolkit(tmp_path / "cuda", cicc="13.5.37", header=13050)))
    assert found["NVVM (CUDA_HOME)"] == ("13.5.37", "mismatch")
    assert found["CUDA headers (CUDA_HOME)"] == ("13.5", "mismatch")
    assert found["nvcc (CUDA_HOME)"] == ("13.0.88", "ok")


def test_missing_and_unreadable_parts_are_missing(tmp_path: Path) -> None:
    home = toolkit(tmp_path / "cuda")
    (home / "nvvm" / "bin" / "cicc").unlink()
    (home / "bin" / "nvcc").write_bytes(b"#!/bin/sh\n")
    found = rows(cuda_home_checks("13.0", home))
    assert found["NVVM (CUDA_HOME)"] == ("not found", "missing")
    assert found["nvcc (CUDA_HOME)"] == ("no version in it", "missing")


def test_cuda_home_is_chosen_as_the_jits_choose_it() -> None:
    assert cuda_home({"CUDA_HOME": "/a", "CUDA_PATH": "/b"}) == Path("/a")
    assert cuda_home({"CUDA_PATH": "/b"}) == Path("/b")
    assert cuda_home({}) == Path("/usr/local/cuda")


def test_release_wheels_at_the_pinned_minor(site: Path) -> None:
    write_dist(site, "nvidia-cuda-nvcc", "13.0.88", ("nvidia/cu13/bin/nvcc",))
    write_dist(site, "nvidia-nvvm", "13.5.37", ("nvidia/cu13/nvvm/bin/cicc",))
    write_dist(site, "nvidia-cuda-cccl", "13.3.5.0.6", ("nvidia/cu13/include/cccl/cuda/std/version",))
    wheels = cuda_wheels("13.0.3")
    found = rows(release_wheel_checks("13.0", wheels, ()))
    assert found["nvidia-cuda-nvcc"] == ("13.0.88", "ok")
    assert found["nvidia-nvvm"] == ("13.5.37", "mismatch")
    assert found["nvidia-cuda-cccl"] == ("13.3.5.0.6", "mismatch"), (
        "13.3 is not 13.0 (a prefix match would say so)"
    )
    excepted = {c.component: c for c in release_wheel_checks("13.0", wheels, ("nvidia-nvvm",))}
    assert excepted["nvidia-nvvm"].verdict == "override (pinned)" and not excepted["nvidia-nvvm"].failed
    assert "CUDA_MINOR_EXCEPTIONS" in excepted["nvidia-nvvm"].detail
    assert excepted["nvidia-cuda-cccl"].verdict == "mismatch", "an exception names one wheel, not all"


def test_a_cuda_12_image_checks_the_cu12_names(site: Path) -> None:
    write_dist(site, "nvidia-cuda-runtime-cu12", "12.8.90", ("nvidia/cuda_runtime/lib/libcudart.so.12",))
    assert rows(release_wheel_checks("12.9", cuda_wheels("12.9.1"), ())) == {
        "nvidia-cuda-runtime-cu12": ("12.8.90", "mismatch")
    }


def test_a_distribution_of_another_cuda_major_fails(site: Path) -> None:
    write_dist(site, "nvidia-cudnn-cu13", "9.24.0.43", ("nvidia/cudnn/lib/libcudnn.so.9",))
    assert other_major_check(13, metadata.distributions(path=[str(site)])).verdict == "ok"
    write_dist(site, "nvidia_cutlass_dsl_libs_cu12", "4.8.0", ("nvidia_cutlass_dsl/cu12/lib/x.so",))
    check = other_major_check(13, metadata.distributions(path=[str(site)]))
    assert (check.found, check.verdict) == ("nvidia-cutlass-dsl-libs-cu12", "mismatch")
    assert other_major_check(12, metadata.distributions(path=[str(site)])).found == "nvidia-cudnn-cu13"


def test_a_release_wheel_with_broken_metadata_is_a_mismatch_not_a_traceback(site: Path) -> None:
    info = site / "nvidia_cuda_nvcc-13.0.88.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-cuda-nvcc\n")
    (row,) = release_wheel_checks("13.0", cuda_wheels("13.0.3"), ())
    assert (row.component, row.found, row.verdict) == ("nvidia-cuda-nvcc", "unreadable metadata", "mismatch")
    assert "no METADATA (or no Version in it)" in row.detail


def test_each_cuda_home_row_names_its_file_and_the_pinned_minor(tmp_path: Path) -> None:
    home = toolkit(tmp_path / "cuda")
    assert cuda_home_checks("13.0", home) == [
        Check(
            component="nvcc (CUDA_HOME)",
            expected="13.0",
            found="13.0.88",
            verdict="ok",
            detail=str(home / "bin" / "nvcc"),
        ),
        Check(
            component="NVVM (CUDA_HOME)",
            expected="13.0",
            found="13.0.88",
            verdict="ok",
            detail=str(home / "nvvm" / "bin" / "cicc"),
        ),
        Check(
            component="CUDA headers (CUDA_HOME)",
            expected="13.0",
            found="13.0",
            verdict="ok",
            detail=str(home / "include" / "cuda.h"),
        ),
    ]


def test_a_header_without_its_version_is_missing_and_not_a_traceback(tmp_path: Path) -> None:
    home = toolkit(tmp_path / "cuda")
    (home / "include" / "cuda.h").write_text("#define CUDA_VERSION_MAJOR 13\n  #define CUDA_VERSION 13000\n")
    assert rows(cuda_home_checks("13.0", home))["CUDA headers (CUDA_HOME)"] == ("no version in it", "missing")
    assert header_version(home / "include" / "cuda.h") is None, "a define starts its line"
    assert header_version(tmp_path / "absent.h") is None and header_version(tmp_path) is None
    (home / "include" / "cuda.h").unlink()
    assert rows(cuda_home_checks("13.0", home))["CUDA headers (CUDA_HOME)"] == ("not found", "missing")


def test_a_header_with_bytes_that_are_not_utf8_is_read(tmp_path: Path) -> None:
    """NVIDIA's headers carry a copyright sign; an encoding error must not hide the version."""
    header = tmp_path / "cuda.h"
    header.write_bytes(b"/* Copyright \xa9 NVIDIA */\n#define CUDA_VERSION 13020\n")
    assert header_version(header) == "13.2"


def test_a_wheel_rows_detail_is_its_dist_info_and_an_exception_says_so(site: Path) -> None:
    write_dist(site, "nvidia-cuda-nvcc", "13.0.88", ("nvidia/cu13/bin/nvcc",))
    write_dist(site, "nvidia-nvvm", "13.5.37", ("nvidia/cu13/nvvm/bin/cicc",))
    found = {c.component: c for c in release_wheel_checks("13.0", cuda_wheels("13.0.3"), ("nvidia-nvvm",))}
    assert found == {
        "nvidia-cuda-nvcc": Check(
            component="nvidia-cuda-nvcc",
            expected="13.0.*",
            found="13.0.88",
            verdict="ok",
            detail="nvidia_cuda_nvcc-13.0.88.dist-info",
        ),
        "nvidia-nvvm": Check(
            component="nvidia-nvvm",
            expected="13.0.*",
            found="13.5.37",
            verdict="override (pinned)",
            detail="CUDA_MINOR_EXCEPTIONS names it; nvidia_nvvm-13.5.37.dist-info",
        ),
    }
    plain = {c.component: c for c in release_wheel_checks("13.0", cuda_wheels("13.0.3"), ())}
    assert plain["nvidia-nvvm"].detail == "nvidia_nvvm-13.5.37.dist-info", "a mismatch names the dist-info"


def test_an_excepted_wheel_at_the_pinned_minor_is_simply_ok(site: Path) -> None:
    write_dist(site, "nvidia-nvvm", "13.0.88", ("nvidia/cu13/nvvm/bin/cicc",))
    (row,) = release_wheel_checks("13.0", cuda_wheels("13.0.3"), ("nvidia-nvvm",))
    assert (row.verdict, row.detail) == ("ok", "nvidia_nvvm-13.0.88.dist-info")


def test_the_major_row_names_every_other_major_distribution(site: Path) -> None:
    write_dist(site, "nvidia-cudnn-cu13", "9.24.0.43", ("nvidia/cudnn/lib/libcudnn.so.9",))
    assert other_major_check(13, metadata.distributions(path=[str(site)])) == Check(
        component="CUDA major of distributions",
        expected="cu13 only",
        found="none of another major",
        verdict="ok",
        detail="",
    )
    write_dist(site, "nvidia_cutlass_dsl_libs_cu12", "4.8.0", ("nvidia_cutlass_dsl/cu12/lib/x.so",))
    write_dist(site, "nvidia-cublas-cu12", "12.9.1.4", ("nvidia/cublas/lib/libcublas.so.12",))
    assert other_major_check(13, metadata.distributions(path=[str(site)])) == Check(
        component="CUDA major of distributions",
        expected="cu13 only",
        found="nvidia-cublas-cu12, nvidia-cutlass-dsl-libs-cu12",
        verdict="mismatch",
        detail="a library of another CUDA major is never the one this image's CUDA runs",
    )
