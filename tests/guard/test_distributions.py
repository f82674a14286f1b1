"""Python distributions as the guard reads them: each pinned one at its pin (local tag ignored), the
NVSHMEM headers DeepEP compiles with, torch's CUDA, what an installed package requires of the pins,
and the whole venv against the locks of its layer."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from epstack.checkrow import Check
from epstack.guard import distributions
from epstack.guard.distributions import (
    check_closure,
    check_distribution,
    check_nvshmem_headers,
    check_requirements,
    check_torch_cuda,
    closure_report,
    same_release,
)
from epstack.guard.expected import Expected
from epstack.python import closure
from epstack.python.closure import Distribution
from tests.conftest import DEEPEP_WHEEL, REPO, write_deepep_manifest, write_dist

CU130 = Expected(torch_cuda_tag="cu130")


@pytest.mark.parametrize(
    ("found", "pinned", "same"),
    [
        ("2.14.1+cu130", "2.14.1", True),
        ("2.14.1", "2.14.1+cu129", True),
        ("2.14.1.post1", "2.14.1", False),
        ("2.14.0", "2.14.1", False),
        ("two", "two", False),
        ("2.14.1", "?", False),
    ],
)
def test_same_release_ignores_the_local_tag_only(found: str, pinned: str, same: bool) -> None:
    assert same_release(found, pinned) is same


def test_a_distribution_at_its_pin_another_or_none(site: Path) -> None:
    assert check_distribution("nvidia-nccl-cu13", "2.30.7") == Check(
        component="nvidia-nccl-cu13", expected="2.30.7", found="not installed", verdict="missing"
    )
    write_dist(site, "nvidia-nccl-cu13", "2.28.9", ("nvidia/nccl/lib/libnccl.so.2",))
    assert check_distribution("nvidia-nccl-cu13", "2.30.7") == Check(
        component="nvidia-nccl-cu13", expected="2.30.7", found="2.28.9", verdict="mismatch"
    )
    assert check_distribution("nvidia-nccl-cu13", "2.28.9") == Check(
        component="nvidia-nccl-cu13", expected="2.28.9", found="2.28.9", verdict="ok"
    )


NVSHMEM_H = """#pragma once
#define NVSHMEM_VENDOR_MAJOR_VERSION {}
#define NVSHMEM_VENDOR_MINOR_VERSION {}
#define NVSHMEM_VENDOR_PATCH_VERSION {}
#define NVSHMEM_VENDOR_PACKAGE_VERSION 0
"""


def test_nvshmem_header_rows(tmp_path: Path) -> None:
    header = tmp_path / "nvshmem_version.h"
    header.write_text(NVSHMEM_H.format(3, 4, 5))
    assert check_nvshmem_headers("3.4.5", header) == Check(
        component="NVSHMEM (headers)", expected="3.4.5", found="3.4.5", verdict="ok", detail=str(header)
    )
    header.write_text(NVSHMEM_H.format(3, 4, 6))
    assert (check_nvshmem_headers("3.4.5", header).found, check_nvshmem_headers("3.4.5", header).verdict) == (
        "3.4.6",
        "mismatch",
    )
    header.write_text("#define NVSHMEM_VENDOR_MAJOR_VERSION 3\n")
    assert (check_nvshmem_headers("3", header).found, check_nvshmem_headers("3", header).verdict) == (
        "3.?.?",
        "mismatch",
    )
    absent = Check(
        component="NVSHMEM (headers)", expected="3.4.5", found="no nvshmem_version.h", verdict="missing"
    )
    assert check_nvshmem_headers("3.4.5", None) == absent
    assert check_nvshmem_headers("3.4.5", tmp_path) == absent  # a folder is no header


def test_nvshmem_header_with_bytes_that_are_not_utf8_is_read(tmp_path: Path) -> None:
    header = tmp_path / "nvshmem_version.h"
    header.write_bytes(b"/* \xff */\n" + NVSHMEM_H.format(3, 4, 5).encode())
    assert check_nvshmem_headers("3.4.5", header).verdict == "ok"


# ---- torch's CUDA ---------------------------------------------------------------------------------


def test_torch_cuda_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(distributions, "find", lambda name: None)  # the test venv may hold CPU torch
    assert check_torch_cuda(CU130, None, "") == Check(
        component="torch CUDA", expected="cu130 (CUDA 13.0)", found="torch not installed", verdict="missing"
    )


def test_torch_cuda_from_the_local_tag(site: Path) -> None:
    write_dist(site, "torch", "2.14.1+cu129", ("torch/__init__.py",))
    assert check_torch_cuda(CU130, None, "") == Check(
        component="torch CUDA", expected="cu130 (CUDA 13.0)", found="cu129", verdict="mismatch"
    )
    cu129 = Expected(torch_cuda_tag="cu129")
    assert check_torch_cuda(cu129, None, "") == Check(
        component="torch CUDA", expected="cu129 (CUDA 12.9)", found="cu129", verdict="ok"
    )


def test_torch_cuda_of_a_wheel_without_a_local_tag_is_what_torch_reports(site: Path) -> None:
    write_dist(site, "torch", "2.14.1", ("torch/__init__.py",))

    def torch(cuda: str | None) -> ModuleType:
        module = ModuleType("torch")
        setattr(module, "version", SimpleNamespace(cuda=cuda))  # noqa: B010 (a module's attribute)
        return module

    def row(found: str, verdict: str) -> Check:
        return Check(
            component="torch CUDA",
            expected="cu130 (CUDA 13.0)",
            found=found,
            verdict=verdict,  # type: ignore[arg-type]
            detail="torch.version.cuda",
        )

    assert check_torch_cuda(CU130, torch("13.0"), "") == row("CUDA 13.0", "ok")
    assert check_torch_cuda(CU130, torch("13.0.88"), "") == row("CUDA 13.0.88", "ok")
    assert check_torch_cuda(CU130, torch("13.1"), "") == row("CUDA 13.1", "mismatch")
    assert check_torch_cuda(CU130, torch("12.0"), "") == row("CUDA 12.0", "mismatch")
    assert check_torch_cuda(CU130, torch(None), "") == row("CPU build", "mismatch")
    assert check_torch_cuda(CU130, None, "ImportError: boom") == Check(
        component="torch CUDA",
        expected="cu130 (CUDA 13.0)",
        found="unknown",
        verdict="mismatch",
        detail="no local tag and import torch failed: ImportError: boom",
    )


def test_torch_cuda_of_a_torch_with_broken_metadata(site: Path) -> None:
    info = site / "torch-2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: two\n")
    row = check_torch_cuda(CU130, None, "")
    assert (row.component, row.expected, row.found, row.verdict) == (
        "torch CUDA",
        "cu130 (CUDA 13.0)",
        "two",
        "mismatch",
    )
    assert row.detail == f"{info}: version 'two' is not a PEP 440 version"


# ---- what an installed package requires of the pins ---------------------------------------------


def test_requirement_rows_on_pinned_packages(site: Path) -> None:
    requires = (
        "NVIDIA_NCCL_CU13>=2.28",  # any spelling of a pinned name
        "nvidia-nvshmem-cu13==3.3.20",
        "filelock",  # not pinned
        'triton==3.1.0; sys_platform == "win32"',  # not here
        'sglang; extra == "serve"',  # an extra not asked for
        "torch",
    )
    write_dist(site, "sgl-kernel", "0.3.0", ("sgl_kernel/__init__.py",), requires)
    pinned = {
        "nvidia-nccl-cu13": "2.30.7",
        "nvidia-nvshmem-cu13": "3.4.5",
        "triton": "3.5.0",
        "torch": "2.14.1",
    }
    pinned["sglang"] = "0.5.23"
    assert check_requirements("sgl-kernel", pinned) == [
        Check(
            component="sgl-kernel requires nvidia-nccl-cu13",
            expected="2.30.7 (pinned)",
            found=">=2.28",
            verdict="ok",
        ),
        Check(
            component="sgl-kernel requires nvidia-nvshmem-cu13",
            expected="3.4.5 (pinned)",
            found="==3.3.20",
            verdict="override (pinned)",
            detail="pins.env installs nvidia-nvshmem-cu13 3.4.5 on purpose",
        ),
        Check(component="sgl-kernel requires torch", expected="2.14.1 (pinned)", found="any", verdict="ok"),
    ]


def test_a_prerelease_pin_can_satisfy_a_requirement(site: Path) -> None:
    write_dist(site, "sglang", "0.5.23", ("sglang/__init__.py",), ("flashinfer-python>=0.4",))
    (row,) = check_requirements("sglang", {"flashinfer-python": "0.5.0rc1"})
    assert row.verdict == "ok"


def test_a_malformed_requirement_row(site: Path) -> None:
    write_dist(site, "sglang", "0.5.23", ("sglang/__init__.py",), ("torch (>=2",))
    (row,) = check_requirements("sglang", {"torch": "2.14.1"})
    assert (row.component, row.expected, row.found, row.verdict) == (
        "sglang requires ?",
        "a valid Requires-Dist",
        "malformed",
        "mismatch",
    )
    assert row.detail.startswith("sglang's metadata: 'torch (>=2'")


# ---- the whole venv against the locks ------------------------------------------------------------


def test_the_closure_summary_and_its_failing_rows_in_groups() -> None:
    venv = [
        Distribution(name="a-extra", locked="", installed="1.0", source=""),
        Distribution(name="b-ok", locked="1.0", installed="1.0", source="base.txt"),
        Distribution(name="c-other", locked="2.0", installed="2.1", source="sglang.txt"),
        Distribution(name="d-missing", locked="3.0", installed="", source="base.txt"),
        Distribution(name="e-extra", locked="", installed="5.0", source=""),
    ]
    rows = check_closure(venv, ["/locks/base.txt", "/locks/sglang.txt"])
    assert rows == [
        Check(
            component="Python distributions",
            expected="3 locked",
            found="4 installed",
            verdict="mismatch",
            detail="1 missing, 2 extra, 1 other version (rows below; all in --json); base.txt, sglang.txt",
        ),
        Check(
            component="d-missing", expected="3.0", found="not installed", verdict="missing", detail="base.txt"
        ),
        Check(component="a-extra", expected="in no lock", found="1.0", verdict="extra"),
        Check(component="e-extra", expected="in no lock", found="5.0", verdict="extra"),
        Check(component="c-other", expected="2.0", found="2.1", verdict="mismatch", detail="sglang.txt"),
    ]


def test_a_venv_exactly_as_locked_is_one_ok_row() -> None:
    venv = [Distribution(name="b-ok", locked="1.0", installed="1.0", source="base.txt")]
    assert check_closure(venv, ["/locks/base.txt"]) == [
        Check(
            component="Python distributions",
            expected="1 locked",
            found="1 installed",
            verdict="ok",
            detail="exactly base.txt",
        )
    ]
    only_other = [Distribution(name="c", locked="2.0", installed="2.1", source="base.txt")]
    assert check_closure(only_other, ["/locks/base.txt"])[0].detail.startswith("1 other version (rows")


def test_the_closure_report_reads_the_venv_the_locks_and_the_deep_ep_manifest(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = write_deepep_manifest(tmp_path / "deepep-source.json", wheel=DEEPEP_WHEEL)
    monkeypatch.setenv("EPSTACK_DEEPEP_MANIFEST", str(manifest))
    monkeypatch.setattr(closure, "venv_paths", lambda: [str(site)])
    write_dist(site, "deep-ep", "2.0.0+local", ("deep_ep/__init__.py",))
    write_dist(site, "not-locked", "1.0", ("not_locked/__init__.py",))
    rows, venv = closure_report("deepep", REPO / "locks")
    by_name = {d.name: d for d in venv}
    assert by_name["deep-ep"] == Distribution(
        name="deep-ep", locked="2.0.0+local", installed="2.0.0+local", source="deepep-source.json"
    )
    assert by_name["not-locked"].verdict == "extra" and by_name["torch"].verdict == "missing"
    summary = rows[0]
    assert (summary.expected, summary.found, summary.verdict) == (
        f"{len(venv) - 1} locked",
        "2 installed",
        "mismatch",
    )
    assert summary.detail.endswith("; base.txt, deepep-source.json")
    assert [row.component for row in rows[1:]] == [
        *(d.name for d in venv if d.verdict == "missing"),
        "not-locked",
    ]
