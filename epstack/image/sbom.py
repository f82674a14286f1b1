"""`epstack image sbom`: what an image holds, as one CycloneDX document per image, written inside the image.

Run in the image build right after the layer's guard passed (so the venv is exactly its locks):
- the Python distributions of the layer's locks (and the deep_ep wheel, from its manifest);
- the native parts: the CUDA base image by digest (or the stand-in that replaced it), NCCL and NVSHMEM
  (their libraries' sha256), DeepEP's commit, fmt submodule and patches, GDRCopy, the EFA installer
  and its sha256, aws-ofi-nccl;
- every OS package dpkg lists, and the OS itself.
This module gathers those facts (standard library only); epstack.image.cdx writes and validates the
CycloneDX JSON with cyclonedx-python-lib, imported only when a document is made.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from epstack import imagepaths
from epstack.cmd import run
from epstack.deepepmanifest import DEEPEP_MANIFEST, manifest_path
from epstack.errors import BadInput
from epstack.fabric import EFA
from epstack.layers import layer_named, venv_locks
from epstack.pins.deepepsources import parse_patches
from epstack.pins.file import read_pins_file
from epstack.python.closure import DEEP_EP
from epstack.python.lockfile import lock_path, read_lock
from epstack.stack import cuda_wheels

SBOM_DIR = Path(imagepaths.SBOM)
GDRCOPY_LIB = Path("/opt/gdrcopy/lib")


@dataclass(frozen=True, kw_only=True)
class Part:
    """One component of the image."""

    name: str
    version: str
    kind: str  # CycloneDX component type: library, application, container, operating-system
    purl: str = ""
    sha256: str = ""
    group: str = ""  # what it is part of: python, native, os
    properties: tuple[tuple[str, str], ...] = ()
    commits: tuple[tuple[str, str], ...] = ()  # (commit, repository) it was built from
    patches: tuple[tuple[str, str], ...] = ()  # (patch, its sha256) applied on top


@dataclass(frozen=True, kw_only=True)
class ImageFacts:
    layer: str
    target: str
    version: str  # the image tag epstack gives it (the layer's pins hash at its end)
    base_image: str  # NAME:TAG@sha256:... it is built FROM
    standin: str  # $EPSTACK_STANDIN where a CUDA stand-in replaced base_image, else ""
    parts: tuple[Part, ...] = ()
    locks: dict[str, str] = field(default_factory=dict)  # lock file -> its sha256


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def python_parts(layer: str, locks: Path, manifest: Path) -> tuple[list[Part], dict[str, str]]:
    """The layer's locked distributions (and the built deep_ep) and the sha256 of each lock file."""
    parts: dict[str, Part] = {}
    files = {}
    for name in venv_locks(layer):
        lock = read_lock(locks, name)
        if lock is None:
            raise BadInput(f"{lock_path(locks, name)}: no such lock; fix: run in an epstack image")
        files[lock_path(locks, name).name] = hashlib.sha256(lock.text.encode()).hexdigest()
        for package in lock.resolution.packages:
            parts.setdefault(
                package.name,
                Part(
                    name=package.name,
                    version=package.version,
                    kind="library",
                    purl=f"pkg:pypi/{package.name}@{package.version}",
                    group="python",
                    properties=(("epstack:lock", lock_path(locks, name).name),),
                ),
            )
    if layer_named(layer).holds_deep_ep:
        parts[DEEP_EP] = deep_ep_part(manifest)
    return list(parts.values()), files


def deep_ep_part(manifest: Path) -> Part:
    """The deep_ep wheel built from DeepEP's commit, with its fmt submodule and patches as pedigree."""
    source = DEEPEP_MANIFEST.read(manifest)
    wheel = manifest.parent / source.wheel
    repo = source.repo.removesuffix(".git")
    commits = [(source.commit, repo)]
    if source.fmt_commit:
        commits.append((source.fmt_commit, "https://github.com/fmtlib/fmt"))
    owner_name = "/".join(repo.split("/")[-2:]).lower()
    return Part(
        name=DEEP_EP,
        version=source.wheel_version or source.commit[:12],
        kind="library",
        purl=f"pkg:github/{owner_name}@{source.commit}",
        sha256=sha256_file(wheel) if wheel.is_file() else "",
        group="native",
        properties=(
            ("epstack:torch_cuda_arch_list", source.torch_cuda_arch_list),
            ("epstack:source", source.source),
            ("epstack:wheel", source.wheel),
        ),
        commits=tuple(commits),
        patches=tuple(_patches(source.patches)),
    )


def _patches(entries: Iterable[str]) -> list[tuple[str, str]]:
    """The manifest's patch series (DEEPEP_PATCHES_<FABRIC>) as deepep.build writes it, each
    `URL#sha256=HEX`, as (file name, sha256); an entry of another form keeps its text and no hash."""
    patches = []
    for entry in entries:
        try:
            (patch,) = parse_patches(entry)
        except ValueError:
            patches.append((entry, ""))
        else:
            patches.append((patch.file, patch.sha256))
    return patches


def _library(distribution: str, prefix: str) -> Path | None:
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return None
    files = [Path(str(dist.locate_file(f))) for f in dist.files or [] if f.name.startswith(prefix)]
    return next((f for f in sorted(files) if f.is_file()), None)


def native_parts(pins: dict[str, str], layer: str) -> list[Part]:
    """NCCL and NVSHMEM as loaded libraries, and what the deepep and fabric steps built or installed."""
    wheels = cuda_wheels(pins["CUDA_VERSION"])
    parts = []
    for name, distribution, prefix, key in (
        ("NCCL", wheels.nccl, "libnccl.so", "NCCL_VERSION"),
        ("NVSHMEM", wheels.nvshmem, "libnvshmem_host.so", "NVSHMEM_VERSION"),
    ):
        library = _library(distribution, prefix)
        parts.append(
            Part(
                name=name,
                version=pins[key],
                kind="library",
                purl=f"pkg:pypi/{distribution}@{pins[key]}",
                sha256=sha256_file(library) if library else "",
                group="native",
                properties=(("epstack:file", str(library or "not found")),),
            )
        )
    if layer_named(layer).holds_deep_ep:  # GDRCopy is built with DeepEP, in the deepep layer
        library = next(iter(sorted(GDRCOPY_LIB.glob("libgdrapi.so*"))), None)
        parts.append(
            Part(
                name="gdrcopy",
                version=pins["GDRCOPY_VERSION"],
                kind="library",
                purl=f"pkg:github/nvidia/gdrcopy@{pins['GDRCOPY_REF']}",
                sha256=sha256_file(library) if library and library.is_file() else "",
                group="native",
                properties=(("epstack:file", str(library or "not found")),),
                commits=((pins["GDRCOPY_REF"], "https://github.com/NVIDIA/gdrcopy"),),
            )
        )
    if pins.get("FABRIC") == EFA.name:
        parts += [
            Part(
                name="aws-efa-installer",
                version=pins["EFA_INSTALLER_VERSION"],
                kind="application",
                sha256=pins["EFA_INSTALLER_SHA256"],
                group="native",
                properties=(("epstack:download", "https://efa-installer.amazonaws.com"),),
            ),
            Part(name="aws-ofi-nccl", version=pins["AWS_OFI_NCCL_VERSION"], kind="library", group="native"),
        ]
    return parts


def os_parts(dpkg_output: str, os_release: str) -> list[Part]:
    """The OS (/etc/os-release) and each package `dpkg-query -W` lists (name, version, arch)."""
    release = dict(
        line.split("=", 1) for line in os_release.splitlines() if "=" in line and not line.startswith("#")
    )
    os_id = release.get("ID", "linux").strip('"')
    os_version = release.get("VERSION_ID", "").strip('"')
    parts = [Part(name=os_id, version=os_version, kind="operating-system", group="os")]
    for line in dpkg_output.splitlines():
        fields = line.split("\t")
        if len(fields) != 3 or not fields[0]:
            continue
        name, version, arch = fields
        purl = f"pkg:deb/{os_id}/{name}@{version}?arch={arch}&distro={os_id}-{os_version}"
        parts.append(Part(name=name, version=version, kind="library", purl=purl, group="os"))
    return parts


DPKG_FORMAT = "${Package}\\t${Version}\\t${Architecture}\\n"


def collect(
    *, layer: str, target: str, version: str, base_image: str, pins_file: Path, locks: Path
) -> ImageFacts:
    """Everything the SBOM of this image (the one this runs in) says."""
    pins = {key: entry.value for key, entry in read_pins_file(pins_file).entries.items()}
    manifest = manifest_path()
    python, lock_files = python_parts(layer, locks, manifest)
    dpkg = run("dpkg-query", "-W", "-f", DPKG_FORMAT, echo=False)
    os_release = Path("/etc/os-release")
    parts = [
        *python,
        *native_parts(pins, layer),
        *os_parts(dpkg.stdout, os_release.read_text() if os_release.is_file() else ""),
    ]
    return ImageFacts(
        layer=layer,
        target=target,
        version=version,
        base_image=base_image,
        standin=os.environ.get("EPSTACK_STANDIN", ""),
        parts=tuple(parts),
        locks=lock_files,
    )
