"""Triton's serve-time kernels shipped in an image (epstack.jit.tritonserve) on CPU: a cache laid out as
Triton 3.8's runtime/cache.py and compiler/compiler.py lay it out (<key>/ in base32, each stage's file,
then `__grp__<name>.json` naming every file by absolute path), beside what is never exported (an entry
whose group file is not written yet, one whose group names a missing file or another cache folder, the
launcher's cuda_utils .so), exported, unpacked by digest, copied by the entrypoint's real
scripts/image/jit-caches.sh into $TRITON_CACHE_DIR, and its guard row. No GPU has made real ones yet."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from epstack.commands.main import main
from epstack.errors import BAD_INPUT, OK, BadInput
from epstack.jit import export, gpuexport, triton, tritonserve
from epstack.jit.install import install
from epstack.jit.placed import placed_rows
from epstack.jit.registry import EXPORTED, INSTALLED, kinds
from epstack.jit.shipped import CacheFile
from tests.jit import EPSTACK_PATH
from tests.jit.test_install import ship, unwritable

REPO = Path(__file__).resolve().parents[2]
JIT_CACHES = REPO / "scripts" / "image" / "jit-caches.sh"
H200: dict[str, str | int] = {"arch": "9.0", "device": "NVIDIA H200", "sm_count": 132}
STAGES = ("source", "ttir", "ttgir", "llir", "ptx", "cubin", "json")  # compile()'s files, metadata last


def key_of(text: str) -> str:
    """A cache key folder as Triton names it: runtime/cache.py's _base32 of a sha256 hex."""
    return base64.b32encode(hashlib.sha256(text.encode()).digest()).decode().rstrip("=")


KERNELS = {key_of("fwd"): "_fwd_kernel_stage1", key_of("moe"): "fused_moe_kernel"}
HALF, MISSING, ELSEWHERE, LAUNCHER = (key_of(name) for name in ("half", "missing", "elsewhere", "launcher"))


def key(cache_dir: Path | str) -> tritonserve.CacheKey:
    return tritonserve.CacheKey(
        triton="3.8.0", cache_dir=str(cache_dir), arch="9.0", device="NVIDIA H200", sm_count=132
    )


def compile_into(root: Path, entry: str, name: str, *, group: bool = True, named: Path | None = None) -> None:
    """One kernel as compile() leaves it: each stage put, then (unless `group` is False, an interrupted
    compile) the group file naming every file as <TRITON_CACHE_DIR>/<key>/<file>."""
    folder = root / entry
    folder.mkdir(parents=True)
    files = {}
    for stage in STAGES:
        data = b"\x7fELF" + name.encode() * 8 if stage == "cubin" else f"{stage} of {name}\n".encode()
        (folder / f"{name}.{stage}").write_bytes(data)
        files[f"{name}.{stage}"] = f"{named or root}/{entry}/{name}.{stage}"
    if group:
        (folder / f"__grp__{name}.json").write_text(json.dumps({"child_paths": files}))


def write_cache(root: Path) -> Path:
    """A TRITON_CACHE_DIR after a serve run: two published kernels, a compile interrupted before its
    group file (its put's tmp folder left), one whose cubin is gone, one compiled under another
    TRITON_CACHE_DIR, and the launcher (a .so, no group file)."""
    for entry, name in KERNELS.items():
        compile_into(root, entry, name)
    compile_into(root, HALF, "_half_kernel", group=False)
    (root / HALF / "tmp.pid_7_0f0e").mkdir()
    compile_into(root, MISSING, "_gone_kernel")
    (root / MISSING / "_gone_kernel.cubin").unlink()
    compile_into(root, ELSEWHERE, "_other_kernel", named=Path("/root/.triton/cache"))
    (root / LAUNCHER).mkdir()
    (root / LAUNCHER / "cuda_utils.cpython-312-x86_64-linux-gnu.so").write_bytes(b"\x7fELF launcher")
    return root


def exported(tmp_path: Path, cache: Path) -> tuple[Path, str]:
    data, _ = tritonserve.pack(write_cache(cache), key(cache))
    path = tmp_path / "triton_kernels-kernels.tar.gz"
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def shipped(tmp_path: Path, cache: Path) -> Path:
    """The kernels a serve run made in `cache` (the image's TRITON_CACHE_DIR), unpacked as the kernels
    layer does under EPSTACK_HOME=<tmp>/opt; `cache` left empty, as a new container's is."""
    path, digest = exported(tmp_path, cache)
    shutil.rmtree(cache)
    _, manifest, files = export.unpack(path, path.read_bytes(), digest, kinds())
    into = tmp_path / "opt" / "jit" / tritonserve.TOOL
    tritonserve.install(manifest, files, into)
    return into


def start(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The entrypoint's copy, sourced as the entrypoint sources it."""
    script = f'set -euo pipefail; . "{JIT_CACHES}"; echo "TRITON_CACHE_DIR=${{TRITON_CACHE_DIR:-}}"'
    environment = {"PATH": EPSTACK_PATH, "EPSTACK_HOME": str(tmp_path / "opt"),
                   "HOME": str(tmp_path / "home"), **env}  # fmt: skip
    return subprocess.run(
        ["bash", "-c", script], env=environment, capture_output=True, text=True, check=False
    )


def test_only_published_kernel_entries_are_exported_and_unpack_gives_them_back(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path, digest = exported(tmp_path, cache)
    kind, manifest, files = export.unpack(path, path.read_bytes(), digest, kinds())
    assert kind is tritonserve.KIND and manifest.key == key(cache)
    assert sorted(files) == sorted(
        f"{entry}/{prefix}{name}.{stage}"
        for entry, name in KERNELS.items()
        for prefix, stage in [("", stage) for stage in STAGES] + [("__grp__", "json")]
    )
    assert manifest.kernels == 2 and manifest.entries == sorted(KERNELS)
    assert files[f"{key_of('fwd')}/_fwd_kernel_stage1.cubin"].startswith(b"\x7fELF")
    again, _ = tritonserve.pack(cache, key(cache))
    assert again == path.read_bytes(), "the same kernels give the same bytes"


def test_the_key_names_the_folder_the_group_files_name(tmp_path: Path) -> None:
    cache = write_cache(tmp_path / "cache")
    _, manifest = tritonserve.pack(cache, key("/elsewhere"))
    assert manifest.key.cache_dir == str(cache)


def test_a_cache_of_only_unpublished_entries_and_the_launcher_is_refused_in_one_line(tmp_path: Path) -> None:
    root = write_cache(tmp_path / "cache")
    for entry in KERNELS:
        next((root / entry).glob("__grp__*")).unlink()
    with pytest.raises(BadInput, match=rf"^{root}: no published Triton kernels .*; fix: serve once"):
        tritonserve.pack(root, key(root))


@pytest.mark.parametrize(
    "listed",
    [
        {"k.json": "{cache}/{entry}/k.json"},  # no cubin: no kernel binary
        {"k.cubin": "{cache}/{entry}/k.cubin"},  # no metadata: compile() never loads it
        {
            "k.json": "{cache}/{entry}/k.json",
            "k.cubin": "{cache}/{entry}/k.cubin",
            "x.so": "{cache}/{entry}/x.so",
        },
        {"k.json": "{cache}/{entry}/k.json", "k.cubin": "{cache}/other/k.cubin"},
    ],
)
def test_an_entry_triton_would_not_load_whole_from_here_is_not_published(
    tmp_path: Path, listed: dict[str, str]
) -> None:
    cache, entry = tmp_path / "cache", key_of("k")
    (cache / entry).mkdir(parents=True)
    for file in ("k.json", "k.cubin", "x.so"):
        (cache / entry / file).write_bytes(b"x")
    paths = {file: path.format(cache=cache, entry=entry) for file, path in listed.items()}
    (cache / entry / "__grp__k.json").write_text(json.dumps({"child_paths": paths}))
    assert tritonserve.published(cache) == []
    (cache / entry / "__grp__k.json").write_text(
        json.dumps({"child_paths": {file: f"{cache}/{entry}/{file}" for file in ("k.json", "k.cubin")}})
    )
    assert tritonserve.published(cache) == [cache / entry]


@pytest.mark.parametrize(
    "name",
    [
        f"{LAUNCHER}/cuda_utils.cpython-312-x86_64-linux-gnu.so",  # the launcher: the image ships it
        f"{HALF}/tmp.pid_7_0f0e/_half_kernel.cubin",
        f"{HALF.lower()}/k.cubin",  # not base32
        f"../{HALF}/k.cubin",
        f"{HALF}/k.cubin.tmp.pid_7_0f0e",
    ],
)
def test_unpack_refuses_a_file_triton_would_not_name(name: str) -> None:
    manifest = tritonserve.TritonKernelCache(
        key=key("/c"), files=(CacheFile(path=name, sha256=hashlib.sha256(b"payload").hexdigest(), bytes=7),)
    )
    data = export.pack(tritonserve.KIND, manifest, {name: b"payload"})
    with pytest.raises(BadInput, match="is not a file its manifest lists; fix: export it again"):
        export.unpack("x.tar.gz", data, hashlib.sha256(data).hexdigest(), kinds())


@pytest.mark.parametrize(
    ("here", "archs", "cache", "difference"),
    [
        ("3.8.0", ["9.0a"], "/var/cache/t", []),
        ("3.9.0", ["9.0a"], "/var/cache/t", ["triton 3.8.0 != 3.9.0"]),
        ("3.8.0", ["10.0a"], "/var/cache/t", ["arch 9.0 not in 10.0a"]),
        ("", ["9.0a"], "/var/cache/t", []),  # a version this install cannot name is not compared
        (
            "3.8.0",
            ["9.0a"],
            "/tmp/t",
            ["TRITON_CACHE_DIR /var/cache/t != /tmp/t (Triton's group files name it)"],
        ),
    ],
)
def test_install_differences_name_what_keeps_them_from_loading(
    monkeypatch: pytest.MonkeyPatch, here: str, archs: list[str], cache: str, difference: list[str]
) -> None:
    monkeypatch.setattr(triton, "installed_version", lambda: here)
    assert (
        tritonserve.install_differences(key("/var/cache/t"), archs, {"TRITON_CACHE_DIR": cache}) == difference
    )


def test_it_is_registered_after_the_launcher_and_reads_tritons_cache_folder() -> None:
    assert EXPORTED["triton-kernels"] is tritonserve
    names = [home.name for home in INSTALLED]
    assert names.index("triton") + 1 == names.index(tritonserve.TOOL)
    assert tritonserve.cache_dir({"TRITON_CACHE_DIR": "/c", "HOME": "/h"}) == Path("/c")
    assert tritonserve.cache_dir({"HOME": "/h"}) == Path("/h/.triton/cache")
    assert tritonserve.cache_dir({"TRITON_HOME": "/t", "HOME": "/h"}) == Path("/t/.triton/cache")


def test_the_entrypoint_copies_each_entry_whole_and_triton_finds_it(tmp_path: Path) -> None:
    cache = tmp_path / "var" / "triton"
    into = shipped(tmp_path, cache)
    kept = cache / key_of("moe")
    kept.mkdir(parents=True)
    result = start(tmp_path, {"TRITON_CACHE_DIR": str(cache)})
    assert (result.returncode, result.stderr) == (0, "")
    assert sorted(p.name for p in cache.iterdir()) == sorted(KERNELS)
    assert list(kept.iterdir()) == [], "one already there is kept"
    entry = key_of("fwd")
    assert tritonserve.placed(cache, entry) and not tritonserve.placed(cache, key_of("moe"))
    cubin = f"{entry}/_fwd_kernel_stage1.cubin"
    assert (cache / cubin).read_bytes() == (into / cubin).read_bytes()
    assert tritonserve.compiled_since(cache, tritonserve.read_manifest(into)) == []
    compile_into(cache, key_of("new"), "_new_kernel")
    assert tritonserve.compiled_since(cache, tritonserve.read_manifest(into)) == [key_of("new")]


def test_a_moved_triton_cache_keeps_the_launchers_folder_and_gets_no_kernels(tmp_path: Path) -> None:
    """The kernels' group files name the image's folder: moved, Triton compiles them where it moved."""
    named, tmpdir = unwritable(tmp_path, "triton"), tmp_path / "tmp"
    ship(tmp_path / "opt", "triton", {"key/launcher.so": b"so"})
    ship(tmp_path / "opt", tritonserve.TOOL, {f"{key_of('fwd')}/k.cubin": b"cubin"})
    env = {"EPSTACK_HOME": str(tmp_path / "opt"), "TRITON_CACHE_DIR": str(named), "TMPDIR": str(tmpdir)}
    said: list[str] = []
    assert install((triton.HOME, tritonserve.HOME), env, said.append) == {
        "TRITON_CACHE_DIR": str(tmpdir / "epstack" / "triton")
    }
    assert len(said) == 1 and sorted(os.listdir(tmpdir / "epstack")) == ["triton"]
    assert os.listdir(tmpdir / "epstack" / "triton") == ["key"]


def test_the_row_from_none_shipped_to_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triton, "installed_version", lambda: "3.8.0")
    cache = tmp_path / "var" / "triton"
    env = {"TRITON_CACHE_DIR": str(cache)}
    [row] = placed_rows(tritonserve, env, ["9.0a"], tmp_path / "opt" / "jit" / tritonserve.TOOL)
    assert (row.component, row.verdict) == ("JIT cache Triton kernels", "skipped")
    assert "--toolchain triton-kernels" in row.fix
    into = shipped(tmp_path, cache)
    [row] = placed_rows(tritonserve, env, ["9.0a"], into)
    assert row.verdict == "ok" and row.detail.endswith(f"the entrypoint copies them into {cache} at start")
    assert row.found.startswith("2 kernels, ") and row.found.endswith(
        "triton 3.8.0, sm 9.0 (NVIDIA H200, 132 SMs)"
    )
    [row] = placed_rows(tritonserve, {"TRITON_CACHE_DIR": str(tmp_path / "other")}, ["9.0a"], into)
    assert row.verdict == "mismatch" and f"TRITON_CACHE_DIR {cache} != {tmp_path}/other" in row.detail
    start(tmp_path, env)
    [row] = placed_rows(tritonserve, env, ["9.0a"], into)
    assert (row.verdict, row.detail) == ("ok", f"in {cache}")
    entry = key_of("fwd")
    (cache / entry / "_fwd_kernel_stage1.ptx").unlink()  # its group file names it: Triton compiles again
    [row] = placed_rows(tritonserve, env, ["9.0a"], into, verify_bytes=False)
    assert row.verdict == "warn" and row.detail.startswith(f"1 of 2 not in {cache}, e.g. {entry}")
    cubin = into / key_of("moe") / "fused_moe_kernel.cubin"
    cubin.chmod(0o644)
    cubin.write_bytes(b"changed")
    [row] = placed_rows(tritonserve, env, ["9.0a"], into)
    assert (
        row.verdict == "mismatch"
        and row.detail == f"1 missing or changed, e.g. {key_of('moe')}/fused_moe_kernel.cubin"
    )


def test_jit_export_and_unpack_on_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = write_cache(tmp_path / "cache")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    monkeypatch.setattr(
        gpuexport, "DEVICE_PROBE", (sys.executable, "-c", f"print({json.dumps(json.dumps(H200))})")
    )
    out = tmp_path / "x.tar.gz"
    assert main(["jit", "export", "--toolchain", "triton-kernels", "--out", str(out)]) == OK
    assert "2 Triton kernels" in capsys.readouterr().err
    digest = out.with_name("x.tar.gz.sha256").read_text().split()[0]
    into = tmp_path / "into"
    assert main(["image", "jit-unpack", str(out), "--sha256", digest, "--into", str(into)]) == OK
    made = tritonserve.read_manifest(into)
    assert made is not None and (made.key.device, made.key.cache_dir) == ("NVIDIA H200", str(cache))
    assert main(["image", "jit-unpack", str(out), "--sha256", digest, "--into", str(into)]) == BAD_INPUT
    assert "already holds Triton kernels; fix:" in capsys.readouterr().err
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "other"))
    assert (
        main(["image", "jit-unpack", str(out), "--sha256", digest, "--into", str(tmp_path / "b")])
        == BAD_INPUT
    )
    err = capsys.readouterr().err
    assert f"TRITON_CACHE_DIR {cache} != {tmp_path}/other" in err and "--toolchain triton-kernels" in err
