"""`epstack image jit-install` (epstack.jit.install): the shipped caches into the writable ones at start, each
toolchain's specifics from its HOME, and the `export` lines scripts/image/jit-caches.sh evaluates."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from epstack.commands.main import main
from epstack.errors import ENVIRONMENT, OK
from epstack.jit import deepep, flashinfer
from epstack.jit.install import CacheHome, install
from epstack.jit.registry import INSTALLED
from epstack.jit.shipped import cache_file, sums_beside, sums_text

TOOL = CacheHome(
    variable="TOOL_CACHE_DIR",
    default=lambda env: Path(env["TOOL_CACHE_DIR"]),
    name="tool",
    entries=("cache/*",),
    what="its kernels go to",
)
FILES = {"cache/a/kernel.cubin": b"\x7fELF a", "cache/a/meta": b"{}", "cache/b/kernel.cubin": b"\x7fELF b"}
OLD = 1_700_000_000  # a shipped file's mtime, kept by the copy


def ship(home: Path, name: str, files: dict[str, bytes]) -> Path:
    """A shipped cache as epstack.jit.shipped lays it out: $EPSTACK_HOME/jit/<name>, its sums beside."""
    shipped = home / "jit" / name
    for relative, data in files.items():
        (shipped / relative).parent.mkdir(parents=True, exist_ok=True)
        (shipped / relative).write_bytes(data)
        os.utime(shipped / relative, (OLD, OLD))
    sums_beside(shipped).write_text(sums_text(cache_file(r, d) for r, d in files.items()))
    return shipped


def unwritable(tmp_path: Path, name: str) -> Path:
    """A folder no user can make, root included (under a file), as on a read-only root."""
    (tmp_path / "file").touch()
    return tmp_path / "file" / name


def run(homes: tuple[CacheHome, ...], env: dict[str, str]) -> tuple[dict[str, str] | None, list[str]]:
    said: list[str] = []
    return install(homes, env, said.append), said


def test_the_listed_files_are_copied_whole_with_their_timestamps_readable_by_every_user(
    tmp_path: Path,
) -> None:
    previous = os.umask(0o077)  # a umask that hides what it makes from other users
    try:
        shipped = ship(tmp_path / "opt", "tool", FILES)
        (shipped / "cache" / "unlisted").mkdir()
        cache = tmp_path / "var" / "tool"
        env = {"EPSTACK_HOME": str(tmp_path / "opt"), "TOOL_CACHE_DIR": str(cache)}
        assert run((TOOL,), env) == ({}, [])
    finally:
        os.umask(previous)
    assert sorted(p.name for p in cache.iterdir()) == ["cache"], "no staging folder left"
    assert sorted(p.name for p in (cache / "cache").iterdir()) == ["a", "b"]
    kernel = cache / "cache" / "a" / "kernel.cubin"
    assert kernel.read_bytes() == FILES["cache/a/kernel.cubin"] and kernel.stat().st_mtime == OLD
    assert kernel.stat().st_mode & 0o777 == 0o644 and kernel.parent.stat().st_mode & 0o777 == 0o755


def test_an_entry_already_there_is_kept(tmp_path: Path) -> None:
    ship(tmp_path / "opt", "tool", FILES)
    cache = tmp_path / "var" / "tool"
    (cache / "cache" / "a").mkdir(parents=True)
    run((TOOL,), {"EPSTACK_HOME": str(tmp_path / "opt"), "TOOL_CACHE_DIR": str(cache)})
    assert list((cache / "cache" / "a").iterdir()) == []
    assert (cache / "cache" / "b" / "kernel.cubin").is_file()


@pytest.mark.parametrize(
    "damage",
    [
        "a changed byte",
        "a listed file gone",
        "no sums list",
        "an empty sums list",
        "a path out of the folder",
    ],
)
def test_a_shipped_cache_that_differs_from_its_list_is_not_copied_and_said(
    tmp_path: Path, damage: str
) -> None:
    shipped = ship(tmp_path / "opt", "tool", FILES)
    sums = sums_beside(shipped)
    if damage == "a changed byte":
        (shipped / "cache" / "b" / "kernel.cubin").write_bytes(b"\x7fELF c")
    elif damage == "a listed file gone":
        (shipped / "cache" / "b" / "kernel.cubin").unlink()
    elif damage == "no sums list":
        sums.unlink()
    elif damage == "an empty sums list":
        sums.write_text("")
    else:
        sums.write_text(sums.read_text().replace("./cache/a/meta", "../tool/cache/a/meta"))
    cache = tmp_path / "var" / "tool"
    moved, said = run((TOOL,), {"EPSTACK_HOME": str(tmp_path / "opt"), "TOOL_CACHE_DIR": str(cache)})
    assert moved == {} and list(cache.iterdir()) == []
    assert said == [
        f"epstack: {shipped} differs from its sha256 list {sums}, so it is not copied into {cache}; "
        "the guard names the change"
    ]


def test_without_a_shipped_folder_nothing_is_made(tmp_path: Path) -> None:
    cache = tmp_path / "var" / "tool"
    assert run((TOOL,), {"EPSTACK_HOME": str(tmp_path / "opt"), "TOOL_CACHE_DIR": str(cache)}) == ({}, [])
    assert not cache.exists()


def test_deepeps_cache_moves_to_tmpdir_without_shipped_kernels(tmp_path: Path) -> None:
    """DeepEP compiles into its cache (and its tmp/) whether or not the image ships kernels."""
    named, tmpdir = unwritable(tmp_path, "deep_ep"), tmp_path / "tmp"
    env = {"EPSTACK_HOME": str(tmp_path / "opt"), "EP_JIT_CACHE_DIR": str(named), "TMPDIR": str(tmpdir)}
    moved, said = run((deepep.HOME,), env)
    assert moved == {"EP_JIT_CACHE_DIR": str(tmpdir / "epstack" / "deep_ep")}
    assert (tmpdir / "epstack" / "deep_ep").is_dir()
    assert said == [
        f"epstack: EP_JIT_CACHE_DIR={named} cannot be written (a read-only root?); DeepEP's kernels "
        f"compile into {tmpdir}/epstack/deep_ep"
    ]


def test_a_moved_flashinfer_workspace_gets_no_copy(tmp_path: Path) -> None:
    """Its objects are named by absolute path: moved, its modules compile there at first use."""
    ship(tmp_path / "opt", flashinfer.HOME.name, {".cache/flashinfer/0.6/90a/cached_ops/norm/norm.so": b"so"})
    named, tmpdir = unwritable(tmp_path, "workspace"), tmp_path / "tmp"
    env = {
        "EPSTACK_HOME": str(tmp_path / "opt"),
        "FLASHINFER_WORKSPACE_BASE": str(named),
        "TMPDIR": str(tmpdir),
    }
    moved, _ = run((flashinfer.HOME,), env)
    assert moved == {"FLASHINFER_WORKSPACE_BASE": str(tmpdir / "epstack" / "flashinfer")}
    assert list((tmpdir / "epstack" / "flashinfer").iterdir()) == []
    base = tmp_path / "workspace"
    run((flashinfer.HOME,), {**env, "FLASHINFER_WORKSPACE_BASE": str(base)})
    assert (base / ".cache/flashinfer/0.6/90a/cached_ops/norm/norm.so").read_bytes() == b"so"


def test_a_moved_cache_gets_its_copy(tmp_path: Path) -> None:
    ship(tmp_path / "opt", "tool", FILES)
    named, tmpdir = unwritable(tmp_path, "tool"), tmp_path / "tmp"
    env = {"EPSTACK_HOME": str(tmp_path / "opt"), "TOOL_CACHE_DIR": str(named), "TMPDIR": str(tmpdir)}
    moved, said = run((TOOL,), env)
    assert moved == {"TOOL_CACHE_DIR": str(tmpdir / "epstack" / "tool")}
    assert said == [
        f"epstack: TOOL_CACHE_DIR={named} cannot be written (a read-only root?); its kernels go to "
        f"{tmpdir}/epstack/tool"
    ]
    assert sorted(p.name for p in (tmpdir / "epstack" / "tool" / "cache").iterdir()) == ["a", "b"]


def test_no_writable_place_stops_in_one_line(tmp_path: Path) -> None:
    ship(tmp_path / "opt", "tool", FILES)
    named, tmpdir = unwritable(tmp_path, "tool"), unwritable(tmp_path, "tmp")
    env = {"EPSTACK_HOME": str(tmp_path / "opt"), "TOOL_CACHE_DIR": str(named), "TMPDIR": str(tmpdir)}
    assert run((TOOL, deepep.HOME), env) == (
        None,
        [
            f"epstack: TOOL_CACHE_DIR={named} cannot be written (a read-only root?), nor TMPDIR={tmpdir} "
            f"({tmpdir}/epstack/tool); fix: set TMPDIR or TOOL_CACHE_DIR to a writable folder"
        ],
    )


def test_the_registry_installs_every_shipped_cache_in_todays_order() -> None:
    assert [home.name for home in INSTALLED] == [
        "deep_ep",
        "deep_gemm",
        "sglang_jit",
        "flashinfer",
        "triton",
        "triton_kernels",
        "vllm_compile",
    ]


def test_the_command_prints_one_quoted_export_per_moved_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tmpdir = tmp_path / "a tmp"
    for variable in (
        "EP_JIT_CACHE_DIR",
        "SGLANG_DG_CACHE_DIR",
        "FLASHINFER_WORKSPACE_BASE",
        "TRITON_CACHE_DIR",
    ):
        monkeypatch.setenv(variable, str(unwritable(tmp_path, variable)))
    monkeypatch.setenv("EPSTACK_HOME", str(tmp_path / "opt"))
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    ship(tmp_path / "opt", "triton", {"key/launcher.so": b"so"})
    assert main(["image", "jit-install"]) == OK
    out, err = capsys.readouterr()
    assert out == (
        f"export EP_JIT_CACHE_DIR={shlex.quote(f'{tmpdir}/epstack/deep_ep')}\n"
        f"export TRITON_CACHE_DIR={shlex.quote(f'{tmpdir}/epstack/triton')}\n"
    )
    assert len(err.splitlines()) == 2 and (tmpdir / "epstack" / "triton" / "key" / "launcher.so").is_file()
    monkeypatch.setenv("TMPDIR", str(unwritable(tmp_path, "tmp")))
    assert main(["image", "jit-install"]) == ENVIRONMENT
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "fix: set TMPDIR or EP_JIT_CACHE_DIR" in err
