"""A stand-in base image for machines that cannot pull nvidia/cuda: Debian from its own mirror.

Made with debootstrap and `docker import`; it carries this host's CA certificates so pip and uv
inside the build trust what the host trusts. It proves the non-CUDA steps of the templates; it
is never pushed and never a product image.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from epstack.cmd import call
from epstack.engine import DockerEngine
from epstack.errors import EnvironmentProblem

OFFLINE_BASE = "local/epstack-offline:bookworm"
# Debian 12's python3; the offline build overrides PYTHON_VERSION with it and says so.
OFFLINE_PYTHON = "3.11"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")


def ensure_offline_base(engine: DockerEngine, *, mirror: str = DEBIAN_MIRROR) -> str:
    """Return the offline base reference, creating it (about 30 s) when the engine lacks it."""
    if engine.image_exists(OFFLINE_BASE):
        return OFFLINE_BASE
    if shutil.which("debootstrap") is None:
        raise EnvironmentProblem(
            "cannot make the offline base: debootstrap is missing; fix: apt-get install debootstrap"
        )
    with tempfile.TemporaryDirectory(prefix="epstack-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        call("debootstrap", "--variant=minbase", "--include=ca-certificates", "bookworm", rootfs, mirror)
        host_cas = sorted(HOST_CA_DIR.glob("*.crt"))
        for ca in host_cas:
            shutil.copy(ca, rootfs / "usr/local/share/ca-certificates" / ca.name)
        if host_cas:
            call("chroot", rootfs, "update-ca-certificates")
        bundle = "/etc/ssl/certs/ca-certificates.crt"
        engine.import_rootfs(
            rootfs,
            OFFLINE_BASE,
            changes=[f"ENV PIP_CERT={bundle}", f"ENV SSL_CERT_FILE={bundle}", 'CMD ["/bin/bash"]'],
        )
    return OFFLINE_BASE
