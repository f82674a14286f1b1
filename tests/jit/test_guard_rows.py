"""The guard's rows for the JIT caches an image ships (DeepEP's kernels, FlashInfer's modules): skipped
when none are, ok when intact and made for this install, a mismatch naming the file or the key field
that is not; FlashInfer's warns where it would compile again (another workspace, ninja not idle). The
install is a real one made in this Python (a deep_ep package and dist-info, its manifest, an NCCL
root, an nvcc); FlashInfer's module is built by real ninja (tests/jit/test_flashinfer.py)."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from epstack.checkrow import Check
from epstack.jit import deepep, flashinfer, triton
from epstack.jit.deepep import FIX_EXPORT, TOOL, CacheKey, install, unpack
from epstack.jit.probereport import JitReport, Probe, report_path
from tests.jit.test_deepep import KEY, export_of, fake_install, h200_kernels, sha256
from tests.jit.test_flashinfer import MODULE, VERSION, compile_module
from tests.jit.test_flashinfer import key as modules_key
from tests.jit.test_triton import ship_launchers


def ship(folder: Path, key: CacheKey) -> dict[str, bytes]:
    """The H200-shaped kernels, exported with `key` and unpacked into `folder` as the layer does."""
    data, _ = export_of(h200_kernels(), key)
    manifest, files = unpack(Path("kernels.tar.gz"), data, sha256(data))
    install(manifest, files, folder)
    return files


def row(folder: Path, archs: list[str]) -> Check:
    (only,) = deepep.guard_rows(os.environ, archs, folder)
    return only


@pytest.fixture
def shipped(tmp_path: Path) -> Path:
    return tmp_path / "jit" / TOOL


def test_none_shipped_is_skipped_with_the_way_to_ship_them(shipped: Path) -> None:
    found = row(shipped, ["9.0a"])
    assert (found.verdict, found.found) == ("skipped", "none shipped")
    assert "--export-jit-cache" in found.fix and "epstack jit layer" in found.fix and not found.failed
    assert (
        found.fix
        == FIX_EXPORT
        == (
            "on a GPU, `epstack smoke elastic --export-jit-cache FILE` in this image, then "
            "`epstack jit layer --image IMAGE --export FILE`"
        )
    )
    assert (found.component, found.expected) == ("JIT cache DeepEP", "DeepEP kernels for 9.0a")
    assert found.detail == "each kernel compiles at first use (3.6-6.1 s on an H200)"
    assert row(shipped, ["9.0a", "10.0a"]).expected == "DeepEP kernels for 9.0a 10.0a"
    assert row(shipped, []).expected == "DeepEP kernels for the image", "a pins.env names no archs"


def test_intact_kernels_made_for_this_install_are_ok_with_their_count_and_bytes(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shipped: Path
) -> None:
    files = ship(shipped, fake_install(site, tmp_path, monkeypatch))
    found = row(shipped, ["9.0a"])
    assert found.verdict == "ok", found.detail
    total = sum(len(data) for data in files.values())
    assert found.found == f"13 kernels, 26 files, {total:,} bytes; sm 9.0 (NVIDIA H200, 132 SMs), nvcc 13.0"
    assert found.detail == str(shipped)
    assert (found.component, found.expected, found.fix) == ("JIT cache DeepEP", "DeepEP kernels for 9.0a", "")


@pytest.mark.parametrize("damage", ["changed", "missing"])
def test_a_changed_or_missing_kernel_file_is_a_mismatch_naming_it(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shipped: Path, damage: str
) -> None:
    files = ship(shipped, fake_install(site, tmp_path, monkeypatch))
    victim = sorted(files)[7]
    if damage == "missing":
        (shipped / victim).unlink()
    else:
        (shipped / victim).write_bytes(files[victim][:-1] + b"\0")
    found = row(shipped, ["9.0a"])
    assert found.verdict == "mismatch" and found.failed
    assert found.detail == f"1 missing or changed, e.g. {victim}"
    assert found.fix == f"rebuild the layer; {FIX_EXPORT}"
    assert (found.component, found.expected) == (
        "JIT cache DeepEP",
        f"DeepEP kernels for 9.0a, as {TOOL}.json lists them",
    )
    assert found.found.startswith("13 kernels, 26 files, ")


def test_every_damaged_file_is_counted_and_the_first_named(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shipped: Path
) -> None:
    files = ship(shipped, fake_install(site, tmp_path, monkeypatch))
    victims = sorted(files)[3:6]
    for victim in victims:
        (shipped / victim).unlink()
    assert row(shipped, ["9.0a"]).detail == f"3 missing or changed, e.g. {victims[0]}"


@pytest.mark.parametrize("made_for", ["nvcc", "commit", "library root", "arch"])
def test_kernels_made_for_another_install_are_a_mismatch_naming_the_difference(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shipped: Path, made_for: str
) -> None:
    here = fake_install(site, tmp_path, monkeypatch, nvcc="12.9" if made_for == "nvcc" else KEY.nvcc)
    exported = {
        "nvcc": here,
        "commit": replace(here, deep_ep_commit="e" * 40),
        "library root": replace(here, library_root=KEY.library_root),
        "arch": here,
    }[made_for]
    ship(shipped, exported)
    found = row(shipped, ["10.0a"] if made_for == "arch" else ["9.0a"])
    difference = {
        "nvcc": "nvcc 13.0 != 12.9",
        "commit": f"deep_ep_commit {'e' * 40} != {KEY.deep_ep_commit}",
        "library root": f"library_root {KEY.library_root} != {here.library_root}",
        "arch": "arch 9.0 not in 10.0a",
    }[made_for]
    assert found.verdict == "mismatch"
    assert found.detail == (
        f"made for another install ({difference}): DeepEP would compile every kernel again, never load these"
    )
    assert found.fix == FIX_EXPORT
    assert (found.component, found.expected) == (
        "JIT cache DeepEP",
        f"DeepEP kernels for {'10.0a' if made_for == 'arch' else '9.0a'}, made in this image",
    )
    assert found.found.startswith("13 kernels, 26 files, ")


def test_every_difference_from_this_install_is_named(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shipped: Path
) -> None:
    here = fake_install(site, tmp_path, monkeypatch)
    ship(shipped, replace(here, deep_ep_commit="e" * 40))
    found = row(shipped, ["10.0a"])
    assert found.detail == (
        "made for another install (arch 9.0 not in 10.0a; "
        f"deep_ep_commit {'e' * 40} != {KEY.deep_ep_commit}): "
        "DeepEP would compile every kernel again, never load these"
    )


# ---- FlashInfer's modules ---------------------------------------------------------------------------


@pytest.fixture
def shipped_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(workspace, shipped folder) of a real ninja-built module, FlashInfer installed at its version,
    the image's reports folder without a probe report (the key's nvcc stands)."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    base = tmp_path / "var" / "flashinfer"
    compile_module(base, tmp_path / "venv" / "csrc")
    into = tmp_path / "opt" / "jit" / "flashinfer"
    flashinfer.ship(base, modules_key(base), into)
    monkeypatch.setattr(flashinfer, "installed_version", lambda: VERSION)
    monkeypatch.setenv("EPSTACK_REPORTS", str(tmp_path / "reports"))
    return base, into


def flashinfer_row(base: Path, into: Path, archs: tuple[str, ...] = ("9.0a",), **kwargs: bool) -> Check:
    (only,) = flashinfer.guard_rows({"FLASHINFER_WORKSPACE_BASE": str(base)}, archs, into, **kwargs)
    return only


def test_no_flashinfer_modules_shipped_is_skipped_with_the_way_to_ship_them(tmp_path: Path) -> None:
    found = flashinfer_row(tmp_path, tmp_path / "jit" / "flashinfer")
    assert (found.component, found.found, found.verdict) == (flashinfer.COMPONENT, "none shipped", "skipped")
    assert found.expected == "FlashInfer modules for 9.0a" and "jit probe --ship" in found.fix


def test_shipped_modules_are_ok_before_the_copy_and_after_it_with_ninja_idle(
    shipped_module: tuple[Path, Path],
) -> None:
    base, into = shipped_module
    found = flashinfer_row(base, into)
    assert found.verdict == "ok", found.detail
    assert found.found.startswith("sampling: 6 files, ") and found.found.endswith(
        f"flashinfer {VERSION}, 9.0a, nvcc 13.0.88"
    )
    assert found.detail == f"{into}; the entrypoint copies them into {base} at start"
    shutil.copytree(into / ".cache", base / ".cache")
    after = flashinfer_row(base, into)
    assert (after.verdict, after.detail) == ("ok", f"in {base}: ninja has nothing to build")


def test_a_copy_ninja_would_build_again_warns_with_its_first_step(shipped_module: tuple[Path, Path]) -> None:
    base, into = shipped_module
    shutil.copytree(into / ".cache", base / ".cache")
    (base / MODULE / "sampling.cuda.o").unlink()
    found = flashinfer_row(base, into)
    assert found.verdict == "warn" and not found.failed
    assert found.detail.startswith(f"in {base}, ninja would build 1 again, e.g. {MODULE}: [1/2] cat ")
    assert "entrypoint" in found.fix


def test_another_workspace_warns_that_they_compile_again(
    shipped_module: tuple[Path, Path], tmp_path: Path
) -> None:
    base, into = shipped_module
    found = flashinfer_row(tmp_path / "tmp" / "flashinfer", into)
    assert found.verdict == "warn" and not found.failed, "a read-only root starts, compiling"
    assert f"they were built in {base}" in found.detail and "absolute path" in found.detail
    assert found.fix.startswith(f"FLASHINFER_WORKSPACE_BASE={base}, writable")


def test_a_shipped_norm_module_warns_where_flashinfer_would_compile_cute_dsl_kernels_instead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    base, into = tmp_path / "var" / "flashinfer", tmp_path / "opt" / "jit" / "flashinfer"
    compile_module(base, tmp_path / "venv" / "csrc", name="norm")
    flashinfer.ship(base, modules_key(base), into)
    monkeypatch.setattr(flashinfer, "installed_version", lambda: VERSION)
    monkeypatch.setenv("EPSTACK_REPORTS", str(tmp_path / "reports"))
    env = {"FLASHINFER_WORKSPACE_BASE": str(base)}
    assert flashinfer.guard_rows(env, ("9.0a",), into)[0].verdict == "ok", "no CuTe DSL: the module serves"
    (tmp_path / "site" / "cutlass").mkdir(parents=True)
    (tmp_path / "site" / "cutlass" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    (found,) = flashinfer.guard_rows(env, ("9.0a",), into)
    assert (found.verdict, found.fix) == ("warn", "FLASHINFER_USE_CUDA_NORM=1 (the image sets it)")
    assert found.detail.startswith("FLASHINFER_USE_CUDA_NORM is not 1: FlashInfer's rmsnorm takes its CuTe")
    (chosen,) = flashinfer.guard_rows(env | {"FLASHINFER_USE_CUDA_NORM": "1"}, ("9.0a",), into)
    assert chosen.verdict == "ok"


def test_a_changed_module_file_is_a_mismatch_unless_the_start_trusts_the_build(
    shipped_module: tuple[Path, Path],
) -> None:
    base, into = shipped_module
    (into / MODULE / "sampling.so").write_bytes(b"another library")
    found = flashinfer_row(base, into)
    assert found.verdict == "mismatch" and found.fix
    assert found.detail == f"1 files missing or changed since flashinfer.json, e.g. {MODULE}/sampling.so"
    assert flashinfer_row(base, into, verify_bytes=False).verdict == "ok", "the record vouches for them"


@pytest.mark.parametrize("made_for", ["flashinfer", "archs", "nvcc"])
def test_modules_made_for_another_install_are_a_mismatch_naming_the_difference(
    shipped_module: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, made_for: str
) -> None:
    base, into = shipped_module
    archs: tuple[str, ...] = ("9.0a",)
    if made_for == "flashinfer":
        monkeypatch.setattr(flashinfer, "installed_version", lambda: "0.7.3")
        named = f"flashinfer {VERSION} != 0.7.3"
    elif made_for == "archs":
        archs, named = ("10.0a",), "archs 9.0a != 10.0a"
    else:
        probe = Probe(
            toolchain="flashinfer",
            title="FlashInfer",
            module="sampling",
            verdict="ok",
            compiler_version="nvcc 13.1.80",
        )
        (tmp_path / "reports").mkdir()
        report_path("sglang").write_text(
            JitReport(layer="sglang", archs=("9.0a",), probes=(probe,)).to_json()
        )
        named = "nvcc nvcc 13.0.88 != nvcc 13.1.80"
    found = flashinfer_row(base, into, archs)
    assert found.verdict == "mismatch"
    assert found.detail == (
        f"made for another install ({named}): FlashInfer would compile them again, never load these"
    )


# ---- Triton's launcher ------------------------------------------------------------------------------


@pytest.fixture
def launchers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Launchers shipped for LIBCUDA_DIRS by triton 3.8.0, this node's driver not named yet."""
    monkeypatch.setattr(triton, "installed_version", lambda: "3.8.0")
    return ship_launchers(tmp_path, monkeypatch)


def triton_row(folder: Path, env: dict[str, str], **kwargs: bool) -> Check:
    (only,) = triton.guard_rows(env, (), folder, **kwargs)
    return only


def node(cache: Path, libcuda_dir: str) -> dict[str, str]:
    """A GPU node's environment: Triton's cache, and the driver's folder as Triton finds it."""
    return {"TRITON_CACHE_DIR": str(cache), "TRITON_LIBCUDA_PATH": libcuda_dir}


def test_no_launcher_shipped_is_skipped_naming_what_a_first_launch_costs(tmp_path: Path) -> None:
    found = triton_row(tmp_path / "jit" / "triton", {})
    assert (found.component, found.found, found.verdict) == (triton.COMPONENT, "none shipped", "skipped")
    assert "0.7-0.9 s" in found.detail and "jit probe --ship" in found.fix


def test_without_a_driver_the_launchers_are_ok_and_the_node_checked_at_its_start(launchers: Path) -> None:
    found = triton_row(launchers, {"EPSTACK_CUDA_STUB": "/usr/local/cuda/lib64/stubs/libcuda.so"})
    assert found.verdict == "ok"
    assert found.found == "triton 3.8.0: /lib/x86_64-linux-gnu, /usr/local/nvidia/lib64"
    assert found.detail == "no driver mounted here: a GPU node's is checked at its start"


def test_a_node_whose_driver_folder_has_a_launcher_copied_in_is_ok(launchers: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache-now"
    shutil.copytree(launchers, cache)
    found = triton_row(launchers, node(cache, "/usr/local/nvidia/lib64"))
    assert (found.verdict, found.detail) == ("ok", f"the one for /usr/local/nvidia/lib64 in {cache}")
    missing = triton_row(launchers, node(tmp_path / "empty", "/lib/x86_64-linux-gnu"))
    assert missing.verdict == "warn" and missing.detail.startswith(
        "the one for /lib/x86_64-linux-gnu is not in"
    )


def test_a_node_whose_driver_is_elsewhere_warns_that_a_first_launch_builds_it(
    launchers: Path, tmp_path: Path
) -> None:
    found = triton_row(launchers, node(tmp_path, "/usr/lib64"))
    assert found.verdict == "warn" and not found.failed
    assert (
        found.detail
        == "libcuda.so.1 in /usr/lib64 here: a process's first kernel launch builds its launcher (0.7-0.9 s)"
    )


def test_a_changed_launcher_or_another_triton_is_a_mismatch(
    launchers: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    library = next(launchers.glob("*/cuda_utils*"))
    library.write_text("another")
    found = triton_row(launchers, {"EPSTACK_CUDA_STUB": "stub"})
    assert found.verdict == "mismatch" and found.detail.endswith(f"{library.name} missing or changed")
    assert triton_row(launchers, {"EPSTACK_CUDA_STUB": "stub"}, verify_bytes=False).verdict == "ok"
    monkeypatch.setattr(triton, "installed_version", lambda: "3.9.0")
    other = triton_row(launchers, {"EPSTACK_CUDA_STUB": "stub"}, verify_bytes=False)
    assert (other.verdict, other.detail) == (
        "mismatch",
        "built for triton 3.8.0, here 3.9.0: a first launch builds another",
    )
