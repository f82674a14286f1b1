"""The archive a GPU run exports a JIT cache in, and the checks that unpack it in an image.

One tar.gz per toolchain, byte-identical for the same cache: `manifest.json` (the toolchain's own
schema: the key the cache was made under, each file's sha256) and the files under `<tool>/`. Unpacking
takes an archive only by its sha256, reads nothing its tar header says is past the caps, and keeps only
files its manifest lists with those bytes, named as the toolchain names them (Kind.file_pattern).
"""

from __future__ import annotations

import gzip
import io
import re
import tarfile
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from epstack.boundedtar import BoundedTar
from epstack.document import SCHEMA_KEY, Schema
from epstack.errors import BadInput, shown
from epstack.inputs import parse_json
from epstack.jit.shipped import CacheFile, install_folder, manifest_beside, sha256_hex

MANIFEST_NAME = "manifest.json"
# Caps on an export, far above real caches (the H200 exports: DeepEP 26 files, 273,070 bytes, the
# largest 160 KB; DeepGEMM's cubins under 100 KB; FlashInfer's largest module, 6.3 MB) and far below
# what would hurt an image build.
MAX_MEMBER_BYTES = 16 << 20  # one file, and one tar header
MAX_UNPACKED_BYTES = 64 << 20  # the tar inside the gzip, headers included
MAX_ARCHIVE_BYTES = MAX_UNPACKED_BYTES  # the file, held in memory: a larger one unpacks past the cap


class Manifest(Protocol):
    @property
    def files(self) -> tuple[CacheFile, ...]: ...


@dataclass(frozen=True, kw_only=True)
class KernelFiles:
    """The files of every toolchain's manifest (each adds the key its kernels were made under); a kernel
    is one folder of them."""

    files: tuple[CacheFile, ...]

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    @property
    def entries(self) -> list[str]:
        """Each kernel's folder, as a path under the cache."""
        return sorted({str(PurePosixPath(f.path).parent) for f in self.files})

    @property
    def kernels(self) -> int:
        return len(self.entries)


@dataclass(frozen=True, kw_only=True)
class Kind:
    """One toolchain's export: its folder in the archive, its manifest's schema, its files' names."""

    tool: str  # e.g. deep_ep: the archive's folder and the shipped folder's name
    schema: Schema[Any]
    file_pattern: re.Pattern[str]  # a file's path in the cache, as the toolchain names it (never "..")
    fix: str  # how to make a good export


def kind(
    *,
    tool: str,
    manifest: type[KernelFiles],
    name: str,
    title: str,
    again: str,
    file_pattern: re.Pattern[str],
) -> Kind:
    """A toolchain's Kind: its manifest's schema, named `name`, and the fix of a bad export, made again
    on a GPU with `again`."""
    fix = f"export it again on a GPU: {again}"
    return Kind(
        tool=tool,
        schema=Schema(name=name, version=1, model=manifest, what=f"a {title} kernel cache manifest", fix=fix),
        file_pattern=file_pattern,
        fix=fix,
    )


def pack(kind: Kind, manifest: Manifest, files: Mapping[str, bytes]) -> bytes:
    """The export archive: the manifest, then each file under <tool>/, in `files`' order."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _tar_member(tar, MANIFEST_NAME, kind.schema.dumps(manifest).encode())
        for path, data in files.items():
            _tar_member(tar, f"{kind.tool}/{path}", data)
    return gzip.compress(raw.getvalue(), mtime=0)


def _tar_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def _member_bytes(tar: tarfile.TarFile, member: tarfile.TarInfo, archive: object) -> bytes:
    """A regular file's bytes, read only once its header says they fit the caps."""
    if not member.isfile():
        raise BadInput(f"{archive}: {shown(member.name)} is not a regular file; fix: export it again")
    if member.size > MAX_MEMBER_BYTES:
        raise BadInput(
            f"{archive}: {shown(member.name)} unpacks to {member.size:,} bytes, over the "
            f"{MAX_MEMBER_BYTES:,} a cache file may be; fix: export it again"
        )
    if member.offset_data + member.size > MAX_UNPACKED_BYTES:
        raise BadInput(
            f"{archive}: {shown(member.name)} ends past byte {MAX_UNPACKED_BYTES:,} of its tar, the most an "
            "export unpacks to; fix: export it again"
        )
    with tar.extractfile(member) as file:  # type: ignore[union-attr]
        return file.read()


def _members(archive: object, data: bytes) -> dict[str, bytes]:
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
            return {member.name: _member_bytes(tar, member, archive) for member in tar}
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise BadInput(f"{archive}: not a JIT cache export ({exc}); fix: export it again") from None


def _kind_of(archive: object, manifest: bytes, kinds: Sequence[Kind]) -> Kind:
    try:
        schema = parse_json(manifest).get(SCHEMA_KEY)
    except ValueError:
        return kinds[0]  # its schema's own reading names the JSON error
    except AttributeError:
        schema = None
    kind = next((k for k in kinds if k.schema.id == schema), None)
    if kind is None:
        known = ", ".join(k.schema.id for k in kinds)
        raise BadInput(
            f"{archive}:{MANIFEST_NAME}: schema {shown(str(schema))} unknown, this epstack unpacks "
            f"{known}; fix: {kinds[0].fix}"
        )
    return kind


def unpack(
    archive: object, data: bytes, sha256: str, kinds: Sequence[Kind]
) -> tuple[Kind, Any, dict[str, bytes]]:
    """The kind, manifest and files of an export whose sha256 is `sha256`; BadInput for anything
    else: another digest, a member the manifest does not list or whose bytes differ, a link, a
    device, a file or a tar past the caps (refused by its header, before it is read)."""
    if sha256_hex(data) != sha256:
        raise BadInput(
            f"{archive}: sha256 {sha256_hex(data)}, not the {sha256} asked for; fix: name the "
            "export's own digest (printed by the export and in its .sha256 file)"
        )
    blobs = _members(archive, data)
    if MANIFEST_NAME not in blobs:
        raise BadInput(f"{archive}: no {MANIFEST_NAME}; fix: {kinds[0].fix}")
    text = blobs.pop(MANIFEST_NAME)
    kind = _kind_of(archive, text, kinds)
    manifest = kind.schema.loads(text.decode(errors="replace"), f"{archive}:{MANIFEST_NAME}")
    listed = {f"{kind.tool}/{f.path}": f for f in manifest.files}
    for name, blob in blobs.items():
        entry = listed.get(name)
        if entry is None or not kind.file_pattern.fullmatch(entry.path):
            raise BadInput(f"{archive}: {shown(name)} is not a file its manifest lists; fix: export it again")
        if sha256_hex(blob) != entry.sha256 or len(blob) != entry.bytes:
            raise BadInput(
                f"{archive}: {shown(name)} differs from its manifest's sha256 or size; fix: export it again"
            )
    missing = sorted(set(listed) - set(blobs))
    if missing:
        raise BadInput(
            f"{archive}: {shown(missing[0])} is in its manifest, not in the archive; fix: export it again"
        )
    return kind, manifest, {name.removeprefix(f"{kind.tool}/"): blob for name, blob in blobs.items()}


def install(kind: Kind, manifest: Manifest, files: Mapping[str, bytes], into: Path, *, held: str) -> None:
    """An export's files into a new folder `into`, readable by every user, the manifest and sha256 list
    beside it; BadInput `<into>: already holds <held>` when it or its manifest is there."""
    refusal = f"already holds {held}; fix: unpack into a new image layer or folder"
    install_folder(into, kind.schema.dumps(manifest), manifest.files, write_files(files), refusal=refusal)


def read_manifest(kind: Kind, into: Path) -> Any:
    """The manifest of the kernels shipped in `into` (None when none are)."""
    path = manifest_beside(into)
    return kind.schema.read(path) if path.is_file() else None


def entry_files(root: Path, entries: Iterable[Path], kind: Kind) -> dict[str, bytes]:
    """Every regular file directly in `entries` (folders under `root`, none a link) named as `kind`
    names a cache file, by its path relative to `root`: what a toolchain's export packs."""
    found = {}
    for entry in entries:
        for file in sorted(entry.iterdir()):
            relative = file.relative_to(root).as_posix()
            if kind.file_pattern.fullmatch(relative) and file.is_file() and not file.is_symlink():
                found[relative] = file.read_bytes()
    return found


def write_files(files: Mapping[str, bytes]) -> Callable[[Any], None]:
    """A fill for shipped.install_folder: each file, readable by every user, under the staging folder."""

    def fill(staging: Any) -> None:
        for relative, data in files.items():
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            target.chmod(0o644)

    return fill


def versions_of(names: Iterable[str]) -> tuple[str, ...]:
    """`name version` of each distribution of `names` installed here, for a key that records them."""
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return tuple(found)


def by_name(versions: Sequence[str]) -> dict[str, str]:
    """`name version` items as name -> version."""
    return dict(item.split(" ", 1) for item in versions if " " in item)
