"""SGLang's own JIT kernels (`sglang.kernels.jit`), shipped in an image: exported from a GPU run, unpacked by
digest, checked.

SGLang 0.5.23 compiles its small CUDA kernels (qknorm, fused rope, activation, clamp_position, ...) with
ninja at a server's first forward: 36-38 s of the tiny profile's cold start on an H200
(benchmarks/serve/results/cold-start-sampled/, sampled stacks). Its cache (kernels/jit/utils/compile/cache.py)
is content-addressed: $SGLANG_JIT_CACHE_DIR (default ~/.cache/sglang/jit, whatever SGLANG_CACHE_DIR says)
holds <target>/<module>/build-<key>/deps-<key>/ with the module's .so and sgl_deps.json. The build key
covers the module's arguments, its sources, the target (the device's arch), `nvcc --version` and
`c++ --version` whole and the versions of torch, flashinfer-python, apache-tvm-ffi and DeepGEMM; each leaf
is named by the digests of the files its list names, paths anchored at their packages. So a leaf made in
the image, on a GPU of its arch, loads in every container of it, and one made elsewhere is rebuilt, never
loaded.

The kernels depend on the model's shapes, so a serve run makes them (`epstack smoke serve`, any SGLang
start): `epstack jit export --toolchain sglang` packs the published leaves with their key, the kernels
layer unpacks them by sha256 into imagepaths.JIT/sglang_jit, and the entrypoint copies them into the
writable cache at start, each leaf whole or not at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from epstack import imagepaths
from epstack.checkrow import Check
from epstack.cmd import run
from epstack.errors import BadInput, EpstackError
from epstack.jit import (
    export,
    sglang,  # noqa: PLW0406 (this module, as the Placed toolchain its guard row reads: mypy checks it)
)
from epstack.jit.deepep import arch_difference, nvcc_output, toolkit_nvcc
from epstack.jit.deepgemm import nvcc_build
from epstack.jit.install import CacheHome
from epstack.jit.placed import placed_rows
from epstack.jit.shipped import cache_file

NAME = "sglang"
TITLE = "SGLang"
TOOL = "sglang_jit"
AGAIN = "`epstack jit export --toolchain sglang` after a serve run"
SHIPPED = Path(imagepaths.JIT) / TOOL
DEPS = "sgl_deps.json"  # a published leaf's dependency list, written before the leaf is renamed in
# The distributions SGLang's build key names (cache._VERSIONED_PACKAGES), and SGLang itself.
VERSIONED = ("sglang", "torch", "flashinfer-python", "apache-tvm-ffi", "sgl-deep-gemm", "nvidia-mathdx")
# A file of a published leaf: <target>/<module>/build-<16 hex>/deps-<16 hex>/(sgl_deps.json|<module>.so).
_LEAF_FILE = re.compile(
    r"[A-Za-z0-9_]+/(?P<module>[A-Za-z0-9_][A-Za-z0-9_.-]*)/build-[0-9a-f]{16}/deps-[0-9a-f]{16}/"
    r"(?:sgl_deps\.json|(?P=module)\.so)"
)
COLD_S = "36-38 s of the tiny profile's cold start on an H200"
COMPONENT = f"JIT cache {TITLE}"
GUARD_SCOPES: tuple[str, ...] = ("sglang",)
CHECKED_AT_START = True  # where its kernels are: copied into its cache at start, or not


@dataclass(frozen=True, kw_only=True)
class CacheKey:
    """What SGLang's build key covers that an image can name, and the device the kernels were made on."""

    versions: tuple[str, ...]  # `name version` of each of VERSIONED installed
    nvcc: str  # V13.0.88: the build key holds `nvcc --version` whole
    cxx: str  # the host compiler's first --version line: the key holds it whole
    arch: str  # the device's compute capability, "9.0"
    device: str
    sm_count: int


@dataclass(frozen=True, kw_only=True)
class SglangJitCache(export.KernelFiles):
    key: CacheKey


KIND = export.kind(
    tool=TOOL,
    manifest=SglangJitCache,
    name="sglang-jit-cache",
    title="SGLang JIT",
    again=AGAIN,
    file_pattern=_LEAF_FILE,
)


def cache_dir(env: Mapping[str, str]) -> Path:
    """The folder SGLang's JIT writes to: SGLANG_JIT_CACHE_DIR, else ~/.cache/sglang/jit."""
    named = env.get("SGLANG_JIT_CACHE_DIR") or str(Path(env.get("HOME", "~")) / ".cache" / "sglang" / "jit")
    return Path(named).expanduser()


HOME = CacheHome(
    variable="SGLANG_JIT_CACHE_DIR",
    default=cache_dir,
    name=TOOL,
    entries=("*/*/*/*",),  # <target>/<module>/build-<key>/deps-<key>
    what="SGLang's JIT kernels go to",
)


def leaves(root: Path) -> list[Path]:
    """The published leaves under a cache root (or a shipped copy): both files in, never a staging one."""
    found = root.glob("*/*/build-*/deps-*")
    return sorted(
        leaf
        for leaf in found
        if leaf.is_dir()
        and not leaf.is_symlink()
        and (leaf / DEPS).is_file()
        and (leaf / f"{leaf.parent.parent.name}.so").is_file()
    )


def cache_files(root: Path) -> dict[str, bytes]:
    """Every file of the published leaves, as SGLang names them."""
    return export.entry_files(root, leaves(root), KIND)


def pack(root: Path, key: CacheKey) -> tuple[bytes, SglangJitCache]:
    """The export archive (byte-identical for the same kernels) and its manifest."""
    files = cache_files(root)
    if not files:
        raise BadInput(
            f"{root}: no published SGLang JIT kernels (<target>/<module>/build-*/deps-*/) to export; fix: "
            "serve once on this GPU with SGLANG_JIT_CACHE_DIR set to this folder (`epstack smoke serve`)"
        )
    manifest = SglangJitCache(key=key, files=tuple(cache_file(p, d) for p, d in files.items()))
    return export.pack(KIND, manifest, files), manifest


def installed_versions() -> tuple[str, ...]:
    """`name version` of each of VERSIONED installed here."""
    return export.versions_of(VERSIONED)


def host_compiler(env: Mapping[str, str]) -> str:
    """The first line of the host compiler's --version ($CXX, else c++), "" when it does not run."""
    try:
        result = run(env.get("CXX") or "c++", "--version", echo=False, timeout=60)
    except (EpstackError, OSError):
        return ""
    return (result.stdout.strip().splitlines() or [""])[0]


def image_key(env: Mapping[str, str]) -> CacheKey:
    """This install's side of the key, read without a GPU (arch, device and SM count left empty)."""
    nvcc = toolkit_nvcc(env, ())
    return CacheKey(
        versions=installed_versions(),
        nvcc=nvcc_build(nvcc_output(nvcc)),
        cxx=host_compiler(env),
        arch="",
        device="",
        sm_count=0,
    )


def install_differences(key: CacheKey, archs: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """Everything that keeps an export's kernels from loading here (archs: the image's); a field this
    install cannot name is not compared."""
    here = image_key(env)
    found = [arch_difference(key.arch, archs)]
    found += [
        f"{name} {getattr(key, name) or '(none)'} != {getattr(here, name)}"
        for name in ("nvcc", "cxx")
        if getattr(here, name) and getattr(key, name) != getattr(here, name)
    ]
    if here.versions:
        made, now = export.by_name(key.versions), export.by_name(here.versions)
        found += [
            f"{name} {made.get(name, '(none)')} != {now.get(name, '(none)')}"
            for name in VERSIONED
            if made.get(name) != now.get(name)
        ]
    return [d for d in found if d]


def install(manifest: SglangJitCache, files: Mapping[str, bytes], into: Path = SHIPPED) -> None:
    """The kernels into a new folder `into`, readable by every user, their manifest and sums beside."""
    export.install(KIND, manifest, files, into, held="SGLang JIT kernels")


def read_manifest(into: Path = SHIPPED) -> SglangJitCache | None:
    manifest: SglangJitCache | None = export.read_manifest(KIND, into)
    return manifest


def compiled_since(root: Path, manifest: SglangJitCache | None) -> list[str]:
    """The published leaves in a live cache that the shipped manifest does not list: what SGLang compiled."""
    shipped = set(manifest.entries) if manifest else set()
    return [name for leaf in leaves(root) if (name := leaf.relative_to(root).as_posix()) not in shipped]


def placed(cache: Path, entry: str) -> bool:
    leaf = cache / entry
    return (leaf / DEPS).is_file() and (leaf / f"{PurePosixPath(entry).parent.parent.name}.so").is_file()


def made_with(key: CacheKey) -> str:
    return f"{', '.join(key.versions[:2]) or 'no versions'}, nvcc {key.nvcc}"


def guard_rows(env: Mapping[str, str], archs: Sequence[str], *, verify_bytes: bool = True) -> list[Check]:
    """Its shipped kernels' guard row: epstack.jit.placed's, given this module."""
    return placed_rows(sglang, env, archs, verify_bytes=verify_bytes)
