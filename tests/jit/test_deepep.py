"""DeepEP's shipped JIT kernels (epstack.jit.deepep): the export is reproducible, only a verified export
unpacks, a key for another install or arch is named, and the kernels install readable by any user.

The kernels here have the shape of a real H200 export (benchmarks/elastic/results: 13 kernels, 26
files, cache/kernel.<name>.<32 hex>/kernel.cu|kernel.cubin), with bytes made up."""

from __future__ import annotations

import gzip
import hashlib
import importlib
import io
import os
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from epstack.errors import BadInput
from epstack.jit.deepep import (
    KIND,
    TOOL,
    CacheKey,
    KernelCache,
    arch_difference,
    deepep_nvcc,
    image_key,
    install,
    key_differences,
    nvcc_release,
    nvcc_version,
    pack,
    unpack,
)
from epstack.jit.export import MANIFEST_NAME
from epstack.jit.shipped import CacheFile, manifest_beside
from tests.conftest import REPO, write_deepep_manifest, write_dist
from tests.jit import EPSTACK_PATH

H200_MANIFEST = REPO / "benchmarks" / "elastic" / "results" / "deep_ep-kernels.manifest.json"
H200: KernelCache = KIND.schema.read(H200_MANIFEST)
KEY = H200.key
ARCHIVE = Path("kernels.tar.gz")
NVCC_13 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""


# ---- helpers the guard, smoke, command and image tests share ----


def h200_kernels() -> dict[str, bytes]:
    """The real export's 26 paths and sizes, each file's bytes made from its path."""
    return {f.path: (f.path.encode() * (f.bytes // len(f.path) + 1))[: f.bytes] for f in H200.files}


def write_cache(cache_dir: Path, files: Mapping[str, bytes]) -> Path:
    """A DeepEP cache folder holding `files` (relative paths), as its JIT leaves them."""
    for relative, data in files.items():
        (cache_dir / relative).parent.mkdir(parents=True, exist_ok=True)
        (cache_dir / relative).write_bytes(data)
    return cache_dir


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fake_nvcc(folder: Path, release: str) -> Path:
    """An executable that answers `--version` as nvcc <release> does."""
    folder.mkdir(parents=True, exist_ok=True)
    nvcc = folder / "nvcc"
    text = NVCC_13.replace("13.0", release)
    nvcc.write_text(f"#!/bin/sh\ncat <<'EOF'\n{text}EOF\n")
    nvcc.chmod(0o755)
    return nvcc


def fake_install(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, nvcc: str = "13.0"
) -> CacheKey:
    """This Python made an install DeepEP's JIT keys on: a deep_ep package and its dist-info in
    `site`, the image's deep_ep manifest, an NCCL root and an nvcc (EP_JIT_NVCC_COMPILER); the key an
    export made here on an H200 carries."""
    (site / "deep_ep").mkdir()
    (site / "deep_ep" / "__init__.py").write_text("")
    write_dist(site, "deep_ep", KEY.deep_ep_version, ("deep_ep/__init__.py",))
    importlib.invalidate_caches()
    monkeypatch.setenv(
        "EPSTACK_DEEPEP_MANIFEST",
        str(write_deepep_manifest(tmp_path / "deepep-source.json", commit=KEY.deep_ep_commit)),
    )
    monkeypatch.delenv("NCCL_DIR", raising=False)
    monkeypatch.setenv("EP_NCCL_ROOT_DIR", str(tmp_path / "nccl"))
    monkeypatch.setenv("EP_JIT_NVCC_COMPILER", str(fake_nvcc(tmp_path / "cuda" / "bin", nvcc)))
    return replace(KEY, library_root=str(site / "deep_ep"), nccl_root=str(tmp_path / "nccl"))


def tar_gz(members: Mapping[str, bytes | tarfile.TarInfo]) -> bytes:
    """A tar.gz of regular files (bytes) and of members given as they are (links, folders)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, member in members.items():
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                info = tarfile.TarInfo(name)
                info.size = len(member)
                tar.addfile(info, io.BytesIO(member))
    return gzip.compress(raw.getvalue(), mtime=0)


def export_of(files: Mapping[str, bytes], key: CacheKey = KEY) -> tuple[bytes, KernelCache]:
    """pack() of a cache folder holding `files`."""
    with tempfile.TemporaryDirectory() as folder:
        return pack(write_cache(Path(folder), files), key)


# ---- the committed H200 record ----


def test_the_committed_h200_export_reads_with_this_schema() -> None:
    assert (H200.kernels, len(H200.files)) == (13, 26)
    assert {Path(f.path).name for f in H200.files} == {"kernel.cu", "kernel.cubin"}
    assert (KEY.arch, KEY.sm_count, KEY.nvcc) == ("9.0", 132, "13.0")


# ---- pack ----


def test_pack_is_byte_identical_for_the_same_kernels_and_ignores_tmp_and_links(tmp_path: Path) -> None:
    kernels = h200_kernels()
    first = write_cache(tmp_path / "a", kernels)
    second = write_cache(tmp_path / "b", dict(reversed(kernels.items())))
    for file in second.rglob("*"):
        os.utime(file, (1, 1))
        if file.is_file():
            file.chmod(0o600)
    # what is not a finished kernel, nor a name unpack takes: DeepEP's tmp/, links, a file beside the
    # kernel folders, a folder without a hash, a hidden file
    not_kernels = ("tmp/kernel.dispatch.half/kernel.cubin", "cache/stray", "cache/kernel.x.NOHASH/kernel.cu")
    write_cache(second, dict.fromkeys(not_kernels, b"partial"))
    (second / min(kernels)).with_name(".kernel.cubin.swp").write_bytes(b"partial")
    kernel_dir = min(Path(p).parent for p in kernels)
    (second / "cache" / f"kernel.linked.{'e' * 32}").symlink_to(first / kernel_dir)
    (second / kernel_dir / "kernel.ptx").symlink_to(first / kernel_dir / "kernel.cu")

    data, manifest = pack(first, KEY)
    assert pack(second, KEY) == (data, manifest)
    assert [f.path for f in manifest.files] == sorted(kernels)
    assert (manifest.kernels, manifest.bytes) == (13, sum(len(d) for d in kernels.values()))
    assert unpack(ARCHIVE, data, sha256(data)) == (manifest, kernels)


KERNEL_NAMES = st.from_regex(r"[A-Za-z0-9_]{1,24}", fullmatch=True)
HASHES = st.from_regex(r"[0-9a-f]{32}", fullmatch=True)
FILE_NAMES = st.sampled_from(["kernel.cu", "kernel.cubin"])
CACHES = st.dictionaries(
    st.builds(lambda n, h, f: f"cache/kernel.{n}.{h}/{f}", KERNEL_NAMES, HASHES, FILE_NAMES),
    st.binary(max_size=512),
    min_size=1,
    max_size=8,
)


@given(files=CACHES)
def test_any_cache_packs_reproducibly_and_unpacks_to_the_same_files(files: dict[str, bytes]) -> None:
    data, manifest = export_of(files)
    assert export_of(dict(reversed(files.items())))[0] == data
    assert unpack(ARCHIVE, data, sha256(data)) == (manifest, files)


def test_pack_of_a_cache_with_no_kernels_is_bad_input(tmp_path: Path) -> None:
    write_cache(tmp_path, {"tmp/kernel.dispatch.x/kernel.cubin": b"partial"})
    with pytest.raises(BadInput, match=rf"^{tmp_path}: no compiled DeepEP kernels .*; fix: "):
        pack(tmp_path, KEY)


# ---- unpack ----


def _manifest(files: Mapping[str, bytes]) -> bytes:
    listed = tuple(CacheFile(path=p, sha256=sha256(d), bytes=len(d)) for p, d in files.items())
    return KIND.schema.dumps(KernelCache(key=KEY, files=listed)).encode()


def _link(name: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, "/etc/shadow" if kind != tarfile.DIRTYPE else ""
    return info


KERNEL = f"cache/kernel.dispatch.{'a' * 32}/kernel.cubin"
GOOD = {KERNEL: b"\x7fELF cubin"}


def _refusals() -> Iterator[tuple[str, bytes, str]]:
    """(case, archive, the words its refusal holds), each a tar.gz that is not a good export."""
    manifest = _manifest(GOOD)
    extra = f"{TOOL}/cache/kernel.extra.{'b' * 32}/kernel.cubin"
    yield (
        "unlisted",
        tar_gz({MANIFEST_NAME: manifest, f"{TOOL}/{KERNEL}": GOOD[KERNEL], extra: b"x"}),
        "lists",
    )
    yield "changed", tar_gz({MANIFEST_NAME: manifest, f"{TOOL}/{KERNEL}": b"\x7fELF other"}), "differs"
    resized = manifest.replace(f'"bytes": {len(GOOD[KERNEL])}'.encode(), b'"bytes": 1')
    yield "another size", tar_gz({MANIFEST_NAME: resized, f"{TOOL}/{KERNEL}": GOOD[KERNEL]}), "differs"
    yield "missing", tar_gz({MANIFEST_NAME: manifest}), "not in the archive"
    for kind in (tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.DIRTYPE):
        member = _link(f"{TOOL}/{KERNEL}", kind)
        yield f"type {kind!r}", tar_gz({MANIFEST_NAME: manifest, member.name: member}), "not a regular file"
    yield "no manifest", tar_gz({f"{TOOL}/{KERNEL}": b"\x7fELF cubin"}), f"no {MANIFEST_NAME}"
    for schema in ("kernel-cache/2", "deepep-manifest/1"):
        other = manifest.replace(b'"kernel-cache/1"', f'"{schema}"'.encode())
        yield schema, tar_gz({MANIFEST_NAME: other, f"{TOOL}/{KERNEL}": b"\x7fELF cubin"}), "unknown"
    yield "not json", tar_gz({MANIFEST_NAME: b"{", f"{TOOL}/{KERNEL}": b"\x7fELF cubin"}), "not JSON"
    plain = io.BytesIO()
    with tarfile.open(fileobj=plain, mode="w") as tar:
        tar.addfile(tarfile.TarInfo(MANIFEST_NAME))
    yield "plain tar", plain.getvalue(), "not a JIT cache export"
    yield "text", b"#!/bin/sh\nrm -rf /\n", "not a JIT cache export"
    yield "truncated", tar_gz({MANIFEST_NAME: manifest})[:40], "not a JIT cache export"
    for outside in ("../x", "cache/evil", "/etc/passwd", f"cache/kernel.x.{'a' * 32}/..",
                    f"cache/kernel.x.{'a' * 32}/sub/kernel.cubin", "cache/kernel.x.NOTHEX/kernel.cubin",
                    f"tmp/kernel.x.{'a' * 32}/kernel.cubin"):  # fmt: skip
        files = {outside: b"payload"}
        yield outside, tar_gz({MANIFEST_NAME: _manifest(files), f"{TOOL}/{outside}": b"payload"}), "lists"


REFUSALS = list(_refusals())


@pytest.mark.parametrize(("data", "words"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_unpack_refuses_what_is_not_a_good_export_in_one_line(data: bytes, words: str) -> None:
    with pytest.raises(BadInput) as refused:
        unpack(ARCHIVE, data, sha256(data))
    message = str(refused.value)
    assert message.startswith(f"{ARCHIVE}") and words in message and "; fix: " in message
    assert "\n" not in message


def test_unpack_refuses_another_sha256_before_reading_it() -> None:
    data, _ = export_of(GOOD)
    with pytest.raises(
        BadInput, match=rf"^{ARCHIVE}: sha256 {sha256(data)}, not the {'0' * 64} asked for; fix"
    ):
        unpack(ARCHIVE, data, "0" * 64)


def test_unpack_refuses_files_that_pass_the_cap_together_naming_the_one_that_crosses_it() -> None:
    """Five files of 15 MiB of zeros (a 75 KB export), each under the cap on one file: the fifth ends
    past the cap on the whole tar, and is refused by its header."""
    names = [f"{TOOL}/cache/kernel.k{i}.{'a' * 32}/kernel.cubin" for i in range(5)]
    data = tar_gz({MANIFEST_NAME: b"{}", **dict.fromkeys(names, bytes(15 << 20))})
    with pytest.raises(BadInput) as refused:
        unpack(ARCHIVE, data, sha256(data))
    assert str(refused.value) == (
        f"{ARCHIVE}: {names[4]!r} ends past byte 67,108,864 of its tar, the most an export unpacks to; "
        "fix: export it again"
    )


@given(
    name=st.text(min_size=1).filter(
        lambda n: "\0" not in n and n.rstrip("/") not in (MANIFEST_NAME, f"{TOOL}/{KERNEL}")
    )
)
@example(name=f"{TOOL}/{KERNEL}\nerror: all kernels verified")
def test_unpack_refuses_any_member_the_manifest_does_not_list(name: str) -> None:
    data = tar_gz({MANIFEST_NAME: _manifest(GOOD), f"{TOOL}/{KERNEL}": GOOD[KERNEL], name: b"x"})
    with pytest.raises(BadInput, match="is not a file its manifest lists") as refused:
        unpack(ARCHIVE, data, sha256(data))
    assert "\n" not in str(refused.value)


@given(offset=st.integers(min_value=0), bit=st.integers(min_value=0, max_value=7))
def test_a_damaged_export_is_refused_or_exactly_what_its_manifest_lists(offset: int, bit: int) -> None:
    """A flipped bit, the digest recomputed (as if the exporter wrote it): BadInput, never another error,
    or files that are exactly the manifest's (tar stops before gzip's CRC, so a flip can decode)."""
    good, _ = export_of(GOOD)
    damaged = bytearray(good)
    damaged[offset % len(damaged)] ^= 1 << bit
    try:
        manifest, files = unpack(ARCHIVE, bytes(damaged), sha256(bytes(damaged)))
    except BadInput as refused:
        assert str(refused).startswith(str(ARCHIVE))
        return
    assert {f.path: (f.sha256, f.bytes) for f in manifest.files} == {
        path: (sha256(data), len(data)) for path, data in files.items()
    }


# ---- the key ----


def test_key_fields_the_image_leaves_empty_are_not_compared() -> None:
    blank = CacheKey(deep_ep_version="", deep_ep_commit="", nvcc="", arch="", device="", sm_count=0,
                     library_root="", nccl_root="")  # fmt: skip
    assert key_differences(KEY, blank) == []
    assert key_differences(KEY, KEY) == []
    assert key_differences(KEY, replace(KEY, device="NVIDIA B200", sm_count=148)) == []


@pytest.mark.parametrize(
    "field", ["deep_ep_commit", "deep_ep_version", "nvcc", "arch", "library_root", "nccl_root"]
)
def test_each_differing_key_field_is_named(field: str) -> None:
    other: dict[str, Any] = {field: "other"}
    blank: dict[str, Any] = {field: ""}
    here = replace(KEY, **other)
    assert key_differences(KEY, here) == [f"{field} {getattr(KEY, field)} != other"]
    assert key_differences(replace(KEY, **blank), here) == [f"{field} (none) != other"]


def test_every_differing_field_is_named_at_once() -> None:
    here = replace(KEY, nvcc="12.9", deep_ep_commit="e" * 40)
    assert key_differences(KEY, here) == [
        f"deep_ep_commit {KEY.deep_ep_commit} != {'e' * 40}",
        "nvcc 13.0 != 12.9",
    ]


@pytest.mark.parametrize(
    ("arch", "archs", "difference"),
    [
        ("9.0", ["9.0a"], ""),
        ("9.0", ["9.0"], ""),
        ("10.0", ["9.0a", "10.0f"], ""),
        ("10.0", ["9.0a"], "arch 10.0 not in 9.0a"),
        ("9.0", ["8.0", "10.0a"], "arch 9.0 not in 8.0 10.0a"),
        ("12.0", [], ""),
    ],
)
def test_arch_difference(arch: str, archs: list[str], difference: str) -> None:
    assert arch_difference(arch, archs) == difference


def test_image_key_reads_this_install(site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a GPU: the device half empty, every other field from the install itself."""
    made_here = fake_install(site, tmp_path, monkeypatch, nvcc="12.9")
    assert image_key(os.environ) == replace(made_here, nvcc="12.9", arch="", device="", sm_count=0)


# ---- install ----


def test_install_is_readable_by_any_user_whatever_the_umask(tmp_path: Path) -> None:
    files = h200_kernels()
    data, _ = export_of(files)
    manifest, unpacked = unpack(ARCHIVE, data, sha256(data))
    into = tmp_path / "jit" / TOOL
    previous = os.umask(0o077)
    try:
        install(manifest, unpacked, into)
    finally:
        os.umask(previous)
    modes = {p.relative_to(into).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in into.rglob("*")}
    assert {p: m for p, m in modes.items() if p in files} == dict.fromkeys(files, 0o644)
    assert set(modes.values()) == {0o644, 0o755} and stat.S_IMODE(into.stat().st_mode) == 0o755
    assert {p for p, m in modes.items() if m == 0o755} == {Path(p).parent.as_posix() for p in files} | {
        "cache"
    }
    beside = manifest_beside(into)
    assert beside == tmp_path / "jit" / f"{TOOL}.json" and stat.S_IMODE(beside.stat().st_mode) == 0o644
    assert KIND.schema.read(beside) == manifest
    assert {p: (into / p).read_bytes() for p in files} == files


def test_install_refuses_a_folder_that_exists(tmp_path: Path) -> None:
    into = tmp_path / TOOL
    into.mkdir()
    data, _ = export_of(GOOD)
    manifest, files = unpack(ARCHIVE, data, sha256(data))
    with pytest.raises(BadInput, match=rf"^{into}: already holds kernels; fix: "):
        install(manifest, files, into)
    assert list(into.iterdir()) == [] and not manifest_beside(into).exists()


# ---- the entrypoint's copy (scripts/image/jit-caches.sh) ----


@pytest.mark.parametrize(
    ("variable", "shipped", "fallback"),
    [
        ("EP_JIT_CACHE_DIR", None, "deep_ep"),
        ("FLASHINFER_WORKSPACE_BASE", "flashinfer/.cache", "flashinfer"),
        ("TRITON_CACHE_DIR", "triton", "triton"),
    ],
)
def test_the_entrypoint_stops_in_one_line_where_neither_a_cache_nor_tmpdir_can_be_written(
    tmp_path: Path, variable: str, shipped: str | None, fallback: str
) -> None:
    """Folders under a file cannot be made by any user, root included (as on a read-only root)."""
    (tmp_path / "file").write_text("")
    home, cache, tmpdir = tmp_path / "opt", tmp_path / "file" / "cache", tmp_path / "file" / "tmp"
    if shipped:
        (home / "jit" / shipped).mkdir(parents=True)
    env = {"PATH": EPSTACK_PATH, "HOME": str(tmp_path / "home"), "EPSTACK_HOME": str(home),
           "EPSTACK_GUARD": "off", "TMPDIR": str(tmpdir), variable: str(cache)}  # fmt: skip
    entrypoint = REPO / "scripts" / "image" / "entrypoint.sh"
    result = subprocess.run(
        [entrypoint, "echo", "started"], env=env, capture_output=True, text=True, check=False
    )
    assert (result.returncode, result.stdout) == (3, "")
    assert result.stderr == (
        f"epstack: {variable}={cache} cannot be written (a read-only root?), nor TMPDIR={tmpdir} "
        f"({tmpdir}/epstack/{fallback}); fix: set TMPDIR or {variable} to a writable folder\n"
    )


# ---- the nvcc DeepEP runs ----


@pytest.fixture
def nvcc_on_path(tmp_path: Path) -> Path:
    return fake_nvcc(tmp_path / "path-cuda" / "bin", "12.8")


@pytest.mark.parametrize(
    ("set_", "chosen"),
    [
        ({"EP_JIT_NVCC_COMPILER", "CUDA_HOME", "CUDA_PATH", "PATH"}, "/opt/nvcc-override"),
        ({"CUDA_HOME", "CUDA_PATH", "PATH"}, "/opt/cuda-home/bin/nvcc"),
        ({"CUDA_PATH", "PATH"}, "/opt/cuda-path/bin/nvcc"),
        ({"PATH"}, "{path}"),
        (set(), "/usr/local/cuda/bin/nvcc"),
    ],
)
def test_deepep_nvcc_follows_deepeps_order(nvcc_on_path: Path, set_: set[str], chosen: str) -> None:
    every = {
        "EP_JIT_NVCC_COMPILER": "/opt/nvcc-override",
        "CUDA_HOME": "/opt/cuda-home",
        "CUDA_PATH": "/opt/cuda-path",
        "PATH": f"/nonexistent:{nvcc_on_path.parent}",
    }
    env = {name: value for name, value in every.items() if name in set_}
    env.setdefault("PATH", str(nvcc_on_path.parent.parent))  # a folder without nvcc
    assert deepep_nvcc(env) == chosen.format(path=nvcc_on_path)


def test_an_empty_variable_is_unset_for_deepep_nvcc(nvcc_on_path: Path) -> None:
    env = {"EP_JIT_NVCC_COMPILER": "", "CUDA_HOME": "", "CUDA_PATH": "", "PATH": str(nvcc_on_path.parent)}
    assert deepep_nvcc(env) == str(nvcc_on_path)


@pytest.mark.parametrize(
    ("text", "release"),
    [
        (NVCC_13, "13.0"),
        (NVCC_13.replace("release 13.0, V13.0.88", "release 12.8, V12.8.93"), "12.8"),
        ("nvcc fatal : Unknown option '--version'\n", ""),
        ("", ""),
    ],
)
def test_nvcc_release(text: str, release: str) -> None:
    assert nvcc_release(text) == release


def test_nvcc_version_runs_deepeps_nvcc_and_is_empty_when_it_cannot(tmp_path: Path) -> None:
    nvcc = fake_nvcc(tmp_path / "bin", "12.9")
    assert nvcc_version({"EP_JIT_NVCC_COMPILER": str(nvcc)}) == "12.9"
    for broken in (tmp_path / "absent", tmp_path / "bin"):  # no such program; a folder, not a program
        assert nvcc_version({"EP_JIT_NVCC_COMPILER": str(broken)}) == ""
