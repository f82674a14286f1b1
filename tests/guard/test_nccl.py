"""`epstack nccl check`: the version checks scripts/gpu/install-nccl.sh used to do in awk and an
inline Python, in epstack, against the pins' NCCL_VERSION."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from epstack.cli import main
from tests.conftest import PINS, REPO
from tests.guard.test_guard import fake_nccl  # noqa: F401 (fixture: gcc-built libnccl 2.28.9 and 2.30.7)


def nccl_tree(root: Path, version: str) -> Path:
    major, minor, patch = version.split(".")
    (root / "nccl" / "makefiles").mkdir(parents=True)
    (root / "nccl" / "makefiles" / "version.mk").write_text(
        f"##### version\nNCCL_MAJOR   := {major}\nNCCL_MINOR   := {minor}\n"
        f"NCCL_PATCH   := {patch}\nNCCL_SUFFIX  :=\n"
    )
    return root / "nccl"


def test_a_source_tree_of_the_pinned_version(tmp_path: Path) -> None:
    assert main(["nccl", "check", "--pins", str(PINS), "--source", str(nccl_tree(tmp_path, "2.30.7"))]) == 0


def test_a_source_tree_of_another_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nccl", "check", "--pins", str(PINS), "--source", str(nccl_tree(tmp_path, "2.28.9"))]) == 1
    assert "NCCL 2.28.9" in capsys.readouterr().err


def test_built_libraries(fake_nccl: dict[str, Path]) -> None:  # noqa: F811
    assert main(["nccl", "check", "--pins", str(PINS), "--library", str(fake_nccl["2.30.7"])]) == 0
    assert main(["nccl", "check", "--version", "2.28.9", "--library", str(fake_nccl["2.28.9"])]) == 0
    assert main(["nccl", "check", "--pins", str(PINS), "--library", str(fake_nccl["2.28.9"])]) == 1


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
    assert main(["nccl", "check", "--pins", str(PINS), *args]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_the_install_script_has_no_version_of_its_own() -> None:
    script = (REPO / "scripts" / "gpu" / "install-nccl.sh").read_text()
    assert "awk" not in script and "ncclGetVersion" not in script
    script_path = str(REPO / "scripts/gpu/install-nccl.sh")
    result = subprocess.run(["bash", script_path], capture_output=True, text=True, check=False)
    assert result.returncode == 2 and "--arch SM is required" in result.stderr
