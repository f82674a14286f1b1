"""DeepGEMM's JIT kernels, shipped in an image: exported from a GPU run, unpacked by digest, checked.

SGLang's deep_gemm MoE runner (the one DeepEP V2 needs) compiles DeepGEMM's grouped GEMMs for every M
it may meet before it serves ("DeepGEMM JIT Pre-Compile session"; 125 s of a 287 s cold start of the
tiny profile on an H200). DeepGEMM's JIT (deep_jit, cache/disk.hpp) keeps each kernel in
<root>/cache/<tag>.<digest>/ (kernel.cu, kernel.cubin, meta.json, and `.committed` once whole), the
digest covering CUTLASS's version, the full `nvcc --version`, the flags (the arch among them) and the
code, which holds the device's SM count: a kernel for another GPU, compiler or DeepGEMM compiles again,
never loads. SGLang sets DG_JIT_CACHE_DIR from SGLANG_DG_CACHE_DIR ($SGLANG_CACHE_DIR/deep_gemm by
default), which the image points at imagepaths.JIT_CACHES/deep_gemm.

So the kernels are made on a GPU by a serve run (`epstack smoke serve`, any SGLang start with the
deep_gemm runner): `epstack jit export --toolchain deepgemm` packs the committed ones with their key,
the kernels layer unpacks them by sha256 into imagepaths.JIT/deep_gemm, and the entrypoint copies them
into the writable cache at start (epstack.jit.install), each entry whole or not at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath

from epstack import imagepaths
from epstack.checkrow import Check
from epstack.errors import BadInput
from epstack.jit import (
    deepgemm,  # noqa: PLW0406 (this module, as the Placed toolchain its guard row reads: mypy checks it)
    export,
)
from epstack.jit.deepep import arch_difference, nvcc_output, toolkit_nvcc
from epstack.jit.install import CacheHome
from epstack.jit.placed import placed_rows
from epstack.jit.shipped import cache_file

NAME = "deepgemm"
TITLE = "DeepGEMM"
TOOL = "deep_gemm"
AGAIN = "`epstack jit export --toolchain deepgemm` after a serve run"
SHIPPED = Path(imagepaths.JIT) / TOOL
DISTRIBUTIONS = ("sgl-deep-gemm", "deep-gemm")  # SGLang's build of DeepGEMM, or DeepSeek's own
COMMITTED = ".committed"  # deep_jit's marker of a whole entry: the only ones it loads
# A file of a committed entry, as deep_jit names them (entry: <tag>.<digest>, tag [A-Za-z0-9_]).
_ENTRY_FILE = re.compile(
    r"cache/[A-Za-z0-9_]+\.[0-9a-f]+/(?:kernel\.(?:cu|cubin|ptx|sass)|meta\.json|\.committed)"
)
_NVCC_BUILD = re.compile(r"release [\d.]+, V([\d.]+)")
COLD_S = "125 s of the tiny profile's 287 s cold start on an H200"
COMPONENT = f"JIT cache {TITLE}"
GUARD_SCOPES: tuple[str, ...] = ("sglang",)
CHECKED_AT_START = True  # where its kernels are: copied into its cache at start, or not


@dataclass(frozen=True, kw_only=True)
class CacheKey:
    """What DeepGEMM's digests cover that an image can name, and the device they were made on."""

    deep_gemm: str  # the distribution's version, e.g. 0.2.3.post2
    nvcc: str  # nvcc's full version (V13.0.88): deep_jit hashes `nvcc --version` whole
    arch: str  # the device's compute capability, "9.0"
    device: str
    sm_count: int  # in every kernel's code


@dataclass(frozen=True, kw_only=True)
class DeepGemmCache(export.KernelFiles):
    key: CacheKey


KIND = export.kind(
    tool=TOOL,
    manifest=DeepGemmCache,
    name="deepgemm-cache",
    title="DeepGEMM",
    again=AGAIN,
    file_pattern=_ENTRY_FILE,
)


def cache_dir(env: Mapping[str, str]) -> Path:
    """The folder SGLang's DeepGEMM writes to: SGLANG_DG_CACHE_DIR (it overrides DG_JIT_CACHE_DIR),
    else $SGLANG_CACHE_DIR/deep_gemm, else ~/.cache/sglang/deep_gemm; the first of a list."""
    named = env.get("SGLANG_DG_CACHE_DIR")
    if not named:
        base = env.get("SGLANG_CACHE_DIR") or str(
            Path(env.get("HOME", "~")).expanduser() / ".cache" / "sglang"
        )
        named = str(Path(base).expanduser() / TOOL)
    return Path(named.split(":", 1)[0])


HOME = CacheHome(
    variable="SGLANG_DG_CACHE_DIR",
    default=cache_dir,
    name=TOOL,
    entries=("cache/*.*",),  # cache/<tag>.<digest>
    what="DeepGEMM's kernels go to",
)


def committed_entries(root: Path) -> list[Path]:
    """The whole entries under a cache root (or a shipped copy): cache/<tag>.<digest>/ with the marker."""
    found = (root / "cache").glob("*.*")
    return sorted(p for p in found if p.is_dir() and not p.is_symlink() and (p / COMMITTED).is_file())


def cache_files(root: Path) -> dict[str, bytes]:
    """Every file of the committed entries, as deep_jit names them (never its tmp/ or SGLang's locks/)."""
    return export.entry_files(root, committed_entries(root), KIND)


def pack(root: Path, key: CacheKey) -> tuple[bytes, DeepGemmCache]:
    """The export archive (byte-identical for the same kernels) and its manifest."""
    files = cache_files(root)
    if not files:
        raise BadInput(
            f"{root}: no committed DeepGEMM kernels (cache/<tag>.<digest>/.committed) to export; fix: "
            "serve once on this GPU with SGLANG_DG_CACHE_DIR set to this folder (`epstack smoke serve`)"
        )
    manifest = DeepGemmCache(key=key, files=tuple(cache_file(p, d) for p, d in files.items()))
    return export.pack(KIND, manifest, files), manifest


def installed_version() -> str:
    """DeepGEMM's distribution version here ("" when none is installed)."""
    for name in DISTRIBUTIONS:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return ""


def nvcc_build(text: str) -> str:
    """`V13.0.88` of `nvcc --version`'s output ("" when absent)."""
    found = _NVCC_BUILD.search(text)
    return f"V{found[1]}" if found else ""


def image_key(env: Mapping[str, str]) -> CacheKey:
    """This install's side of the key, read without a GPU (arch, device and SM count left empty)."""
    nvcc = toolkit_nvcc(env, ("DG_JIT_NVCC_COMPILER", "DJ_JIT_NVCC_COMPILER"))
    return CacheKey(
        deep_gemm=installed_version(), nvcc=nvcc_build(nvcc_output(nvcc)), arch="", device="", sm_count=0
    )


def install_differences(key: CacheKey, archs: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """Everything that keeps an export's kernels from loading here (archs: the image's); a field this
    install cannot name is not compared."""
    here = image_key(env)
    found = [arch_difference(key.arch, archs)]
    found += [
        f"{name} {getattr(key, name) or '(none)'} != {getattr(here, name)}"
        for name in ("deep_gemm", "nvcc")
        if getattr(here, name) and getattr(key, name) != getattr(here, name)
    ]
    return [d for d in found if d]


def install(manifest: DeepGemmCache, files: Mapping[str, bytes], into: Path = SHIPPED) -> None:
    """The kernels into a new folder `into`, readable by every user, their manifest and sums beside."""
    export.install(KIND, manifest, files, into, held="DeepGEMM kernels")


def read_manifest(into: Path = SHIPPED) -> DeepGemmCache | None:
    manifest: DeepGemmCache | None = export.read_manifest(KIND, into)
    return manifest


def compiled_since(root: Path, manifest: DeepGemmCache | None) -> list[str]:
    """The committed entries in a live cache that the shipped manifest does not list: what DeepGEMM
    compiled there."""
    shipped = {PurePosixPath(f.path).parent.name for f in manifest.files} if manifest else set()
    return [entry.name for entry in committed_entries(root) if entry.name not in shipped]


def placed(cache: Path, entry: str) -> bool:
    return (cache / entry / COMMITTED).is_file()


def made_with(key: CacheKey) -> str:
    return f"deep_gemm {key.deep_gemm}, nvcc {key.nvcc}"


def guard_rows(env: Mapping[str, str], archs: Sequence[str], *, verify_bytes: bool = True) -> list[Check]:
    """Its shipped kernels' guard row: epstack.jit.placed's, given this module."""
    return placed_rows(deepgemm, env, archs, verify_bytes=verify_bytes)
