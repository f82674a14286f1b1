"""`epstack image nccl-check`: the version checks scripts/gpu/install-nccl.sh used to do in awk and an
inline Python, in epstack, against the pins' NCCL_VERSION."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from epstack.checkrow import Check
from epstack.commands.main import main
from epstack.errors import BadInput, EnvironmentProblem
from epstack.guard import nccl
from epstack.guard.nccl import library_version, loaded_version, source_version
from epstack.pins.load import load_pins
from tests.conftest import PINS, REPO
from tests.guard.test_guard import fake_nccl  # noqa: F401 (fixture: gcc-built libnccl 2.28.9, 2.30.7, the pin)
from tests.python.localindex import write_wheel


def nccl_tree(root: Path, version: str) -> Path:
    major, minor, patch = version.split(".")
    (root / "nccl" / "makefiles").mkdir(parents=True)
    (root / "nccl" / "makefiles" / "version.mk").write_text(
        f"##### version\nNCCL_MAJOR   := {major}\nNCCL_MINOR   := {minor}\n"
        f"NCCL_PATCH   := {patch}\nNCCL_SUFFIX  :=\n"
    )
    return root / "nccl"


PINNED = load_pins(PINS).nccl_version  # 2.32.6; torch 2.14.1's own is 2.30.7


def test_a_source_tree_of_the_pinned_version(tmp_path: Path) -> None:
    assert (
        main(["image", "nccl-check", "--pins", str(PINS), "--source", str(nccl_tree(tmp_path, PINNED))]) == 0
    )


def test_a_source_tree_of_another_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["image", "nccl-check", "--pins", str(PINS), "--source", str(nccl_tree(tmp_path, "2.28.9"))])
        == 1
    )
    assert "NCCL 2.28.9" in capsys.readouterr().out


def test_built_libraries(fake_nccl: dict[str, Path]) -> None:  # noqa: F811
    assert main(["image", "nccl-check", "--pins", str(PINS), "--library", str(fake_nccl[PINNED])]) == 0
    assert main(["image", "nccl-check", "--version", "2.28.9", "--library", str(fake_nccl["2.28.9"])]) == 0
    assert main(["image", "nccl-check", "--pins", str(PINS), "--library", str(fake_nccl["2.30.7"])]) == 1


def test_an_older_libnccl_first_on_the_library_path_is_refused_naming_it_and_the_pin(
    fake_nccl: dict[str, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    """`import torch` maps the libnccl.so.2 the loader finds for it. The stand-in torch here needs it
    by name with no RPATH of its own, so LD_LIBRARY_PATH decides (the real wheel's libtorch_cuda.so has
    an RPATH to the venv's nvidia/nccl/lib, searched first; a preloaded library wins over both). An
    older NCCL first on the path is refused, naming the version loaded and the pin; the pinned one
    first passes."""
    torch = tmp_path / "site" / "torch"
    torch.mkdir(parents=True)
    (torch / "__init__.py").write_text('import ctypes\nctypes.CDLL("libnccl.so.2")  # as libtorch_cuda.so\n')
    older, pinned = fake_nccl["2.30.7"].parent, fake_nccl[PINNED].parent

    def start(*path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "epstack", "image", "nccl-check", "--pins", str(PINS), "--loaded"],
            env={**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}:{REPO}",
                 "LD_LIBRARY_PATH": ":".join(map(str, path)), "COLUMNS": "200"},
            capture_output=True, text=True, check=False, cwd=tmp_path,
        )  # fmt: skip

    refused = start(older, pinned)
    assert refused.returncode == 1, refused.stderr
    assert f"NCCL 2.30.7 (loaded {older}/libnccl.so.2), pinned {PINNED}: mismatch" in refused.stdout
    passed = start(pinned, older)
    assert passed.returncode == 0, passed.stderr
    assert f"NCCL {PINNED} (loaded {pinned}/libnccl.so.2), pinned {PINNED}: ok" in passed.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--source", "/nonexistent"],
        ["--library", "/etc/hostname"],
        ["--version", "v2.30.7", "--source", "."],
        [],
    ],
)
def test_bad_input(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["image", "nccl-check", "--pins", str(PINS), *args]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_the_install_script_has_no_version_of_its_own() -> None:
    script = (REPO / "scripts" / "gpu" / "install-nccl.sh").read_text()
    assert "awk" not in script and "ncclGetVersion" not in script
    script_path = str(REPO / "scripts/gpu/install-nccl.sh")
    result = subprocess.run(["bash", script_path], capture_output=True, text=True, check=False)
    assert result.returncode == 2 and "--arch SM is required" in result.stderr


def test_the_install_script_puts_a_ferried_wheel_over_the_hosts_older_nccl(
    fake_nccl: dict[str, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    """A bare host's venv with NCCL 2.28.9 (pip's), and the pinned wheel ferried in: `--wheel` installs
    it over the old one with pip (files and metadata), then checks the library against the pin; a wheel
    of another version fails that check."""
    venv = tmp_path / "host-venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    host = venv / "bin" / "python"
    deps = next(
        Path(sys.prefix, "lib").glob("python3.*/site-packages")
    )  # epstack's own, as /opt/epstack-deps

    def wheel(version: str) -> Path:
        library = fake_nccl[version].read_bytes()
        files = {"nvidia/nccl/lib/libnccl.so.2": library, "nvidia/nccl/include/nccl.h": version.encode()}
        folder = tmp_path / f"wheels-{version}"
        folder.mkdir()
        return write_wheel(folder, "nvidia-nccl-cu13", version, files=files)

    def install(path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(REPO / "scripts/gpu/install-nccl.sh"), "--pins", str(PINS), "--wheel", str(path)],
            env={**os.environ, "PYTHON": str(host), "PYTHONPATH": str(deps), "COLUMNS": "200"},
            capture_output=True, text=True, check=False, cwd=tmp_path,
        )  # fmt: skip

    subprocess.run(
        [host, "-m", "pip", "install", "-q", "--no-index", "--no-deps", wheel("2.28.9")], check=True
    )
    installed = install(wheel(PINNED))
    assert installed.returncode == 0, installed.stdout + installed.stderr
    site = next(venv.glob("lib/python3.*/site-packages"))
    assert (site / "nvidia/nccl/include/nccl.h").read_text() == PINNED
    assert (site / "nvidia_nccl_cu13-2.28.9.dist-info").exists() is False, "pip replaced the old one"
    assert f"NCCL {PINNED} (library {site}/nvidia/nccl/lib/libnccl.so.2), pinned {PINNED}: ok" in (
        installed.stdout + installed.stderr
    )
    other = install(wheel("2.30.7"))
    assert other.returncode == 1 and f"NCCL 2.30.7 (library {site}" in other.stdout + other.stderr
    missing = install(tmp_path / "nowhere.whl")
    assert missing.returncode == 2 and "no such file" in missing.stderr


# ---- each reading on its own --------------------------------------------------------------------


def test_the_version_a_source_tree_declares(tmp_path: Path) -> None:
    assert source_version(nccl_tree(tmp_path / "nested", "2.30.7")) == "2.30.7"
    assert source_version(tmp_path / "nested") == "2.30.7"  # the folder an archive unpacks into
    nccl_tree(tmp_path / "two", "2.28.9")
    nccl_tree(tmp_path / "two" / "b", "2.30.7")
    assert source_version(tmp_path / "two" / "nccl") == "2.28.9"
    assert source_version(tmp_path / "two") == "2.28.9"  # its own tree before a nested one
    only_nested = tmp_path / "three"
    for name, version in (("b", "2.30.7"), ("a", "2.29.1")):
        (only_nested / name / "makefiles").mkdir(parents=True)
        major, minor, patch = version.split(".")
        (only_nested / name / "makefiles" / "version.mk").write_text(
            f"NCCL_MAJOR := {major}\nNCCL_MINOR := {minor}\nNCCL_PATCH := {patch}\n"
        )
    assert source_version(only_nested) == "2.29.1"  # the first in name order


def test_a_folder_that_is_no_nccl_source_tree(tmp_path: Path) -> None:
    with pytest.raises(BadInput) as refused:
        source_version(tmp_path)
    assert str(refused.value) == f"{tmp_path}: no makefiles/version.mk; fix: pass an NCCL source tree"
    version_mk = tmp_path / "makefiles" / "version.mk"
    version_mk.parent.mkdir()
    version_mk.write_text("NCCL_MAJOR := 2\nNCCL_MINOR := 30\n# NCCL_PATCH := 7\nNCCL_PATCH := seven\n")
    with pytest.raises(BadInput) as refused:
        source_version(tmp_path)
    assert str(refused.value) == f"{version_mk}: no NCCL_MAJOR/MINOR/PATCH; fix: pass an NCCL source tree"


def test_a_library_that_is_no_libnccl(tmp_path: Path) -> None:
    not_elf = tmp_path / "libnccl.so.2"
    not_elf.write_text("not a library")
    with pytest.raises(BadInput) as refused:
        library_version(not_elf)
    message = str(refused.value)
    assert message.startswith(f"{not_elf}: not a loadable libnccl (")
    assert message.endswith("); fix: pass the built libnccl.so")


def test_a_library_without_nccl_get_version(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_symbol(library: Path) -> str:
        raise AttributeError("undefined symbol: ncclGetVersion")

    monkeypatch.setattr(nccl, "nccl_version", no_symbol)
    with pytest.raises(
        BadInput, match=r"^libc\.so: not a loadable libnccl \(undefined symbol: ncclGetVersion\)"
    ):
        library_version(Path("libc.so"))


def test_the_loaded_nccl_is_read_after_import_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    imported, compared = [], []

    def import_module(name: str) -> object:
        imported.append(name)
        return object()

    def check(pinned: str, maps_text: str) -> Check:
        compared.append((pinned, maps_text))
        return Check(
            component="NCCL (loaded)",
            expected=pinned,
            found="2.30.7",
            verdict="ok",
            detail="/lib/libnccl.so.2",
        )

    monkeypatch.setattr(importlib, "import_module", import_module)
    monkeypatch.setattr(nccl, "check_nccl_loaded", check)
    assert loaded_version("2.30.7") == ("2.30.7", "/lib/libnccl.so.2")
    assert imported == ["torch"]
    ((pinned, maps_text),) = compared
    assert pinned == "2.30.7" and "[stack]" in maps_text  # this process's own /proc/self/maps


def test_torch_that_does_not_import_is_an_environment_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    def import_module(name: str) -> object:
        raise OSError("libcudart.so.13: cannot open shared object file")

    monkeypatch.setattr(importlib, "import_module", import_module)
    with pytest.raises(EnvironmentProblem) as problem:
        loaded_version("2.30.7")
    assert (
        str(problem.value) == "import torch failed (OSError: libcudart.so.13: cannot open shared object file)"
    )


def test_a_version_mk_that_is_not_text_is_refused_with_what_it_should_be(tmp_path: Path) -> None:
    version_mk = tmp_path / "makefiles" / "version.mk"
    version_mk.parent.mkdir()
    version_mk.write_bytes(b"NCCL_MAJOR := 2\n\xff\n")
    with pytest.raises(BadInput) as refused:
        source_version(tmp_path)
    assert str(refused.value) == (
        f"{version_mk}: not UTF-8 text (byte 16), so not NCCL's version.mk; fix: save it as UTF-8"
    )
