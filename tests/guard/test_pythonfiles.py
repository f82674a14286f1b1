"""The full guard's view of what Python runs beyond its distributions, on real files: a site-packages of
distributions with their RECORDs (as pip and uv write them), bytecode compiled by py_compile in each
invalidation mode, and a standard library against a record written by write_record."""

from __future__ import annotations

import base64
import hashlib
import os
import py_compile
import sysconfig
from pathlib import Path
from py_compile import PycInvalidationMode

import pytest

from epstack.guard import fingerprint
from epstack.guard.pythonfiles import (
    bytecode_problem,
    check_bytecode,
    check_recorded_python,
    check_startup_files,
    check_unowned,
    owned,
    python_file_checks,
)
from epstack.guard.record import write_record
from epstack.guard.report import GuardReport
from tests.conftest import PINS


def record_line(site: Path, path: Path) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()
    return f"{path.relative_to(site)},sha256={digest},{path.stat().st_size}"


def install(site: Path, name: str, files: dict[str, str]) -> None:
    """A distribution `name` 1.0 owning `files` (relative to site), RECORD listing them and itself."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    for relative, text in files.items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_text(text)
    lines = [record_line(site, site / relative) for relative in [*files, f"{info.name}/METADATA"]]
    (info / "RECORD").write_text("\n".join([*lines, f"{info.name}/RECORD,,"]) + "\n")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site-packages"
    install(site, "torch", {"torch/__init__.py": "version = '2.14.1'\n", "torch/_C.so": "ELF"})
    install(site, "setuptools", {"distutils-precedence.pth": "import _distutils_hack\n"})
    py_compile.compile(str(site / "torch/__init__.py"))  # as uv compiles: not in RECORD
    return site


def test_an_installed_site_packages_is_all_owned(site: Path) -> None:
    owners = owned(site)
    assert str(site / "torch/__init__.py") in owners and owners[str(site / "torch/_C.so")].startswith(
        "sha256="
    )
    assert [check_startup_files(site, owners).verdict, check_unowned(site, owners).verdict] == ["ok", "ok"]
    assert check_startup_files(site, owners).found == "1 as recorded"


def test_a_pth_added_or_changed_and_a_sitecustomize_are_named(site: Path) -> None:
    (site / "distutils-precedence.pth").write_text("import evil\n")
    (site / "zz-added.pth").write_text("import evil\n")
    (site / "sitecustomize.py").write_text("import evil\n")
    (site / "_virtualenv.pth").write_text("import _virtualenv\n")  # uv venv's own
    row = check_startup_files(site, owned(site))
    assert (row.verdict, row.found) == ("mismatch", "3 not")
    assert row.detail == (
        f"{site / 'distutils-precedence.pth'} (not as its RECORD hashes it), "
        f"{site / 'zz-added.pth'} (no distribution owns it), "
        f"{site / 'sitecustomize.py'} (no distribution owns it)"
    )


def test_a_stray_module_package_or_bytecode_is_named_pth_first(site: Path) -> None:
    (site / "stray.py").write_text("")
    (site / "torch/__pycache__/stray.cpython-312.pyc").write_bytes(b"")
    (site / "evil").mkdir()
    (site / "evil/__init__.py").write_text("")
    (site / "a.pth").write_text("")
    (site / "torch-1.0.dist-info/INSTALLER").write_text("uv\n")  # inside a .dist-info: nothing imports it
    row = check_unowned(site, owned(site))
    assert (row.verdict, row.found) == ("mismatch", "4 no RECORD lists")
    assert row.detail == ", ".join(
        str(site / p)
        for p in ("a.pth", "evil/__init__.py", "stray.py", "torch/__pycache__/stray.cpython-312.pyc")
    )


@pytest.mark.parametrize(
    ("mode", "other_source", "problem"),
    [
        (PycInvalidationMode.TIMESTAMP, False, ""),
        (PycInvalidationMode.TIMESTAMP, True, ""),  # Python compares it with the source, and recompiles
        (PycInvalidationMode.CHECKED_HASH, False, ""),
        (PycInvalidationMode.CHECKED_HASH, True, "not its source's hash"),
        (PycInvalidationMode.UNCHECKED_HASH, False, "unchecked-hash"),
        (PycInvalidationMode.UNCHECKED_HASH, True, "unchecked-hash, not its source's hash"),
    ],
)
def test_bytecode_python_runs_without_its_source_vouching_is_named(
    tmp_path: Path, mode: PycInvalidationMode, other_source: bool, problem: str
) -> None:
    source = tmp_path / "mod.py"
    source.write_text("TAMPERED = 1\n" if other_source else "x = 1\n")
    pyc = py_compile.compile(str(source), invalidation_mode=mode)
    assert pyc is not None
    source.write_text("x = 1\n")
    assert bytecode_problem(pyc) == problem
    row = check_bytecode([tmp_path])
    assert row.verdict == ("mismatch" if problem else "ok")
    assert row.detail == (f"{pyc} ({problem})" if problem else str(tmp_path))


def test_bytecode_without_its_source_is_never_imported(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text("x = 1\n")
    pyc = py_compile.compile(str(source), invalidation_mode=PycInvalidationMode.UNCHECKED_HASH)
    assert pyc is not None
    source.unlink()
    assert bytecode_problem(pyc) == ""


def test_the_standard_library_is_compared_with_the_nearest_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard of layer sglang reads deepep's record where sglang has none yet (an image build)."""
    stdlib, etc = tmp_path / "python3.12", tmp_path / "etc-python3.12"
    for folder in (stdlib / "json", etc):
        folder.mkdir(parents=True)
    (stdlib / "json/__init__.py").write_text("")
    (etc / "sitecustomize.py").write_text("# Ubuntu's\n")
    monkeypatch.setattr(sysconfig, "get_paths", lambda: {"stdlib": str(stdlib)})
    monkeypatch.setattr(fingerprint, "PYTHON_CONFIG", str(tmp_path / "etc-python3*"))
    monkeypatch.setenv("EPSTACK_REPORTS", str(tmp_path / "reports"))
    env = {
        "EPSTACK_HOME": str(tmp_path / "home"),
        "VIRTUAL_ENV": str(tmp_path / "venv"),
        "CUDA_HOME": "/none",
    }
    row = check_recorded_python("sglang", str(stdlib))
    assert (row.verdict, row.found) == ("skipped", "no build record")
    report = tmp_path / "reports/deepep.json"
    report.parent.mkdir()
    report.write_text(GuardReport(pins=PINS, layer="deepep", checks=()).to_json())
    write_record(layer="deepep", pins=PINS, locks=None, report=report, env=env)
    row = check_recorded_python("sglang", str(stdlib))
    assert (row.verdict, row.found, row.detail) == ("ok", "as the deepep build recorded", f"{stdlib}, {etc}")
    (stdlib / "sitecustomize.py").write_text("import evil\n")
    (etc / "sitecustomize.py").write_text("# Ubuntu!\n")
    before = (stdlib / "json/__init__.py").stat()
    (stdlib / "json/__init__.py").write_text("#")
    os.utime(stdlib / "json/__init__.py", ns=(before.st_atime_ns, before.st_mtime_ns + 2_000_000_000))
    row = check_recorded_python("sglang", str(stdlib))
    assert (row.verdict, row.found) == ("mismatch", "3 changed")
    assert row.detail.startswith(f"{etc / 'sitecustomize.py'}: size 11 -> 10")
    assert f"{stdlib / 'sitecustomize.py'}: added" in row.detail
    assert f"{stdlib / 'json/__init__.py'}: size 0 -> 1, mtime " in row.detail


def test_this_interpreters_rows(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EPSTACK_REPORTS", str(tmp_path))
    rows = python_file_checks("sglang")
    sites = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    assert [row.component for row in rows] == [
        *(["Python startup files", "site-packages (RECORD)"] * len(sites)),
        "bytecode",
        "standard library (as built)",
    ]
