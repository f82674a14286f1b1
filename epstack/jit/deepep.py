"""DeepEP's JIT kernels, shipped in an image: exported from a GPU run, unpacked by digest, checked.

DeepEP V2 compiles each kernel at first use (3.6-6.1 s each on an H200) into $EP_JIT_CACHE_DIR, as
cache/kernel.<name>.<hash>/ where the hash covers the kernel's code, nvcc's major.minor, the arch and
the include paths of deep_ep and NCCL (csrc/jit/compiler.hpp). The code holds the device's SM count
(csrc/jit/device_runtime.hpp), so the kernels are made on a GPU: `epstack smoke elastic
--export-jit-cache FILE` packs what the smoke compiled with a manifest of that key (`pack`); a layer
over the sglang image unpacks it, verified by its sha256, into imagepaths.JIT (`unpack`); the
entrypoint copies it into the writable cache at start (epstack.jit.install). A kernel for
another arch, compiler or install has another hash: it is compiled, never loaded.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from epstack import imagepaths
from epstack.checkrow import Check
from epstack.cmd import run
from epstack.deepepmanifest import DEEPEP_MANIFEST, manifest_path
from epstack.errors import BadInput, EpstackError
from epstack.jit import export
from epstack.jit.install import CacheHome
from epstack.jit.shipped import cache_file, changed_files, manifest_beside, none_shipped

NAME = "deepep"
TITLE = "DeepEP"
TOOL = "deep_ep"
AGAIN = "`epstack smoke elastic --export-jit-cache FILE`"
SHIPPED = Path(imagepaths.JIT) / TOOL  # the kernels, as DeepEP lays them out under its cache dir
COMPONENT = "JIT cache DeepEP"
GUARD_SCOPES: tuple[str, ...] = ("sglang", "vllm")
# Its row holds nothing that changes after the build; the start checks its writable cache instead
# (epstack.guard.deepep.check_jit_cache).
CHECKED_AT_START = False
FIX_EXPORT = (
    "on a GPU, `epstack smoke elastic --export-jit-cache FILE` in this image, then "
    "`epstack jit layer --image IMAGE --export FILE`"
)
# A kernel file as DeepEP names it, a plain name in cache/kernel.<name>.<hash>/ (never "..").
_KERNEL_FILE = re.compile(r"cache/kernel\.[A-Za-z0-9_]+\.[0-9a-f]+/[A-Za-z0-9_][A-Za-z0-9_.-]*")
_NVCC_RELEASE = re.compile(r"release (\d+\.\d+)")


@dataclass(frozen=True, kw_only=True)
class CacheKey:
    """What DeepEP puts in a kernel's hash, and what the kernels were compiled for."""

    deep_ep_version: str
    deep_ep_commit: str  # from the image's deep_ep manifest; "" on a host without one
    nvcc: str  # major.minor: DeepEP's compiler signature is NVCC<major>.<minor>
    arch: str  # the device's compute capability, "9.0"
    device: str
    sm_count: int
    library_root: str  # deep_ep's package folder: its include/ is in every kernel's flags
    nccl_root: str  # NCCL's root: its include/ too


@dataclass(frozen=True, kw_only=True)
class KernelCache(export.KernelFiles):
    key: CacheKey


KIND = export.kind(
    tool=TOOL,
    manifest=KernelCache,
    name="kernel-cache",
    title="DeepEP",
    again=AGAIN,
    file_pattern=_KERNEL_FILE,
)


def cache_dir(env: Mapping[str, str]) -> Path:
    """DeepEP's cache folder: $EP_JIT_CACHE_DIR, else ~/.deep_ep (csrc/jit/compiler.hpp)."""
    return Path(env.get("EP_JIT_CACHE_DIR") or Path(env.get("HOME", "~")).expanduser() / ".deep_ep")


HOME = CacheHome(
    variable="EP_JIT_CACHE_DIR",
    default=cache_dir,
    name=TOOL,
    entries=("cache/kernel.*",),
    what="DeepEP's kernels compile into",
    always=True,  # DeepEP compiles into it (and its tmp/) whether or not kernels are shipped
)


def cache_files(cache_dir: Path) -> dict[str, bytes]:
    """The finished kernels under a DeepEP cache folder (cache/kernel.<name>.<hash>/*; never its
    tmp/): what unpack accepts."""
    kernels = sorted((cache_dir / "cache").glob("kernel.*"))
    return export.entry_files(cache_dir, (k for k in kernels if k.is_dir() and not k.is_symlink()), KIND)


def pack(cache_dir: Path, key: CacheKey) -> tuple[bytes, KernelCache]:
    """The export archive (tar.gz, byte-identical for the same kernels) and its manifest."""
    files = cache_files(cache_dir)
    if not files:
        raise BadInput(
            f"{cache_dir}: no compiled DeepEP kernels (cache/kernel.*) to export; fix: run the "
            "smoke with EP_JIT_CACHE_DIR set to this folder"
        )
    manifest = KernelCache(key=key, files=tuple(cache_file(p, d) for p, d in files.items()))
    return export.pack(KIND, manifest, files), manifest


def unpack(archive: Path, data: bytes, sha256: str) -> tuple[KernelCache, dict[str, bytes]]:
    """The manifest and kernels of a DeepEP export whose sha256 is `sha256` (epstack.jit.export)."""
    _, manifest, files = export.unpack(archive, data, sha256, (KIND,))
    return manifest, files


def nvcc_release(text: str) -> str:
    """`release 13.0` of `nvcc --version`'s output, as major.minor ("" when absent)."""
    found = _NVCC_RELEASE.search(text)
    return found[1] if found else ""


def installed_roots() -> tuple[str, str]:
    """deep_ep's package folder and NCCL's root as this Python finds them (no import of either), as
    DeepEP's init_jit passes them to its compiler; EP_NCCL_ROOT_DIR/NCCL_DIR win as they do there."""
    deep_ep = importlib.util.find_spec("deep_ep")
    library_root = next(iter(deep_ep.submodule_search_locations or []), "") if deep_ep else ""
    for variable in ("EP_NCCL_ROOT_DIR", "NCCL_DIR"):
        if variable in os.environ:
            return library_root, os.environ[variable]
    nccl = importlib.util.find_spec("nvidia.nccl") if importlib.util.find_spec("nvidia") else None
    return library_root, next(iter(nccl.submodule_search_locations or []), "") if nccl else ""


def key_differences(key: CacheKey, here: CacheKey) -> list[str]:
    """What in an export's key differs from this image's, each as `field export != here`; a field
    `here` leaves empty is not compared (what a build without a GPU cannot know)."""
    fields = ("deep_ep_commit", "deep_ep_version", "nvcc", "arch", "library_root", "nccl_root")
    return [
        f"{name} {getattr(key, name) or '(none)'} != {getattr(here, name)}"
        for name in fields
        if getattr(here, name) and getattr(key, name) != getattr(here, name)
    ]


def toolkit_nvcc(env: Mapping[str, str], overrides: Sequence[str]) -> str:
    """The nvcc a JIT runs: the first of `overrides` set, else <CUDA home>/bin/nvcc with the CUDA home
    DeepEP and DeepGEMM find (CUDA_HOME, CUDA_PATH, nvcc on PATH, /usr/local/cuda)."""
    named = next((env[name] for name in overrides if env.get(name)), "")
    if named:
        return named
    home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    if not home:
        on_path = shutil.which("nvcc", path=env.get("PATH"))
        home = str(Path(on_path).parent.parent) if on_path else "/usr/local/cuda"
    return str(Path(home) / "bin" / "nvcc")


def deepep_nvcc(env: Mapping[str, str]) -> str:
    """The nvcc DeepEP's JIT runs (EP_JIT_NVCC_COMPILER wins, as in deep_ep.find_cuda_home's caller)."""
    return toolkit_nvcc(env, ("EP_JIT_NVCC_COMPILER",))


def nvcc_output(nvcc: str) -> str:
    """`nvcc --version`'s output ("" when it does not run)."""
    try:
        return run(nvcc, "--version", echo=False, timeout=60).stdout
    except (EpstackError, OSError):  # not found, timed out; not a program (a folder, no x bit)
        return ""


def nvcc_version(env: Mapping[str, str]) -> str:
    """DeepEP's nvcc's major.minor ("" when it does not run)."""
    return nvcc_release(nvcc_output(deepep_nvcc(env)))


def deep_ep_commit() -> str:
    """The commit the image's deep_ep manifest records ("" without one)."""
    path = manifest_path()
    return DEEPEP_MANIFEST.read(path).commit if path.is_file() else ""


def image_key(env: Mapping[str, str]) -> CacheKey:
    """This install's side of the key, read without a GPU (arch, device and SM count left empty)."""
    library_root, nccl_root = installed_roots()
    try:
        version = metadata.version("deep_ep")
    except metadata.PackageNotFoundError:
        version = ""
    return CacheKey(
        deep_ep_version=version,
        deep_ep_commit=deep_ep_commit(),
        nvcc=nvcc_version(env),
        arch="",
        device="",
        sm_count=0,
        library_root=library_root,
        nccl_root=nccl_root,
    )


def arch_difference(arch: str, archs: Sequence[str]) -> str:
    """`arch 10.0 not in 9.0a` when the kernels' device `arch` is none of the image's archs ("" otherwise)."""
    families = {name.rstrip("af") for name in archs}
    if not families or arch in families:
        return ""
    return f"arch {arch} not in {' '.join(archs)}"


def install(manifest: KernelCache, files: Mapping[str, bytes], into: Path) -> None:
    """The kernels into a new folder `into`, readable by every user, their manifest beside it."""
    export.install(KIND, manifest, files, into, held="kernels")


def install_differences(key: CacheKey, archs: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """Everything that keeps an export's kernels from loading in this install (archs: the image's)."""
    return [d for d in (arch_difference(key.arch, archs), *key_differences(key, image_key(env))) if d]


def guard_rows(
    env: Mapping[str, str], archs: Sequence[str], folder: Path = SHIPPED, *, verify_bytes: bool = True
) -> list[Check]:
    """The shipped kernels in `folder`: intact and made for this install (`verify_bytes`)."""
    manifest_path = manifest_beside(folder)
    expected = f"DeepEP kernels for {' '.join(archs) or 'the image'}"
    if not manifest_path.is_file():
        return [
            none_shipped(
                COMPONENT, expected, "each kernel compiles at first use (3.6-6.1 s on an H200)", FIX_EXPORT
            )
        ]
    manifest = KIND.schema.read(manifest_path)
    key = manifest.key
    found = (
        f"{manifest.kernels} kernels, {len(manifest.files)} files, {manifest.bytes:,} bytes; "
        f"sm {key.arch} ({key.device}, {key.sm_count} SMs), nvcc {key.nvcc}"
    )
    damaged = changed_files(folder, manifest.files) if verify_bytes else []
    if damaged:
        return [
            Check(
                component=COMPONENT,
                expected=f"{expected}, as {manifest_path.name} lists them",
                found=found,
                verdict="mismatch",
                detail=f"{len(damaged)} missing or changed, e.g. {damaged[0]}",
                fix=f"rebuild the layer; {FIX_EXPORT}",
            )
        ]
    differences = install_differences(key, archs, env) if verify_bytes else []
    if differences:
        return [
            Check(
                component=COMPONENT,
                expected=f"{expected}, made in this image",
                found=found,
                verdict="mismatch",
                detail=f"made for another install ({'; '.join(differences)}): DeepEP would compile "
                "every kernel again, never load these",
                fix=FIX_EXPORT,
            )
        ]
    return [Check(component=COMPONENT, expected=expected, found=found, verdict="ok", detail=str(folder))]
