"""SGLang's own JIT kernels shipped in an image (epstack.jit.sglang) on CPU: a cache laid out as
SGLang 0.5.23's kernels/jit/utils/compile/cache.py lays it out (<target>/<module>/build-<key>/deps-<key>/
with the .so and sgl_deps.json, a staging folder beside), exported, unpacked by digest, copied by the
entrypoint's real scripts/image/jit-caches.sh into $SGLANG_JIT_CACHE_DIR, and its guard row. The H200
run that makes real ones is benchmarks/serve/cold_start.py."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from epstack.commands.main import main
from epstack.errors import BAD_INPUT, OK, BadInput
from epstack.jit import export, gpuexport, sglang
from epstack.jit.placed import placed_rows
from epstack.jit.registry import kinds
from epstack.jit.shipped import CacheFile
from tests.jit import EPSTACK_PATH

REPO = Path(__file__).resolve().parents[2]
JIT_CACHES = REPO / "scripts" / "image" / "jit-caches.sh"
H200: dict[str, str | int] = {"arch": "9.0", "device": "NVIDIA H200", "sm_count": 132}
VERSIONS = ("sglang 0.5.23", "torch 2.14.1", "flashinfer-python 0.6.12")
KEY = sglang.CacheKey(
    versions=VERSIONS, nvcc="V13.0.88", cxx="c++ (Ubuntu 13.3.0) 13.3.0", arch="9.0", device="NVIDIA H200",
    sm_count=132,
)  # fmt: skip
LEAVES = (
    "sm90a/qknorm_128/build-0123456789abcdef/deps-fedcba9876543210",
    "sm90a/fused_rope/build-00000000deadbeef/deps-1111111122222222",
)


def write_cache(root: Path) -> Path:
    """An SGLang JIT cache as it leaves one: published leaves, a build still in staging, a leaf whose
    rename came before its .so (never published so; a half copy), and a module's lock file."""
    for index, leaf in enumerate(LEAVES):
        folder = root / leaf
        folder.mkdir(parents=True)
        module = leaf.split("/")[1]
        (folder / f"{module}.so").write_bytes(b"\x7fELF" + bytes([index]) * 64)
        (folder / sglang.DEPS).write_text(json.dumps([["kernels", "csrc/x.cuh", "ab" * 32]]))
    staging = root / "sm90a" / "qknorm_128" / "build-0123456789abcdef" / ".staging-5a1b"
    staging.mkdir()
    (staging / "qknorm_128.so").write_bytes(b"half")
    half = root / "sm90a" / "act" / "build-0000000000000001" / "deps-0000000000000002"
    half.mkdir(parents=True)
    (half / sglang.DEPS).write_text("[]")
    (root / "sm90a" / "qknorm_128" / "lock").write_text("")
    return root


def exported(tmp_path: Path) -> tuple[Path, str]:
    data, _ = sglang.pack(write_cache(tmp_path / "made"), KEY)
    path = tmp_path / "sglang_jit-kernels.tar.gz"
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def shipped(tmp_path: Path) -> Path:
    """The kernels unpacked as the kernels layer does, under EPSTACK_HOME=<tmp>/opt."""
    path, digest = exported(tmp_path)
    _, manifest, files = export.unpack(path, path.read_bytes(), digest, kinds())
    into = tmp_path / "opt" / "jit" / sglang.TOOL
    sglang.install(manifest, files, into)
    return into


def start(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The entrypoint's copy, sourced as the entrypoint sources it."""
    script = f'set -euo pipefail; . "{JIT_CACHES}"; echo "SGLANG_JIT_CACHE_DIR=${{SGLANG_JIT_CACHE_DIR:-}}"'
    environment = {"PATH": EPSTACK_PATH, "EPSTACK_HOME": str(tmp_path / "opt"),
                   "HOME": str(tmp_path / "home"), **env}  # fmt: skip
    return subprocess.run(
        ["bash", "-c", script], env=environment, capture_output=True, text=True, check=False
    )


def test_only_published_leaves_are_exported_and_unpack_gives_them_back(tmp_path: Path) -> None:
    path, digest = exported(tmp_path)
    kind, manifest, files = export.unpack(path, path.read_bytes(), digest, kinds())
    assert kind is sglang.KIND and manifest.key == KEY
    assert sorted(files) == sorted(
        f"{leaf}/{name}" for leaf in LEAVES for name in (sglang.DEPS, f"{leaf.split('/')[1]}.so")
    )
    assert manifest.kernels == 2 and manifest.entries == sorted(LEAVES)
    again, _ = sglang.pack(tmp_path / "made", KEY)
    assert again == path.read_bytes(), "the same kernels give the same bytes"


def test_a_cache_without_published_leaves_is_refused_in_one_line(tmp_path: Path) -> None:
    root = tmp_path / "jit"
    (root / "sm90a" / "m" / "build-0000000000000001" / ".staging-1").mkdir(parents=True)
    with pytest.raises(BadInput, match=rf"^{root}: no published SGLang JIT kernels .*; fix: serve once"):
        sglang.pack(root, KEY)


@pytest.mark.parametrize(
    "name",
    [
        "sm90a/m/build-0123456789abcdef/deps-0123456789abcdef/other.so",  # not the module's own .so
        "sm90a/m/build-0123456789abcdef/.staging-1/m.so",
        "sm90a/../build-0123456789abcdef/deps-0123456789abcdef/sgl_deps.json",
        "sm90a/m/build-0123/deps-0123456789abcdef/m.so",  # not 16 hex
        "sm90a/m/lock",
    ],
)
def test_unpack_refuses_a_file_sglang_would_not_name(name: str) -> None:
    manifest = sglang.SglangJitCache(
        key=KEY, files=(CacheFile(path=name, sha256=hashlib.sha256(b"payload").hexdigest(), bytes=7),)
    )
    data = export.pack(sglang.KIND, manifest, {name: b"payload"})
    with pytest.raises(BadInput, match="is not a file its manifest lists; fix: export it again"):
        export.unpack("x.tar.gz", data, hashlib.sha256(data).hexdigest(), kinds())


@pytest.mark.parametrize(
    ("env", "folder"),
    [
        ({"SGLANG_JIT_CACHE_DIR": "/a", "SGLANG_CACHE_DIR": "/c"}, "/a"),
        ({"SGLANG_CACHE_DIR": "/c", "HOME": "/home/u"}, "/home/u/.cache/sglang/jit"),  # not SGLANG_CACHE_DIR
    ],
)
def test_cache_dir_is_the_one_sglang_reads(env: dict[str, str], folder: str) -> None:
    assert sglang.cache_dir(env) == Path(folder)


@pytest.mark.parametrize(
    ("versions", "cxx", "archs", "difference"),
    [
        (VERSIONS, KEY.cxx, ["9.0a"], []),
        (("sglang 0.5.24", *VERSIONS[1:]), KEY.cxx, ["9.0a"], ["sglang 0.5.23 != 0.5.24"]),
        (VERSIONS[:2], KEY.cxx, ["9.0a"], ["flashinfer-python 0.6.12 != (none)"]),
        (VERSIONS, "c++ 14.2.0", ["9.0a"], [f"cxx {KEY.cxx} != c++ 14.2.0"]),
        ((), "", ["10.0a"], ["arch 9.0 not in 10.0a"]),  # what this install cannot name is not compared
    ],
)
def test_install_differences_name_what_keeps_them_from_loading(
    monkeypatch: pytest.MonkeyPatch,
    versions: tuple[str, ...],
    cxx: str,
    archs: list[str],
    difference: list[str],
) -> None:
    here = sglang.CacheKey(versions=versions, nvcc="V13.0.88", cxx=cxx, arch="", device="", sm_count=0)
    monkeypatch.setattr(sglang, "image_key", lambda env: here)
    assert sglang.install_differences(KEY, archs, {}) == difference


def test_the_key_reads_the_host_compiler_and_the_versions_installed(tmp_path: Path) -> None:
    cxx = tmp_path / "c++"
    cxx.write_text("#!/bin/sh\necho 'c++ (Test) 13.3.0'; echo 'Copyright'\n")
    cxx.chmod(0o755)
    key = sglang.image_key({"CXX": str(cxx), "CUDA_HOME": str(tmp_path / "none")})
    assert (key.cxx, key.nvcc) == ("c++ (Test) 13.3.0", "")
    assert sglang.image_key({"CXX": str(tmp_path / "absent")}).cxx == ""


def test_the_entrypoint_copies_each_leaf_whole_and_nothing_else(tmp_path: Path) -> None:
    into = shipped(tmp_path)
    cache = tmp_path / "var" / "sglang_jit"
    kept = cache / LEAVES[1]
    kept.mkdir(parents=True)
    result = start(tmp_path, {"SGLANG_JIT_CACHE_DIR": str(cache)})
    assert (result.returncode, result.stderr) == (0, "")
    assert sorted(p.relative_to(cache).as_posix() for p in cache.glob("*/*/*/*")) == sorted(LEAVES)
    assert not list(cache.glob(".epstack*")), "no staging folder left"
    assert list(kept.iterdir()) == [], "one already there is kept"
    module = LEAVES[0].split("/")[1]
    assert (cache / LEAVES[0] / f"{module}.so").read_bytes() == (
        into / LEAVES[0] / f"{module}.so"
    ).read_bytes()
    assert sglang.compiled_since(cache, sglang.read_manifest(into)) == []


def test_the_row_from_none_shipped_to_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sglang, "installed_versions", lambda: VERSIONS)
    cache = tmp_path / "var" / "sglang_jit"
    env = {"SGLANG_JIT_CACHE_DIR": str(cache), "CUDA_HOME": str(tmp_path / "none"), "CXX": "/absent"}
    [row] = placed_rows(sglang, env, ["9.0a"], tmp_path / "opt" / "jit" / sglang.TOOL)
    assert (row.component, row.verdict) == ("JIT cache SGLang", "skipped")
    assert "--toolchain sglang" in row.fix
    into = shipped(tmp_path)
    [row] = placed_rows(sglang, env, ["9.0a"], into)
    assert row.verdict == "ok" and row.detail.endswith(f"the entrypoint copies them into {cache} at start")
    assert row.found.startswith("2 kernels, ") and "sglang 0.5.23, torch 2.14.1" in row.found
    start(tmp_path, env)
    [row] = placed_rows(sglang, env, ["9.0a"], into)
    assert (row.verdict, row.detail) == ("ok", f"in {cache}")
    (cache / LEAVES[0] / sglang.DEPS).unlink()
    [row] = placed_rows(sglang, env, ["9.0a"], into)
    assert row.verdict == "warn" and row.detail.startswith(f"1 of 2 not in {cache}, e.g. {LEAVES[0]}")
    so = into / LEAVES[1] / "fused_rope.so"
    so.chmod(0o644)
    so.write_bytes(b"changed")
    [row] = placed_rows(sglang, env, ["9.0a"], into)
    assert row.verdict == "mismatch" and row.detail == f"1 missing or changed, e.g. {LEAVES[1]}/fused_rope.so"


def test_jit_export_and_unpack_on_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_cache(tmp_path / "cache")
    monkeypatch.setenv("SGLANG_JIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(
        gpuexport, "DEVICE_PROBE", (sys.executable, "-c", f"print({json.dumps(json.dumps(H200))})")
    )
    out = tmp_path / "x.tar.gz"
    assert main(["jit", "export", "--toolchain", "sglang", "--out", str(out)]) == OK
    assert "2 SGLang kernels" in capsys.readouterr().err
    digest = out.with_name("x.tar.gz.sha256").read_text().split()[0]
    into = tmp_path / "into"
    assert main(["image", "jit-unpack", str(out), "--sha256", digest, "--into", str(into)]) == OK
    assert sglang.read_manifest(into) is not None and sglang.read_manifest(into).key.device == "NVIDIA H200"  # type: ignore[union-attr]
    assert main(["image", "jit-unpack", str(out), "--sha256", digest, "--into", str(into)]) == BAD_INPUT
    assert "already holds SGLang JIT kernels; fix:" in capsys.readouterr().err
