"""Triton's launcher shipped in an image: the folder of libcuda.so.1 as Triton finds it, one build per
folder GPU nodes mount the driver in (each a real process, here one that stands in for Triton and
keys its cache folder by what Triton hashes), the shipped folder and its manifest, and the entrypoint's
copy (scripts/image/jit-caches.sh, run for real). The base image builds the real launchers
(tests/image/test_docker_build.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from epstack.errors import BadInput, EpstackError
from epstack.jit import triton
from epstack.jit.shipped import changed_files, manifest_beside
from epstack.jit.triton import LIBCUDA_DIRS, TRITON_LAUNCHERS, build, libcuda_dirs, ship
from tests.jit import EPSTACK_PATH

JIT_CACHES = Path(__file__).resolve().parents[2] / "scripts" / "image" / "jit-caches.sh"
TOOLKIT = "\tlibcuda.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcuda.so.1\n"  # as ldconfig -p lists it
# Stands in for Triton's launcher build: a cache folder named by the libcuda folder Triton would hash,
# the library's bytes naming what it was linked against (LIBRARY_PATH's libcuda.so.1).
FAKE_TRITON = """
import hashlib, os, pathlib, sys
if os.environ.get("FAIL"):
    sys.exit("gcc: error: Python.h: No such file or directory")
hashed = "" if os.environ.get("SAME_KEY") else os.environ["TRITON_LIBCUDA_PATH"]  # a Triton keying no folder
key = hashlib.sha256(hashed.encode()).hexdigest()[:32]
folder = pathlib.Path(os.environ["TRITON_CACHE_DIR"], key)
folder.mkdir(parents=True)
stub = pathlib.Path(os.environ["LIBRARY_PATH"], "libcuda.so.1").resolve()
library = folder / "cuda_utils.cpython-312-x86_64-linux-gnu.so"
library.write_text(f"linked against {stub}" + os.urandom(4).hex() * bool(os.environ.get("SAME_KEY")))
print('{"compiler": "gcc", "version": "gcc 13.3.0"}')
"""


def test_triton_finds_libcuda_as_ldconfig_lists_it_else_on_ld_library_path(tmp_path: Path) -> None:
    assert libcuda_dirs(TOOLKIT, {}) == ["/lib/x86_64-linux-gnu"]
    two = TOOLKIT + "\tlibcuda.so.1 (libc6,x86-64) => /usr/local/nvidia/lib64/libcuda.so.1\n"
    assert libcuda_dirs(two, {}) == ["/lib/x86_64-linux-gnu", "/usr/local/nvidia/lib64"]
    (tmp_path / "nvidia").mkdir()
    (tmp_path / "nvidia" / "libcuda.so.1").write_text("")
    path = f"{tmp_path}/empty:{tmp_path}/nvidia"
    assert libcuda_dirs("\tlibc.so.6 (libc6,x86-64) => /lib/libc.so.6\n", {"LD_LIBRARY_PATH": path}) == [
        f"{tmp_path}/nvidia"
    ]
    assert libcuda_dirs(TOOLKIT, {"LD_LIBRARY_PATH": path}) == ["/lib/x86_64-linux-gnu"], "ldconfig first"
    assert libcuda_dirs(TOOLKIT, {"TRITON_LIBCUDA_PATH": "/mine"}) == ["/mine"]
    assert libcuda_dirs("", {}) == []


@pytest.fixture
def fake_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triton, "epstack_python", lambda *_: [sys.executable, "-c", FAKE_TRITON])


@pytest.fixture
def stub(tmp_path: Path) -> Path:
    path = tmp_path / "stubs" / "libcuda.so"
    path.parent.mkdir()
    path.write_text("the driver stub")
    return path


def test_one_launcher_per_driver_folder_each_linked_against_the_stub(
    fake_triton: None, stub: Path, tmp_path: Path
) -> None:
    (tmp_path / "work").mkdir()
    launchers = build(tmp_path / "cache", str(stub), tmp_path / "work")
    assert [launcher.libcuda_dir for launcher in launchers] == list(LIBCUDA_DIRS)
    keys = {launcher.file.path.split("/")[0] for launcher in launchers}
    assert len(keys) == len(LIBCUDA_DIRS), "a key per folder"
    for launcher in launchers:
        library = tmp_path / "cache" / launcher.file.path
        assert library.read_text() == f"linked against {stub}"
        assert launcher.file.bytes == library.stat().st_size


def test_folders_that_give_one_key_share_its_launcher(
    fake_triton: None, stub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAME_KEY", "1")
    (tmp_path / "work").mkdir()
    launchers = build(tmp_path / "cache", str(stub), tmp_path / "work")
    assert len({launcher.file.path for launcher in launchers}) == 1 < len(launchers) == len(LIBCUDA_DIRS)
    assert len({launcher.file.sha256 for launcher in launchers}) == 1, "builds differ: the first is kept"
    manifest = ship(tmp_path / "cache", launchers, tmp_path / "shipped")
    assert len(list((tmp_path / "shipped").iterdir())) == 1
    assert changed_files(tmp_path / "shipped", [launcher.file for launcher in manifest.launchers]) == []


def test_a_launcher_that_does_not_build_names_the_folder_and_gccs_error(
    fake_triton: None, stub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIL", "1")
    (tmp_path / "work").mkdir()
    with pytest.raises(EpstackError, match=r"libcuda.so.1 in /lib/x86_64-linux-gnu .*Python.h"):
        build(tmp_path / "cache", str(stub), tmp_path / "work")


def ship_launchers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The launchers built (by the stand-in for Triton) and shipped as an image's base layer does."""
    monkeypatch.setattr(triton, "epstack_python", lambda *_: [sys.executable, "-c", FAKE_TRITON])
    (tmp_path / "work").mkdir()
    (tmp_path / "libcuda.so").write_text("the driver stub")
    launchers = build(tmp_path / "cache", str(tmp_path / "libcuda.so"), tmp_path / "work")
    into = tmp_path / "opt" / "jit" / "triton"
    ship(tmp_path / "cache", launchers, into)
    return into


@pytest.fixture
def shipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return ship_launchers(tmp_path, monkeypatch)


def test_ship_keeps_each_launcher_readable_by_all_with_its_manifest(shipped: Path, tmp_path: Path) -> None:
    manifest = TRITON_LAUNCHERS.read(manifest_beside(shipped))
    assert [launcher.libcuda_dir for launcher in manifest.launchers] == list(LIBCUDA_DIRS)
    for launcher in manifest.launchers:
        library = shipped / launcher.file.path
        assert library.stat().st_mode & 0o777 == 0o755 and library.parent.stat().st_mode & 0o777 == 0o755
    with pytest.raises(BadInput, match="already holds Triton launchers"):
        ship(tmp_path / "cache", list(manifest.launchers), shipped)


def start(home: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = f'. "{JIT_CACHES}"; echo "TRITON_CACHE_DIR=$TRITON_CACHE_DIR"'
    environment = {
        **os.environ,
        "PATH": EPSTACK_PATH,
        "EPSTACK_HOME": str(home),
        "HOME": str(home / "home"),
        **env,
    }
    return subprocess.run(["bash", "-c", script], env=environment, capture_output=True, text=True, check=True)


def test_the_entrypoint_copies_every_launcher_into_the_cache_keeping_one_there(
    shipped: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "var" / "triton"
    keys = sorted(path.name for path in shipped.iterdir())
    (cache / keys[0]).mkdir(parents=True)
    start(tmp_path / "opt", {"TRITON_CACHE_DIR": str(cache)})
    assert sorted(path.name for path in cache.iterdir()) == keys, "no staging folder left"
    assert list((cache / keys[0]).iterdir()) == [], "one already there is kept"
    copied = next((cache / keys[1]).iterdir())
    assert copied.read_bytes() == (shipped / keys[1] / copied.name).read_bytes()
    assert (cache / keys[1]).stat().st_mode & 0o777 == 0o755


def test_a_cache_that_cannot_be_made_moves_to_tmpdir_with_the_launchers(
    shipped: Path, tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("")
    result = start(
        tmp_path / "opt", {"TRITON_CACHE_DIR": str(tmp_path / "file" / "triton"), "TMPDIR": str(tmp_path)}
    )
    assert f"TRITON_CACHE_DIR={tmp_path}/epstack/triton" in result.stdout
    assert "cannot be written" in result.stderr
    assert len(list((tmp_path / "epstack" / "triton").iterdir())) == len(LIBCUDA_DIRS)


def test_tritons_cache_is_its_variable_else_home() -> None:
    assert triton.cache_dir({"TRITON_CACHE_DIR": "/c", "HOME": "/h"}) == Path("/c")
    assert triton.cache_dir({"HOME": "/h"}) == Path("/h/.triton/cache")
