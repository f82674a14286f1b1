"""DeepEP's JIT kernels, shipped in an image: exported from a GPU run, unpacked by digest, checked.

DeepEP V2 compiles each kernel at first use (3.6-6.1 s each on an H200) into $EP_JIT_CACHE_DIR, as
cache/kernel.<name>.<hash>/ where the hash covers the kernel's code, nvcc's major.minor, the arch and
the include paths of deep_ep and NCCL (csrc/jit/compiler.hpp). The code holds the device's SM count
(csrc/jit/device_runtime.hpp), so the kernels are made on a GPU: `epstack smoke elastic
--export-jit-cache FILE` packs what the smoke compiled with a manifest of that key (`pack`); a layer
over the sglang image unpacks it, verified by its sha256, into imagepaths.JIT (`unpack`); the
entrypoint links it into the writable cache at start (scripts/image/jit-caches.sh). A kernel for
another arch, compiler or install has another hash: it is compiled, never loaded.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import os
import re
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath

from epstack import imagepaths
from epstack.boundedtar import BoundedTar
from epstack.cmd import run
from epstack.document import Schema
from epstack.errors import BadInput, EpstackError, shown
from epstack.image.deepepmanifest import DEEPEP_MANIFEST, manifest_path

TOOL = "deep_ep"
SHIPPED = Path(imagepaths.JIT) / TOOL  # the kernels, as DeepEP lays them out under its cache dir
MANIFEST_NAME = "manifest.json"
# Caps on an export, far above real caches (the H200 export: 26 files, 273,070 bytes, the largest 160 KB;
# FlashInfer's largest JIT module, 6.3 MB) and far below what would hurt an image build.
MAX_MEMBER_BYTES = 16 << 20  # one file, and one tar header
MAX_UNPACKED_BYTES = 64 << 20  # the tar inside the gzip, headers included
MAX_ARCHIVE_BYTES = MAX_UNPACKED_BYTES  # the file, held in memory: a larger one unpacks past the cap
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
class CacheFile:
    path: str  # relative to the cache folder, e.g. cache/kernel.dispatch.<hash>/kernel.cubin
    sha256: str
    bytes: int


@dataclass(frozen=True, kw_only=True)
class KernelCache:
    key: CacheKey
    files: tuple[CacheFile, ...]

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    @property
    def kernels(self) -> int:
        return len({PurePosixPath(f.path).parent for f in self.files})


KERNEL_CACHE = Schema(
    name="kernel-cache",
    version=1,
    model=KernelCache,
    what="a DeepEP kernel cache manifest",
    fix="export it again on a GPU: `epstack smoke elastic --export-jit-cache FILE`",
)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def changed_files(folder: Path, files: Iterable[CacheFile]) -> list[str]:
    """The files of a shipped cache in `folder` missing or whose bytes differ from their sha256."""
    return [
        f.path
        for f in files
        if not (folder / f.path).is_file() or sha256_hex((folder / f.path).read_bytes()) != f.sha256
    ]


def cache_files(cache_dir: Path) -> dict[str, bytes]:
    """The finished kernels under a DeepEP cache folder (cache/kernel.<name>.<hash>/*; never its
    tmp/): what unpack accepts."""
    found = {}
    for kernel in sorted((cache_dir / "cache").glob("kernel.*")):
        if kernel.is_dir() and not kernel.is_symlink():
            for file in sorted(kernel.iterdir()):
                relative = file.relative_to(cache_dir).as_posix()
                if _KERNEL_FILE.fullmatch(relative) and file.is_file() and not file.is_symlink():
                    found[relative] = file.read_bytes()
    return found


def _tar_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def pack(cache_dir: Path, key: CacheKey) -> tuple[bytes, KernelCache]:
    """The export archive (tar.gz, byte-identical for the same kernels) and its manifest."""
    files = cache_files(cache_dir)
    if not files:
        raise BadInput(
            f"{cache_dir}: no compiled DeepEP kernels (cache/kernel.*) to export; fix: run the "
            "smoke with EP_JIT_CACHE_DIR set to this folder"
        )
    manifest = KernelCache(
        key=key,
        files=tuple(CacheFile(path=p, sha256=sha256_hex(d), bytes=len(d)) for p, d in files.items()),
    )
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _tar_member(tar, MANIFEST_NAME, KERNEL_CACHE.dumps(manifest).encode())
        for path, data in files.items():
            _tar_member(tar, f"{TOOL}/{path}", data)
    return gzip.compress(raw.getvalue(), mtime=0), manifest


def _member_bytes(tar: tarfile.TarFile, member: tarfile.TarInfo, archive: Path) -> bytes:
    """A regular file's bytes, read only once its header says they fit the caps."""
    if not member.isfile():
        raise BadInput(f"{archive}: {shown(member.name)} is not a regular file; fix: export it again")
    if member.size > MAX_MEMBER_BYTES:
        raise BadInput(
            f"{archive}: {shown(member.name)} unpacks to {member.size:,} bytes, over the "
            f"{MAX_MEMBER_BYTES:,} a kernel file may be; fix: export it again"
        )
    if member.offset_data + member.size > MAX_UNPACKED_BYTES:
        raise BadInput(
            f"{archive}: {shown(member.name)} ends past byte {MAX_UNPACKED_BYTES:,} of its tar, the most an "
            "export unpacks to; fix: export it again"
        )
    with tar.extractfile(member) as file:  # type: ignore[union-attr]
        return file.read()


def unpack(archive: Path, data: bytes, sha256: str) -> tuple[KernelCache, dict[str, bytes]]:
    """The manifest and files of an export whose sha256 is `sha256`; BadInput for anything else:
    another digest, a member the manifest does not list or whose bytes differ, a link, a device, a
    file or a tar past the caps (refused by its header, before it is read)."""
    if sha256_hex(data) != sha256:
        raise BadInput(
            f"{archive}: sha256 {sha256_hex(data)}, not the {sha256} asked for; fix: name the "
            "export's own digest (printed by the export and in its .sha256 file)"
        )
    try:
        with (
            gzip.GzipFile(fileobj=io.BytesIO(data)) as unzipped,
            tarfile.TarFile(
                fileobj=BoundedTar(
                    unzipped,
                    limit=MAX_UNPACKED_BYTES,
                    max_read=MAX_MEMBER_BYTES,
                    past_limit=f"{archive}: its tar unpacks to over {MAX_UNPACKED_BYTES:,} bytes; "
                    "fix: export it again",
                    long_read=f"{archive}: a tar header of over {MAX_MEMBER_BYTES:,} bytes; "
                    "fix: export it again",
                )
            ) as tar,
        ):
            blobs = {member.name: _member_bytes(tar, member, archive) for member in tar}
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise BadInput(f"{archive}: not a kernel cache export ({exc}); fix: export it again") from None
    if MANIFEST_NAME not in blobs:
        raise BadInput(
            f"{archive}: no {MANIFEST_NAME}; fix: export it with `epstack smoke elastic --export-jit-cache`"
        )
    manifest = KERNEL_CACHE.loads(
        blobs.pop(MANIFEST_NAME).decode(errors="replace"), f"{archive}:{MANIFEST_NAME}"
    )
    listed = {f"{TOOL}/{f.path}": f for f in manifest.files}
    for name, blob in blobs.items():
        entry = listed.get(name)
        if entry is None or not _KERNEL_FILE.fullmatch(entry.path):
            raise BadInput(
                f"{archive}: {shown(name)} is not a kernel its manifest lists; fix: export it again"
            )
        if sha256_hex(blob) != entry.sha256 or len(blob) != entry.bytes:
            raise BadInput(
                f"{archive}: {shown(name)} differs from its manifest's sha256 or size; fix: export it again"
            )
    missing = sorted(set(listed) - set(blobs))
    if missing:
        raise BadInput(
            f"{archive}: {shown(missing[0])} is in its manifest, not in the archive; fix: export it again"
        )
    return manifest, {name.removeprefix(f"{TOOL}/"): blob for name, blob in blobs.items()}


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


def deepep_nvcc(env: Mapping[str, str]) -> str:
    """The nvcc DeepEP's JIT runs: EP_JIT_NVCC_COMPILER, else <CUDA home>/bin/nvcc with the CUDA home
    DeepEP finds (deep_ep.find_cuda_home: CUDA_HOME, CUDA_PATH, nvcc on PATH, /usr/local/cuda)."""
    if env.get("EP_JIT_NVCC_COMPILER"):
        return env["EP_JIT_NVCC_COMPILER"]
    home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    if not home:
        on_path = shutil.which("nvcc", path=env.get("PATH"))
        home = str(Path(on_path).parent.parent) if on_path else "/usr/local/cuda"
    return str(Path(home) / "bin" / "nvcc")


def nvcc_version(env: Mapping[str, str]) -> str:
    """DeepEP's nvcc's major.minor ("" when it does not run)."""
    try:
        result = run(deepep_nvcc(env), "--version", echo=False, timeout=60)
    except (EpstackError, OSError):  # not found, timed out; not a program (a folder, no x bit)
        return ""
    return nvcc_release(result.stdout)


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


def arch_difference(key: CacheKey, archs: Sequence[str]) -> str:
    """`arch 10.0 not in 9.0a` when the kernels' device is none of the image's archs ("" otherwise)."""
    families = {arch.rstrip("af") for arch in archs}
    if not families or key.arch in families:
        return ""
    return f"arch {key.arch} not in {' '.join(archs)}"


def manifest_beside(folder: Path) -> Path:
    """Where the manifest of the kernels unpacked into `folder` is kept: <folder>.json."""
    return folder.with_name(f"{folder.name}.json")


def install_folder(into: Path, manifest: str, fill: Callable[[Path], None], *, refusal: str) -> None:
    """A new folder `into` that `fill` fills (handed a staging folder beside it), its folders readable
    by every user, and `manifest` beside it: renamed into place, so a failure leaves no half folder.
    BadInput `<into>: <refusal>` when `into` or its manifest is already there."""
    if into.exists() or manifest_beside(into).exists():
        raise BadInput(f"{into}: {refusal}")
    into.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{into.name}.", dir=into.parent))
    manifest_path = staging.with_name(f"{staging.name}.json")
    try:
        fill(staging)
        for folder in (staging, *(p for p in staging.rglob("*") if p.is_dir())):
            folder.chmod(0o755)
        manifest_path.write_text(manifest)
        manifest_path.chmod(0o644)
        staging.rename(into)
        manifest_path.rename(manifest_beside(into))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        manifest_path.unlink(missing_ok=True)


def install(manifest: KernelCache, files: Mapping[str, bytes], into: Path) -> None:
    """The kernels into a new folder `into`, readable by every user, their manifest beside it."""

    def fill(staging: Path) -> None:
        for relative, data in files.items():
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            target.chmod(0o644)

    refusal = "already holds kernels; fix: unpack into a new image layer or folder"
    install_folder(into, KERNEL_CACHE.dumps(manifest), fill, refusal=refusal)


def install_differences(key: CacheKey, archs: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """Everything that keeps an export's kernels from loading in this install (archs: the image's)."""
    return [d for d in (arch_difference(key, archs), *key_differences(key, image_key(env))) if d]
