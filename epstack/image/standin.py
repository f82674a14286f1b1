"""A CUDA stand-in base for machines that cannot pull nvidia/cuda (CI, air-gapped builders).

Two parts, both real images on the local engine, never pushed to a remote registry:
- the OS: Ubuntu itself (the CUDA images' own OS and Python), debootstrapped from the Ubuntu archive
  with the archive key checked, carrying this host's CA certificates (TLS here is re-signed);
- the CUDA layer: images/standin/Dockerfile.j2, NVIDIA's CUDA release of CUDA_VERSION from its PyPI
  wheels, laid out as NVIDIA's devel image and the flavour CUDA_RUNTIME_IMAGE names lay it out
  (scripts/standin/): `base` holds cudart only, `runtime` every shared library and the system NCCL.
Every image built on it carries EPSTACK_STANDIN and the label STANDIN_LABEL, so it can be told apart.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from epstack import httpclient
from epstack.cmd import call
from epstack.errors import EnvironmentProblem
from epstack.image.engine import DockerEngine
from epstack.pins.model import Pins
from epstack.stack import CUDA_BASE_FLAVOUR, IMAGE_OS_CODENAME, image_flavour, image_os

STANDIN_LABEL = "io.epstack.standin"
UBUNTU_ARCHIVE = "http://archive.ubuntu.com/ubuntu"
# ubuntu-keyring from noble's main (2026-12-01): holds the Ubuntu Archive Automatic Signing Key (2018),
# F6ECB3762474EDA9D21B7022871920D1991BC93C, which debootstrap checks every Release file against.
UBUNTU_KEYRING_DEB = f"{UBUNTU_ARCHIVE}/pool/main/u/ubuntu-keyring/ubuntu-keyring_2023.11.28.1_all.deb"
UBUNTU_KEYRING_SHA256 = "36de43b15853ccae0028e9a767613770c704833f82586f28eb262f0311adb8a8"
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")
# The CUDA toolkit wheels the devel stand-in installs: what building DeepEP against torch needs
# (torch's headers include cuBLAS, cuSPARSE, cuSOLVER, cuRAND and cuFFT ones).
TOOLKIT_EXTRAS = ("nvcc", "cccl", "crt", "cudart", "nvvm", "nvrtc", "nvjitlink", "cublas", "cusparse",
                  "cusolver", "curand", "cufft")  # fmt: skip
# NVIDIA's CUDA 13.0 images ship the libnccl2/libnccl-dev debs (2.28.x) in /usr/lib and /usr/include;
# the stand-in puts this older NCCL there too, so a build that links the system NCCL is caught.
SYSTEM_NCCL_VERSION = "2.28.9"
_DEBOOTSTRAP_SCRIPT = Path("/usr/share/debootstrap/scripts/gutsy")  # every Ubuntu suite since 7.10


@dataclass(frozen=True, kw_only=True)
class Standin:
    """The stand-in image references for a pins file."""

    os_image: str
    devel: str
    runtime: str
    devel_of: str  # the image each stands in for, without digest
    runtime_of: str
    runtime_flavour: str  # base: cudart only; runtime (any other): every shared library
    cuda_major: int

    @property
    def labels(self) -> dict[str, str]:
        return {
            STANDIN_LABEL: f"CUDA from NVIDIA's PyPI wheels on {self.os_image}, standing in for nvidia/cuda",
            "org.opencontainers.image.vendor": "epstack",
        }


def _os_changes(os_name: str) -> list[str]:
    """The image config of the stand-in OS. The host's CAs are in the system bundle; uv reads it only
    when told (SSL_CERT_FILE), pip on Ubuntu always does."""
    return [
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
        f"ENV EPSTACK_STANDIN={os_name}-from-{UBUNTU_ARCHIVE}",
        f"LABEL {STANDIN_LABEL}={os_name}",
        'CMD ["/bin/bash"]',
    ]


def standin_for(pins: Pins) -> Standin:
    os_name = image_os(pins.cuda_devel_image)
    flavour = "base" if image_flavour(pins.cuda_runtime_image) == CUDA_BASE_FLAVOUR else "runtime"
    codename = IMAGE_OS_CODENAME[os_name]
    recipe = json.dumps([UBUNTU_KEYRING_SHA256, _sources_list(codename), _os_changes(os_name)])
    return Standin(
        os_image=f"local/epstack-os:{os_name}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}",
        devel=f"local/epstack-standin:{pins.cuda_version}-devel-{os_name}",
        runtime=f"local/epstack-standin:{pins.cuda_version}-{flavour}-{os_name}",
        devel_of=pins.cuda_devel_image.split("@")[0],
        runtime_of=pins.cuda_runtime_image.split("@")[0],
        runtime_flavour=flavour,
        cuda_major=pins.wheels.major,
    )


def render_files(pins: Pins) -> dict[str, str]:
    """The requirement files the stand-in's toolkit stage installs, derived from the pins."""
    major, minor = pins.cuda_major_minor.split(".")
    return {
        "cuda-requirements.txt": f"cuda-toolkit[{','.join(TOOLKIT_EXTRAS)}]=={pins.cuda_version}\n"
        f"nvidia-cuda-cuobjdump>={major}.{minor},<{int(major) + 1}\n",
        # cuda-toolkit only bounds nvJitLink; the one that matches the release is the same minor.
        "cuda-constraints.txt": f"nvidia-nvjitlink=={major}.{minor}.*\n",
        "system-nccl-requirements.txt": f"{pins.wheels.nccl}=={SYSTEM_NCCL_VERSION}\n",
    }


def _ubuntu_keyring(work: Path) -> Path:
    """The Ubuntu archive keyring, from the archive itself, checked against the pinned sha256."""
    deb = work / "ubuntu-keyring.deb"
    try:  # plain http, as apt reads the archive: the bytes are checked against the pinned sha256
        answer = httpclient.request("GET", UBUNTU_KEYRING_DEB, timeout=60, plain_http=True)
        if not answer.ok:
            raise answer.failed(f"answered HTTP {answer.status}")
    except EnvironmentProblem as exc:
        raise EnvironmentProblem(f"cannot download ({exc}); is the Ubuntu archive reachable?") from None
    deb.write_bytes(answer.body)
    digest = hashlib.sha256(deb.read_bytes()).hexdigest()
    if digest != UBUNTU_KEYRING_SHA256:
        raise EnvironmentProblem(
            f"{UBUNTU_KEYRING_DEB} has sha256 {digest}, not the pinned {UBUNTU_KEYRING_SHA256}"
        )
    call("dpkg-deb", "--extract", deb, work / "keyring")
    return work / "keyring/usr/share/keyrings/ubuntu-archive-keyring.gpg"


def _sources_list(codename: str) -> str:
    """The apt sources NVIDIA's Ubuntu images start with (deb822), which install-os-packages.sh pins."""
    return (
        f"Types: deb\nURIs: {UBUNTU_ARCHIVE}/\nSuites: {codename} {codename}-updates {codename}-backports\n"
        "Components: main restricted universe multiverse\n"
        "Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg\n\n"
        f"Types: deb\nURIs: http://security.ubuntu.com/ubuntu/\nSuites: {codename}-security\n"
        "Components: main restricted universe multiverse\n"
        "Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg\n"
    )


def ensure_os_image(engine: DockerEngine, standin: Standin) -> None:
    """Make the stand-in's OS image (about 20 s) when the engine lacks it."""
    if engine.image_exists(standin.os_image):
        return
    for tool in ("debootstrap", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise EnvironmentProblem(
                f"cannot make the stand-in OS: {tool} is missing; fix: apt-get install {tool}"
            )
    os_name = standin.os_image.rsplit(":", 1)[1].rsplit("-", 1)[0]
    codename = IMAGE_OS_CODENAME[os_name]
    with tempfile.TemporaryDirectory(prefix="epstack-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        keyring = _ubuntu_keyring(Path(tmp))
        call("debootstrap", "--variant=minbase", f"--keyring={keyring}", "--include=ca-certificates",
             codename, rootfs, UBUNTU_ARCHIVE, _DEBOOTSTRAP_SCRIPT)  # fmt: skip
        (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
        (rootfs / "etc/apt/sources.list.d/ubuntu.sources").write_text(_sources_list(codename))
        for ca in sorted(HOST_CA_DIR.glob("*.crt")):
            shutil.copy(ca, rootfs / "usr/local/share/ca-certificates" / ca.name)
        call("chroot", rootfs, "update-ca-certificates")
        shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
        engine.import_rootfs(rootfs, standin.os_image, changes=_os_changes(os_name))
