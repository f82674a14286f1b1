"""epstack image deepep-build's parts: the source (archives or a clone, checked), the build environment, the
extension check. The compile itself runs in the image build (tests/image/test_docker_build.py) and on the GPU
host (benchmarks/elastic/run_h200.sh)."""

from __future__ import annotations

import hashlib
import subprocess
import zipfile
from pathlib import Path

import pytest

from epstack.errors import BadInput, CommandFailed, EnvironmentProblem
from epstack.image.deepep import _check_extension, apply_patches, build_environment, fetch_source
from epstack.pins.deepepsources import Patch
from tests.conftest import REPO
from tests.image.test_sources import archive, commit, git, repository

FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture
def repos(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """DeepEP with fmt as a real submodule at third-party/fmt, as upstream has it: the pins for it."""
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")  # local submodules need the file protocol
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.file.allow")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "always")
    fmt, (fmt_sha,) = repository(tmp_path / "repos/fmt", "fmt v1")
    (fmt / "format.h").write_text("// fmt\n")
    fmt_sha = commit(fmt, "format.h", "// fmt v2\n")
    deepep, _ = repository(tmp_path / "repos/DeepEP", "deepep")
    git("-C", deepep, "submodule", "add", "-q", fmt, "third-party/fmt")
    deepep_sha = commit(deepep, "setup.py", "deepep with fmt")
    return {"DEEPEP_REPO": str(deepep), "DEEPEP_REF": deepep_sha, "DEEPEP_FMT_REF": fmt_sha,
            "GDRCOPY_REF": "0" * 40}  # fmt: skip


def test_a_clone_is_the_pinned_commit_with_its_fmt(repos: dict[str, str], tmp_path: Path) -> None:
    tree, origin = fetch_source(None, repos, tmp_path / "work")
    assert origin == f"git {repos['DEEPEP_REPO']}"
    assert git("-C", tree, "rev-parse", "HEAD") == repos["DEEPEP_REF"]
    assert (tree / "third-party/fmt/format.h").read_text() == "// fmt v2\n"


def test_a_fmt_pin_that_is_not_deepeps_submodule_is_refused(repos: dict[str, str], tmp_path: Path) -> None:
    gitlink = repos["DEEPEP_FMT_REF"]
    with pytest.raises(BadInput, match=f"fix: set DEEPEP_FMT_REF={gitlink}"):
        fetch_source(None, {**repos, "DEEPEP_FMT_REF": "9" * 40}, tmp_path / "work")


def test_archives_are_checked_then_unpacked_with_fmt_in_place(repos: dict[str, str], tmp_path: Path) -> None:
    sources = tmp_path / "sources"
    sources.mkdir()
    archive(Path(repos["DEEPEP_REPO"]), repos["DEEPEP_REF"], sources / f"DeepEP-{repos['DEEPEP_REF']}.tar.gz")
    fmt = Path(repos["DEEPEP_REPO"]).parent / "fmt"
    archive(fmt, repos["DEEPEP_FMT_REF"], sources / f"fmt-{repos['DEEPEP_FMT_REF']}.tar.gz")
    tree, origin = fetch_source(sources, repos, tmp_path / "work")
    assert origin == f"archive DeepEP-{repos['DEEPEP_REF']}.tar.gz"
    assert (tree / "setup.py").read_text() == "deepep with fmt"
    assert (tree / "third-party/fmt/format.h").read_text() == "// fmt v2\n"
    # An fmt archive of another commit, under the pinned name: refused before anything is unpacked.
    old_fmt = git("-C", fmt, "rev-parse", "HEAD~1")
    archive(fmt, old_fmt, sources / f"fmt-{repos['DEEPEP_FMT_REF']}.tar.gz")
    with pytest.raises(BadInput, match=f"holds commit {old_fmt}, DEEPEP_FMT_REF"):
        fetch_source(sources, repos, tmp_path / "again")
    assert not (tmp_path / "again").exists()


def test_the_build_environment_is_one_toolchain_and_the_pinned_nccl_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CUDAHOSTCXX", "/opt/gcc/bin/g++")
    monkeypatch.setenv("CXX", "/opt/gcc/bin/g++")
    monkeypatch.setenv("LIBRARY_PATH", "/usr/local/cuda/lib64/stubs")
    env = build_environment(tmp_path / "nccl", tmp_path / "nvshmem", "9.0a")
    assert "CUDAHOSTCXX" not in env and (env["CC"], env["CXX"]) == ("/usr/bin/gcc", "/usr/bin/g++")
    assert env["LIBRARY_PATH"] == f"{tmp_path}/nccl/lib:/usr/local/cuda/lib64/stubs"
    assert (env["EP_NCCL_ROOT_DIR"], env["TORCH_CUDA_ARCH_LIST"]) == (f"{tmp_path}/nccl", "9.0a")


def wheel_with(extension: Path, wheel: Path) -> Path:
    with zipfile.ZipFile(wheel, "w") as archive_file:
        archive_file.write(extension, "deep_ep/_C.cpython-312-x86_64-linux-gnu.so")
    return wheel


def test_an_extension_exporting_libstdcxx_fails_the_build(tmp_path: Path) -> None:
    source = FIXTURES / "guard" / "uses_locale.cpp"
    for name, flags in (("clean", []), ("interposing", ["-static-libstdc++"])):
        subprocess.run(["g++", "-shared", "-fPIC", *flags, "-o", tmp_path / f"{name}.so", source], check=True)
    _check_extension(wheel_with(tmp_path / "clean.so", tmp_path / "clean.whl"), tmp_path / "a")
    with pytest.raises(CommandFailed, match=r"exports \d+ libstdc\+\+ symbols \(e\.g\. \S*codecvt"):
        _check_extension(wheel_with(tmp_path / "interposing.so", tmp_path / "bad.whl"), tmp_path / "b")


def patch_of(repo: Path, content: str, sources: Path, name: str) -> Patch:
    """A real `git diff` of setup.py to `content`, saved in the sources folder, pinned by its sha256."""
    original = (repo / "setup.py").read_text()
    (repo / "setup.py").write_text(content)
    diff = git("-C", repo, "diff") + "\n"
    (repo / "setup.py").write_text(original)
    (sources / name).write_text(diff)
    return Patch(url=f"https://example.invalid/{name}", sha256=hashlib.sha256(diff.encode()).hexdigest())


def test_pinned_patches_are_checked_then_applied_in_order(repos: dict[str, str], tmp_path: Path) -> None:
    sources = tmp_path / "sources"
    sources.mkdir()
    deepep = Path(repos["DEEPEP_REPO"])
    first = patch_of(deepep, "deepep with fmt, patched", sources, "one.patch")
    tree, _ = fetch_source(None, repos, tmp_path / "work")
    apply_patches(tree, (first,), sources, tmp_path)
    assert (tree / "setup.py").read_text() == "deepep with fmt, patched"
    # applied twice: the second no longer applies, and says so before touching the tree
    with pytest.raises(BadInput, match=r"one\.patch does not apply to this DeepEP"):
        apply_patches(tree, (first,), sources, tmp_path)
    assert (tree / "setup.py").read_text() == "deepep with fmt, patched"


def test_a_patch_with_other_bytes_or_out_of_reach_is_refused(repos: dict[str, str], tmp_path: Path) -> None:
    sources = tmp_path / "sources"
    sources.mkdir()
    patch = patch_of(Path(repos["DEEPEP_REPO"]), "changed", sources, "one.patch")
    tree, _ = fetch_source(None, repos, tmp_path / "work")
    (sources / "one.patch").write_text((sources / "one.patch").read_text() + "\n")
    with pytest.raises(BadInput, match=f"sha256 .*, its pin is {patch.sha256}"):
        apply_patches(tree, (patch,), sources, tmp_path)
    with pytest.raises(EnvironmentProblem, match=r"fix: put one\.patch in the sources folder"):
        apply_patches(tree, (patch,), tmp_path / "empty", tmp_path)
