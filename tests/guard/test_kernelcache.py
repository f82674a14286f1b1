"""The guard's row for the DeepEP kernels an image ships: skipped when none are, ok when intact and made
for this install, a mismatch naming the file or the key field that is not. The install is a real one
made in this Python (a deep_ep package and dist-info, its manifest, an NCCL root, an nvcc)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from epstack.checkrow import Check
from epstack.guard.kernelcache import FIX_EXPORT, kernel_cache_rows
from epstack.jitcache import TOOL, CacheKey, install, unpack
from tests.test_jitcache import KEY, export_of, fake_install, h200_kernels, sha256


def ship(folder: Path, key: CacheKey) -> dict[str, bytes]:
    """The H200-shaped kernels, exported with `key` and unpacked into `folder` as the layer does."""
    data, _ = export_of(h200_kernels(), key)
    manifest, files = unpack(Path("kernels.tar.gz"), data, sha256(data))
    install(manifest, files, folder)
    return files


def row(folder: Path, archs: list[str]) -> Check:
    (only,) = kernel_cache_rows(os.environ, archs, folder)
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
