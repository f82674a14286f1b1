"""vLLM's torch.compile artifacts, shipped in an image: exported from a GPU run, unpacked by digest,
checked.

vLLM 0.33.0 compiles the model with torch.compile (Dynamo, then Inductor's kernels through Triton) when
a server starts, before its first request. Over torch >= 2.10 it saves the result as one AOT artifact
(VLLM_USE_AOT_COMPILE, and over torch >= 2.12 VLLM_USE_MEGA_AOT_ARTIFACT: the compiled graph and
Inductor's code in one file): vllm/compilation/decorators.py writes
$VLLM_CACHE_ROOT/torch_compile_cache/torch_aot_compile/<hash>/rank_<rank>_<dp rank>/model whole (a
temporary file renamed in), and a later start of the same model and configuration loads it ("Directly
load AOT compilation from path") instead of compiling. The hash (compilation/caching.py
aot_compile_hash_factors) covers vLLM's compile-relevant variables, the whole vLLM configuration (model,
parallel layout, compilation settings) and Inductor's factors (torch's version among them); on load vLLM
checks the traced source files against those recorded. The kernels inside are for the device they were
compiled on. So an artifact made in the image, on a GPU of its arch, for a served configuration, loads in
every container of it; anything else compiles again.

The artifacts depend on the model and the layout, so a serve run makes them (`epstack smoke serve
--engine vllm`, any vLLM start with the image's VLLM_CACHE_ROOT): `epstack jit export --toolchain
vllm-compile` packs every saved artifact with its key, the kernels layer unpacks them by sha256 into
imagepaths.JIT/vllm_compile, and the entrypoint copies them into $VLLM_CACHE_ROOT at start, each
artifact whole or not at all. Triton's kernels it launches go to TRITON_CACHE_DIR (the base layer's),
exported as `triton-kernels`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from epstack import imagepaths
from epstack.checkrow import Check
from epstack.errors import BadInput
from epstack.jit import (
    export,
    vllmcompile,  # noqa: PLW0406 (this module, as the Placed toolchain its guard row reads: mypy checks it)
)
from epstack.jit.deepep import arch_difference
from epstack.jit.install import CacheHome
from epstack.jit.placed import placed_rows
from epstack.jit.shipped import cache_file
from epstack.python.distinfo import find

NAME = "vllm-compile"
TITLE = "vLLM torch.compile"
TOOL = "vllm_compile"
AGAIN = "`epstack jit export --toolchain vllm-compile` after a vLLM serve run"
SHIPPED = Path(imagepaths.JIT) / TOOL
AOT = "torch_compile_cache/torch_aot_compile"  # under VLLM_CACHE_ROOT
ARTIFACT = "model"  # the AOT artifact's file name in its rank's folder
# The distributions whose versions decide whether an artifact loads: vLLM's and Inductor's code, and the
# Triton that compiled the kernels inside.
VERSIONED = ("vllm", "torch", "triton")
# An artifact: torch_aot_compile/<64 hex>/rank_<rank>_<dp rank>/model (its path under VLLM_CACHE_ROOT).
_ENTRY_FILE = re.compile(rf"{AOT}/[0-9a-f]{{64}}/rank_\d+_\d+/{ARTIFACT}")
COLD_S = "not yet measured on a GPU (benchmarks/vllm/gpu_session.sh measures the cold start)"
COMPONENT = f"JIT cache {TITLE}"
GUARD_SCOPES: tuple[str, ...] = ("vllm",)
CHECKED_AT_START = True  # where its artifacts are: copied into its cache at start, or not


@dataclass(frozen=True, kw_only=True)
class CacheKey:
    """What decides whether an artifact loads that an image can name, and the device it was made on."""

    versions: tuple[str, ...]  # `name version` of each of VERSIONED installed
    arch: str  # the device's compute capability, "9.0"
    device: str
    sm_count: int


@dataclass(frozen=True, kw_only=True)
class VllmCompileCache(export.KernelFiles):
    key: CacheKey


KIND = export.kind(
    tool=TOOL,
    manifest=VllmCompileCache,
    name="vllm-compile-cache",
    title="vLLM torch.compile",
    again=AGAIN,
    file_pattern=_ENTRY_FILE,
)


def cache_dir(env: Mapping[str, str]) -> Path:
    """vLLM's cache root as vllm/envs.py reads it: VLLM_CACHE_ROOT, else $XDG_CACHE_HOME/vllm, else
    ~/.cache/vllm."""
    named = env.get("VLLM_CACHE_ROOT")
    if named:
        return Path(named).expanduser()
    root = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "~")) / ".cache")
    return Path(root).expanduser() / "vllm"


HOME = CacheHome(
    variable="VLLM_CACHE_ROOT",
    default=cache_dir,
    name=TOOL,
    entries=(f"{AOT}/*/*",),  # <hash>/rank_<rank>_<dp rank>
    what="vLLM's torch.compile artifacts go to",
)


def artifacts(root: Path) -> list[Path]:
    """The saved artifacts under a cache root (or a shipped copy), never a temporary one."""
    found = root.glob(f"{AOT}/*/rank_*/{ARTIFACT}")
    return sorted(
        path
        for path in found
        if path.is_file()
        and not path.is_symlink()
        and _ENTRY_FILE.fullmatch(path.relative_to(root).as_posix())
    )


def cache_files(root: Path) -> dict[str, bytes]:
    """Every saved artifact, as vLLM names it under its cache root."""
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in artifacts(root)}


def pack(root: Path, key: CacheKey) -> tuple[bytes, VllmCompileCache]:
    """The export archive (byte-identical for the same artifacts) and its manifest."""
    files = cache_files(root)
    if not files:
        raise BadInput(
            f"{root}: no saved vLLM torch.compile artifact ({AOT}/<hash>/rank_*/{ARTIFACT}) to export; "
            "fix: serve once on this GPU with VLLM_CACHE_ROOT set to this folder "
            "(`epstack smoke serve --engine vllm`)"
        )
    manifest = VllmCompileCache(key=key, files=tuple(cache_file(p, d) for p, d in files.items()))
    return export.pack(KIND, manifest, files), manifest


def installed_versions() -> tuple[str, ...]:
    """`name version` of each of VERSIONED installed here."""
    return export.versions_of(VERSIONED)


def image_key(env: Mapping[str, str]) -> CacheKey:
    """This install's side of the key, read without a GPU (arch, device and SM count left empty)."""
    return CacheKey(versions=installed_versions(), arch="", device="", sm_count=0)


def install_differences(key: CacheKey, archs: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """Everything that keeps an export's artifacts from loading here (archs: the image's)."""
    found = [arch_difference(key.arch, archs)]
    if find("vllm") is not None:
        made, now = export.by_name(key.versions), export.by_name(installed_versions())
        found += [
            f"{name} {made.get(name, '(none)')} != {now.get(name, '(none)')}"
            for name in VERSIONED
            if made.get(name) != now.get(name)
        ]
    return [d for d in found if d]


def install(manifest: VllmCompileCache, files: Mapping[str, bytes], into: Path = SHIPPED) -> None:
    """The artifacts into a new folder `into`, readable by every user, their manifest and sums beside."""
    export.install(KIND, manifest, files, into, held="vLLM torch.compile artifacts")


def read_manifest(into: Path = SHIPPED) -> VllmCompileCache | None:
    manifest: VllmCompileCache | None = export.read_manifest(KIND, into)
    return manifest


def compiled_since(root: Path, manifest: VllmCompileCache | None) -> list[str]:
    """The artifacts in a live cache that the shipped manifest does not list: what vLLM compiled."""
    shipped = set(manifest.entries) if manifest else set()
    return [
        name for path in artifacts(root) if (name := path.relative_to(root).parent.as_posix()) not in shipped
    ]


def placed(cache: Path, entry: str) -> bool:
    artifact = cache / entry / ARTIFACT
    return artifact.is_file() and not artifact.is_symlink()


def made_with(key: CacheKey) -> str:
    return ", ".join(key.versions) or "no versions"


def guard_rows(env: Mapping[str, str], archs: Sequence[str], *, verify_bytes: bool = True) -> list[Check]:
    """Its shipped artifacts' guard row: epstack.jit.placed's, given this module."""
    return placed_rows(vllmcompile, env, archs, verify_bytes=verify_bytes)
