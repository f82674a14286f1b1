"""DeepGEMM's kernels shipped in an image (epstack.jit.deepgemm) on CPU: a cache laid out as deep_jit lays
it out (cache/<tag>.<digest>/ with `.committed`), exported, unpacked by digest, copied by the entrypoint's
real scripts/image/jit-caches.sh into the cache SGLang points DeepGEMM at, and its guard row. The H200 run
that makes real ones is benchmarks/serve/cold_start.py."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from epstack.commands.main import main
from epstack.errors import BAD_INPUT, OK, BadInput
from epstack.jit import deepgemm, export
from epstack.jit import gpuexport as smoke_export
from epstack.jit.deepep import KIND as DEEPEP
from epstack.jit.placed import placed_rows
from epstack.jit.shipped import CacheFile, manifest_beside, sums_beside
from tests.jit import EPSTACK_PATH
from tests.jit.test_deepep import fake_nvcc

REPO = Path(__file__).resolve().parents[2]
JIT_CACHES = REPO / "scripts" / "image" / "jit-caches.sh"
H200: dict[str, str | int] = {"arch": "9.0", "device": "NVIDIA H200", "sm_count": 132}
KEY = deepgemm.CacheKey(
    deep_gemm="0.2.3.post2", nvcc="V13.0.88", arch="9.0", device="NVIDIA H200", sm_count=132
)
ENTRIES = ("sm90_m_grouped_bf16_gemm_masked.0123456789abcdef0123456789abcdef", "sm90_bf16_gemm.fedcba98")


def write_cache(root: Path, entries: tuple[str, ...] = ENTRIES) -> Path:
    """A DeepGEMM cache as deep_jit leaves it: committed entries, one entry still being built in tmp/,
    one renamed but not committed, and SGLang's lock folder."""
    for index, entry in enumerate(entries):
        folder = root / "cache" / entry
        folder.mkdir(parents=True)
        (folder / "kernel.cu").write_text(f"// kernel {index}\n")
        (folder / "kernel.cubin").write_bytes(b"\x7fELF" + bytes([index]) * 64)
        (folder / "meta.json").write_text(json.dumps({"command": ["nvcc"], "index": index}))
        (folder / deepgemm.COMMITTED).write_text("")
    (root / "cache" / "sm90_half.0badc0de").mkdir(parents=True)
    (root / "cache" / "sm90_half.0badc0de" / "kernel.cu").write_text("// not committed\n")
    (root / "tmp" / "1234-uuid").mkdir(parents=True)
    (root / "tmp" / "1234-uuid" / "kernel.cu").write_text("// being built\n")
    (root / "locks").mkdir()
    (root / "locks" / "GROUPED_GEMM_NT_BF16_MASKED_n1536_k2048_g128.lock").write_text("")
    return root


def exported(tmp_path: Path) -> tuple[Path, str]:
    data, _ = deepgemm.pack(write_cache(tmp_path / "made"), KEY)
    path = tmp_path / "deep_gemm-kernels.tar.gz"
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def shipped(tmp_path: Path) -> Path:
    """The kernels unpacked as the kernels layer does, under EPSTACK_HOME=<tmp>/opt."""
    path, digest = exported(tmp_path)
    _, manifest, files = export.unpack(path, path.read_bytes(), digest, (DEEPEP, deepgemm.KIND))
    into = tmp_path / "opt" / "jit" / "deep_gemm"
    deepgemm.install(manifest, files, into)
    return into


def start(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The entrypoint's copy, sourced as the entrypoint sources it."""
    script = f'set -euo pipefail; . "{JIT_CACHES}"; echo "SGLANG_DG_CACHE_DIR=${{SGLANG_DG_CACHE_DIR:-}}"'
    environment = {"PATH": EPSTACK_PATH, "EPSTACK_HOME": str(tmp_path / "opt"),
                   "HOME": str(tmp_path / "home"), **env}  # fmt: skip
    return subprocess.run(
        ["bash", "-c", script], env=environment, capture_output=True, text=True, check=False
    )


# ---- export and unpack ----


def test_only_committed_entries_are_exported_and_unpack_gives_them_back(tmp_path: Path) -> None:
    path, digest = exported(tmp_path)
    kind, manifest, files = export.unpack(path, path.read_bytes(), digest, (DEEPEP, deepgemm.KIND))
    assert kind is deepgemm.KIND and manifest.key == KEY
    assert sorted({Path(name).parent.name for name in files}) == sorted(ENTRIES)
    assert sorted(Path(name).name for name in files if ENTRIES[0] in name) == [
        ".committed", "kernel.cu", "kernel.cubin", "meta.json",
    ]  # fmt: skip
    assert manifest.kernels == 2 and manifest.bytes == sum(map(len, files.values()))
    again, _ = deepgemm.pack(tmp_path / "made", KEY)
    assert again == path.read_bytes(), "the same kernels give the same bytes"


def test_a_cache_without_committed_kernels_is_refused_in_one_line(tmp_path: Path) -> None:
    root = tmp_path / "dg"
    (root / "cache" / "sm90_half.0badc0de").mkdir(parents=True)
    with pytest.raises(BadInput, match=rf"^{root}: no committed DeepGEMM kernels .*; fix: serve once"):
        deepgemm.pack(root, KEY)


@pytest.mark.parametrize(
    "name",
    [
        "cache/../../etc/passwd",
        "cache/x.abc/../../evil",
        "locks/a.lock",
        "cache/sm90.beef/run.sh",
        "tmp/u/kernel.cu",
    ],
)
def test_unpack_refuses_a_file_deep_jit_would_not_name(tmp_path: Path, name: str) -> None:
    files = {name: b"payload"}
    manifest = deepgemm.DeepGemmCache(
        key=KEY, files=(CacheFile(path=name, sha256=hashlib.sha256(b"payload").hexdigest(), bytes=7),)
    )
    data = export.pack(deepgemm.KIND, manifest, files)
    with pytest.raises(BadInput, match="is not a file its manifest lists; fix: export it again"):
        export.unpack("x.tar.gz", data, hashlib.sha256(data).hexdigest(), (DEEPEP, deepgemm.KIND))


def test_a_deepgemm_export_where_only_deepeps_are_unpacked_is_named(tmp_path: Path) -> None:
    path, digest = exported(tmp_path)
    with pytest.raises(
        BadInput, match=r"schema 'deepgemm-cache/1' unknown, this epstack unpacks kernel-cache/1"
    ):
        export.unpack(path, path.read_bytes(), digest, (DEEPEP,))


# ---- where SGLang's DeepGEMM looks, and the key ----


@pytest.mark.parametrize(
    ("env", "folder"),
    [
        ({"SGLANG_DG_CACHE_DIR": "/a", "DG_JIT_CACHE_DIR": "/b", "SGLANG_CACHE_DIR": "/c"}, "/a"),
        ({"DG_JIT_CACHE_DIR": "/b", "SGLANG_CACHE_DIR": "/c"}, "/c/deep_gemm"),  # SGLang overrides DG_
        ({"HOME": "/home/u"}, "/home/u/.cache/sglang/deep_gemm"),
        ({"SGLANG_DG_CACHE_DIR": "/rw:/ro"}, "/rw"),  # deep_jit: the first of a list is written
    ],
)
def test_cache_dir_is_the_one_sglang_points_deepgemm_at(env: dict[str, str], folder: str) -> None:
    assert deepgemm.cache_dir(env) == Path(folder)


def test_the_key_names_deepgemms_nvcc_in_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nvcc = fake_nvcc(tmp_path / "cuda" / "bin", "13.0")
    monkeypatch.setattr(deepgemm, "installed_version", lambda: "0.2.3.post2")
    key = deepgemm.image_key({"DG_JIT_NVCC_COMPILER": str(nvcc)})
    assert (key.deep_gemm, key.nvcc, key.sm_count) == ("0.2.3.post2", "V13.0.88", 0)
    assert deepgemm.image_key({"CUDA_HOME": str(tmp_path / "none")}).nvcc == ""


@pytest.mark.parametrize(
    ("here", "archs", "difference"),
    [
        (("0.2.3.post2", "V13.0.88"), ["9.0a"], []),
        (("0.2.4", "V13.0.88"), ["9.0a"], ["deep_gemm 0.2.3.post2 != 0.2.4"]),
        (("0.2.3.post2", "V13.1.80"), ["9.0a"], ["nvcc V13.0.88 != V13.1.80"]),
        (("0.2.3.post2", ""), ["10.0a"], ["arch 9.0 not in 10.0a"]),
    ],
)
def test_install_differences_name_what_keeps_them_from_loading(
    monkeypatch: pytest.MonkeyPatch, here: tuple[str, str], archs: list[str], difference: list[str]
) -> None:
    monkeypatch.setattr(
        deepgemm,
        "image_key",
        lambda env: deepgemm.CacheKey(deep_gemm=here[0], nvcc=here[1], arch="", device="", sm_count=0),
    )
    assert deepgemm.install_differences(KEY, archs, {}) == difference


# ---- the entrypoint's copy ----


def test_the_entrypoint_copies_each_entry_whole_and_nothing_else(tmp_path: Path) -> None:
    into = shipped(tmp_path)
    cache = tmp_path / "var" / "deep_gemm"
    kept = cache / "cache" / ENTRIES[1]
    kept.mkdir(parents=True)
    result = start(tmp_path, {"SGLANG_DG_CACHE_DIR": str(cache)})
    assert (result.returncode, result.stderr) == (0, "")
    assert sorted(p.name for p in cache.iterdir()) == ["cache"], "no staging folder left"
    assert sorted(p.name for p in (cache / "cache").iterdir()) == sorted(ENTRIES)
    assert list(kept.iterdir()) == [], "one already there is kept"
    copied = cache / "cache" / ENTRIES[0]
    assert (copied / "kernel.cubin").read_bytes() == (
        into / "cache" / ENTRIES[0] / "kernel.cubin"
    ).read_bytes()
    assert copied.stat().st_mode & 0o755 == 0o755, "readable by every user"
    assert deepgemm.compiled_since(cache, deepgemm.read_manifest(into)) == []


def test_a_shipped_byte_changed_is_not_copied_and_said(tmp_path: Path) -> None:
    into = shipped(tmp_path)
    cubin = into / "cache" / ENTRIES[0] / "kernel.cubin"
    cubin.chmod(0o644)
    cubin.write_bytes(cubin.read_bytes()[:-1] + b"\xff")
    cache = tmp_path / "var" / "deep_gemm"
    result = start(tmp_path, {"SGLANG_DG_CACHE_DIR": str(cache)})
    assert result.returncode == 0
    assert result.stderr == (
        f"epstack: {into} differs from its sha256 list {sums_beside(into)}, so it is not copied into "
        f"{cache}; the guard names the change\n"
    )
    assert list(cache.iterdir()) == []


def test_an_entry_added_to_the_shipped_folder_is_never_copied(tmp_path: Path) -> None:
    """Only what the list names is copied: an entry its manifest does not list stays behind."""
    into = shipped(tmp_path)
    foreign = into / "cache" / "sm90_bf16_gemm.aaaaaaaa"
    foreign.mkdir()
    (foreign / "kernel.cubin").write_bytes(b"\x7fELF foreign")
    (foreign / deepgemm.COMMITTED).write_text("")
    cache = tmp_path / "var" / "deep_gemm"
    assert start(tmp_path, {"SGLANG_DG_CACHE_DIR": str(cache)}).returncode == 0
    assert sorted(p.name for p in (cache / "cache").iterdir()) == sorted(ENTRIES)


def test_a_cache_that_cannot_be_written_moves_to_tmpdir_with_the_kernels(tmp_path: Path) -> None:
    shipped(tmp_path)
    (tmp_path / "file").write_text("")
    cache, tmpdir = tmp_path / "file" / "deep_gemm", tmp_path / "tmp"
    result = start(tmp_path, {"SGLANG_DG_CACHE_DIR": str(cache), "TMPDIR": str(tmpdir)})
    moved = tmpdir / "epstack" / "deep_gemm"
    assert result.stdout.splitlines()[-1] == f"SGLANG_DG_CACHE_DIR={moved}"
    assert (
        f"SGLANG_DG_CACHE_DIR={cache} cannot be written (a read-only root?); DeepGEMM's kernels go to {moved}"
        in result.stderr
    )
    assert sorted(p.name for p in (moved / "cache").iterdir()) == sorted(ENTRIES)


# ---- the guard's row ----


@pytest.fixture
def this_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deepgemm, "installed_version", lambda: KEY.deep_gemm)


def test_the_row_is_skipped_without_kernels_ok_before_and_after_the_copy(
    tmp_path: Path, this_install: None
) -> None:
    cache = tmp_path / "var" / "deep_gemm"
    env = {"SGLANG_DG_CACHE_DIR": str(cache), "CUDA_HOME": str(tmp_path / "none")}
    [row] = placed_rows(deepgemm, env, ["9.0a"], tmp_path / "opt" / "jit" / "deep_gemm")
    assert (row.verdict, row.found) == ("skipped", "none shipped")
    into = shipped(tmp_path)
    [row] = placed_rows(deepgemm, env, ["9.0a"], into)
    assert row.verdict == "ok" and "the entrypoint copies them into" in row.detail
    assert row.found.startswith("2 kernels,") and row.found.endswith(
        "deep_gemm 0.2.3.post2, nvcc V13.0.88, sm 9.0 (NVIDIA H200, 132 SMs)"
    )
    start(tmp_path, {"SGLANG_DG_CACHE_DIR": str(cache)})
    [row] = placed_rows(deepgemm, env, ["9.0a"], into)
    assert (row.verdict, row.detail) == ("ok", f"in {cache}")
    for name in (cache / "cache" / ENTRIES[0]).iterdir():
        name.unlink()
    (cache / "cache" / ENTRIES[0]).rmdir()
    [row] = placed_rows(deepgemm, env, ["9.0a"], into)
    assert row.verdict == "warn" and row.detail.startswith(f"1 of 2 not in {cache}, e.g. cache/{ENTRIES[0]}")


def test_a_changed_kernel_is_a_mismatch_unless_the_start_trusts_the_build(
    tmp_path: Path, this_install: None
) -> None:
    into = shipped(tmp_path)
    cubin = into / "cache" / ENTRIES[1] / "kernel.cubin"
    cubin.chmod(0o644)
    cubin.write_bytes(b"\x7fELF changed")
    env = {"CUDA_HOME": str(tmp_path / "none")}
    [row] = placed_rows(deepgemm, env, ["9.0a"], into)
    assert (
        row.verdict == "mismatch"
        and row.detail == f"1 missing or changed, e.g. cache/{ENTRIES[1]}/kernel.cubin"
    )
    [row] = placed_rows(deepgemm, env, ["9.0a"], into, verify_bytes=False)
    assert row.verdict == "ok"


def test_kernels_for_another_deepgemm_are_a_mismatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    into = shipped(tmp_path)
    monkeypatch.setattr(deepgemm, "installed_version", lambda: "0.2.4")
    [row] = placed_rows(deepgemm, {"CUDA_HOME": str(tmp_path / "none")}, ["9.0a"], into)
    assert row.verdict == "mismatch" and "deep_gemm 0.2.3.post2 != 0.2.4" in row.detail


def test_the_start_runs_no_nvcc_for_the_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At start the build's record vouches for the install: the key is not read again (it runs nvcc)."""
    into = shipped(tmp_path)

    def no_key(env: object) -> None:
        raise AssertionError("the start read the install's key")

    monkeypatch.setattr(deepgemm, "image_key", no_key)
    [row] = placed_rows(
        deepgemm, {"SGLANG_DG_CACHE_DIR": str(tmp_path / "c")}, ["9.0a"], into, verify_bytes=False
    )
    assert row.verdict == "ok"


# ---- the commands ----


def test_jit_export_and_unpack_as_a_user_runs_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SGLANG_DG_CACHE_DIR", str(write_cache(tmp_path / "dg")))
    monkeypatch.setenv("DG_JIT_NVCC_COMPILER", str(fake_nvcc(tmp_path / "cuda" / "bin", "13.0")))
    monkeypatch.setattr(
        smoke_export, "DEVICE_PROBE", (sys.executable, "-c", f"print({json.dumps(json.dumps(H200))})")
    )
    monkeypatch.setattr(deepgemm, "installed_version", lambda: KEY.deep_gemm)
    out = tmp_path / "out" / "deep_gemm-kernels.tar.gz"
    assert main(["jit", "export", "--toolchain", "deepgemm", "--out", str(out)]) == OK
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    assert "jit export: 2 DeepGEMM kernels" in capsys.readouterr().err
    assert out.with_name(f"{out.name}.sha256").read_text() == f"{digest}  {out.name}\n"
    into = tmp_path / "opt" / "jit" / "deep_gemm"
    assert main(["image", "jit-unpack", str(out), "--sha256", digest, "--into", str(into)]) == OK
    unpacked = deepgemm.read_manifest(into)
    assert unpacked is not None and unpacked.key == KEY
    assert manifest_beside(into).is_file() and sums_beside(into).is_file()
    monkeypatch.setattr(deepgemm, "installed_version", lambda: "0.2.4")
    assert (
        main(["image", "jit-unpack", str(out), "--sha256", digest, "--into", str(tmp_path / "other")])
        == BAD_INPUT
    )
    err = capsys.readouterr().err
    assert "made for another install (deep_gemm 0.2.3.post2 != 0.2.4), so DeepGEMM here would compile" in err
    assert not (tmp_path / "other").exists()
