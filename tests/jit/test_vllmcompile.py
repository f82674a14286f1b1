"""vLLM's torch.compile artifacts shipped in an image (epstack.jit.vllmcompile) on CPU: a cache laid out as
vLLM 0.33.0's compilation/decorators.py lays it out ($VLLM_CACHE_ROOT/torch_compile_cache/torch_aot_compile/
<hash>/rank_<r>_<dp>/model, written as model.<pid>.tmp then renamed; Inductor's own folder beside),
exported, unpacked by digest, copied by the entrypoint's real scripts/image/jit-caches.sh into
$VLLM_CACHE_ROOT, and its guard row. A GPU run makes real ones (benchmarks/vllm/gpu_session.sh)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from epstack.commands.main import main
from epstack.errors import OK, BadInput
from epstack.jit import export, gpuexport, vllmcompile
from epstack.jit.placed import placed_rows
from epstack.jit.registry import kinds
from epstack.jit.shipped import CacheFile
from tests.jit.test_sglang import H200, start

VERSIONS = ("vllm 0.33.0", "torch 2.14.1", "triton 3.8.0")
KEY = vllmcompile.CacheKey(versions=VERSIONS, arch="9.0", device="NVIDIA H100 80GB HBM3", sm_count=132)
AOT = "torch_compile_cache/torch_aot_compile"
ENTRIES = (f"{AOT}/{'a' * 64}/rank_0_0", f"{AOT}/{'b' * 64}/rank_1_1")


def write_cache(root: Path) -> Path:
    """vLLM's cache as a start leaves it: two saved artifacts, one still a temporary file (a start that
    died saving), Inductor's cache folder and the key factors beside (not what loads)."""
    for index, entry in enumerate(ENTRIES):
        folder = root / entry
        folder.mkdir(parents=True)
        (folder / vllmcompile.ARTIFACT).write_bytes(b"\x80\x04" + bytes([index]) * 64)
    half = root / AOT / ("c" * 64) / "rank_0_0"
    half.mkdir(parents=True)
    (half / "model.4242.tmp").write_bytes(b"half")
    inductor = root / AOT / ("a" * 64) / "inductor_cache" / "ab"
    inductor.mkdir(parents=True)
    (inductor / "kernel.py").write_text("# Inductor's code\n")
    (root / "torch_compile_cache" / ("d" * 10) / "rank_0_0" / "backbone").mkdir(parents=True)
    return root


def exported(tmp_path: Path) -> tuple[Path, str]:
    data, _ = vllmcompile.pack(write_cache(tmp_path / "made"), KEY)
    path = tmp_path / "vllm_compile-kernels.tar.gz"
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def shipped(tmp_path: Path) -> Path:
    """The artifacts unpacked as the kernels layer does, under EPSTACK_HOME=<tmp>/opt."""
    path, digest = exported(tmp_path)
    _, manifest, files = export.unpack(path, path.read_bytes(), digest, kinds())
    into = tmp_path / "opt" / "jit" / vllmcompile.TOOL
    vllmcompile.install(manifest, files, into)
    return into


def test_only_saved_artifacts_are_exported_and_unpack_gives_them_back(tmp_path: Path) -> None:
    path, digest = exported(tmp_path)
    kind, manifest, files = export.unpack(path, path.read_bytes(), digest, kinds())
    assert kind is vllmcompile.KIND and manifest.key == KEY
    assert sorted(files) == [f"{entry}/model" for entry in ENTRIES]
    assert manifest.kernels == 2 and manifest.entries == sorted(ENTRIES)
    again, _ = vllmcompile.pack(tmp_path / "made", KEY)
    assert again == path.read_bytes(), "the same artifacts give the same bytes"


def test_a_cache_without_a_saved_artifact_is_refused_in_one_line(tmp_path: Path) -> None:
    root = tmp_path / "vllm"
    (root / AOT / ("c" * 64) / "rank_0_0").mkdir(parents=True)
    (root / AOT / ("c" * 64) / "rank_0_0" / "model.1.tmp").write_bytes(b"half")
    with pytest.raises(BadInput, match=rf"^{root}: no saved vLLM torch.compile artifact .*; fix: serve once"):
        vllmcompile.pack(root, KEY)


@pytest.mark.parametrize(
    "name",
    [
        f"{AOT}/{'a' * 64}/rank_0_0/model.42.tmp",
        f"{AOT}/{'a' * 64}/inductor_cache/ab/kernel.py",
        f"{AOT}/{'a' * 63}/rank_0_0/model",  # not a sha256
        f"{AOT}/../{'a' * 64}/rank_0_0/model",
        f"torch_compile_cache/{'d' * 10}/rank_0_0/model",  # not the AOT folder
    ],
)
def test_unpack_refuses_a_file_vllm_would_not_load(name: str) -> None:
    manifest = vllmcompile.VllmCompileCache(
        key=KEY, files=(CacheFile(path=name, sha256=hashlib.sha256(b"payload").hexdigest(), bytes=7),)
    )
    data = export.pack(vllmcompile.KIND, manifest, {name: b"payload"})
    with pytest.raises(BadInput, match="is not a file its manifest lists; fix: export it again"):
        export.unpack("x.tar.gz", data, hashlib.sha256(data).hexdigest(), kinds())


@pytest.mark.parametrize(
    ("env", "folder"),
    [
        ({"VLLM_CACHE_ROOT": "/a", "XDG_CACHE_HOME": "/x"}, "/a"),
        ({"XDG_CACHE_HOME": "/x", "HOME": "/home/u"}, "/x/vllm"),
        ({"HOME": "/home/u"}, "/home/u/.cache/vllm"),
    ],
)
def test_cache_dir_is_the_one_vllm_reads(env: dict[str, str], folder: str) -> None:
    assert vllmcompile.cache_dir(env) == Path(folder)


@pytest.mark.parametrize(
    ("versions", "archs", "difference"),
    [
        (VERSIONS, ["9.0a"], []),
        (("vllm 0.33.1", *VERSIONS[1:]), ["9.0a"], ["vllm 0.33.0 != 0.33.1"]),
        (VERSIONS[:2], ["9.0a"], ["triton 3.8.0 != (none)"]),
        (VERSIONS, ["10.0a"], ["arch 9.0 not in 10.0a"]),
    ],
)
def test_install_differences_name_what_keeps_them_from_loading(
    monkeypatch: pytest.MonkeyPatch, versions: tuple[str, ...], archs: list[str], difference: list[str]
) -> None:
    monkeypatch.setattr(vllmcompile, "installed_versions", lambda: versions)
    monkeypatch.setattr(vllmcompile, "find", lambda name: object())  # vllm installed here
    assert vllmcompile.install_differences(KEY, archs, {}) == difference


def test_the_entrypoint_copies_each_artifact_whole_and_nothing_else(tmp_path: Path) -> None:
    into = shipped(tmp_path)
    cache = tmp_path / "var" / "vllm"
    kept = cache / ENTRIES[1]
    kept.mkdir(parents=True)
    result = start(tmp_path, {"VLLM_CACHE_ROOT": str(cache)})
    assert (result.returncode, result.stderr) == (0, "")
    assert sorted(p.relative_to(cache).as_posix() for p in cache.glob(f"{AOT}/*/*")) == sorted(ENTRIES)
    assert not list(cache.glob(".epstack*")), "no staging folder left"
    assert list(kept.iterdir()) == [], "one already there is kept"
    assert (cache / ENTRIES[0] / "model").read_bytes() == (into / ENTRIES[0] / "model").read_bytes()
    assert vllmcompile.compiled_since(cache, vllmcompile.read_manifest(into)) == []


def test_the_row_from_none_shipped_to_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllmcompile, "installed_versions", lambda: VERSIONS)
    cache = tmp_path / "var" / "vllm"
    env = {"VLLM_CACHE_ROOT": str(cache)}
    [row] = placed_rows(vllmcompile, env, ["9.0a"], tmp_path / "opt" / "jit" / vllmcompile.TOOL)
    assert (row.component, row.verdict) == ("JIT cache vLLM torch.compile", "skipped")
    assert "--toolchain vllm-compile" in row.fix
    into = shipped(tmp_path)
    [row] = placed_rows(vllmcompile, env, ["9.0a"], into)
    assert row.verdict == "ok" and row.detail.endswith(f"the entrypoint copies them into {cache} at start")
    start(tmp_path, env)
    [row] = placed_rows(vllmcompile, env, ["9.0a"], into)
    assert (row.verdict, row.detail) == ("ok", f"in {cache}")
    (cache / ENTRIES[0] / "model").unlink()
    [row] = placed_rows(vllmcompile, env, ["9.0a"], into)
    assert row.verdict == "warn" and row.detail.startswith(f"1 of 2 not in {cache}, e.g. {ENTRIES[0]}")


def test_jit_export_on_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_cache(tmp_path / "cache")
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "cache"))
    monkeypatch.setattr(
        gpuexport, "DEVICE_PROBE", (sys.executable, "-c", f"print({json.dumps(json.dumps(H200))})")
    )
    out = tmp_path / "x.tar.gz"
    assert main(["jit", "export", "--toolchain", "vllm-compile", "--out", str(out)]) == OK
    assert "2 vLLM torch.compile kernels" in capsys.readouterr().err
    digest = out.with_name("x.tar.gz.sha256").read_text().split()[0]
    assert main(["jit", "unpack", str(out), "--sha256", digest, "--into", str(tmp_path / "into")]) == OK
    manifest = vllmcompile.read_manifest(tmp_path / "into")
    assert manifest is not None and manifest.key.device == "NVIDIA H200"
