"""Read-only facts about a host, from its sysfs and procfs under a root directory (default /), so tests
read fixture trees of healthy and broken hosts. Used by `epstack doctor` and by the smoke (its RDMA
device list). Inside a container (a pod, a pyxis task) the same files are the container's view: its
/dev, its network namespace's /sys/class/net, its limits. Standard library only: GPU hosts import
this bare.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from epstack.fabric import EFA

ROOT = Path("/")


def _read(root: Path, relative: str) -> str | None:
    try:
        return (root / relative).read_text(errors="replace")
    except OSError:
        return None


def version_tuple(text: str) -> tuple[int, ...]:
    """'580.95.05' -> (580, 95, 5); non-numeric tails are dropped ('3.3.0g' -> (3, 3, 0))."""
    parts = []
    for piece in text.strip().split("."):
        digits = re.match(r"\d+", piece)
        if not digits:
            break
        parts.append(int(digits.group()))
    return tuple(parts)


# ---- NVIDIA driver ---------------------------------------------------------------------------


def nvidia_driver_version(root: Path = ROOT) -> str | None:
    """The loaded kernel module's version: /sys/module/nvidia/version, else /proc/driver/nvidia/version."""
    text = _read(root, "sys/module/nvidia/version")
    if text and text.strip():
        return text.strip()
    proc = _read(root, "proc/driver/nvidia/version") or ""
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", proc)
    return match.group(1) if match else None


def nvidia_open_module(root: Path = ROOT) -> bool:
    """The open GPU kernel module (what dma-buf GPUDirect RDMA needs)."""
    return "Open Kernel Module" in (_read(root, "proc/driver/nvidia/version") or "")


def nvidia_gpus(root: Path = ROOT) -> list[str]:
    """PCI addresses of the GPUs the driver sees (/proc/driver/nvidia/gpus/<bus id>)."""
    directory = root / "proc/driver/nvidia/gpus"
    return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []


def nvidia_params(root: Path = ROOT) -> dict[str, str]:
    """/proc/driver/nvidia/params: `Name: value` lines, quotes removed ('RegistryDwords: "A=1;"')."""
    params = {}
    for line in (_read(root, "proc/driver/nvidia/params") or "").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            params[key.strip()] = value.strip().strip('"')
    return params


def registry_dwords(value: str) -> dict[str, str]:
    """'PeerMappingOverride=1;RMFoo=0x1' -> {'PeerMappingOverride': '1', 'RMFoo': '0x1'}."""
    pairs = (item.partition("=") for item in value.split(";") if item.strip())
    return {key.strip(): val.strip() for key, _, val in pairs}


# ---- kernel modules, devices, limits ---------------------------------------------------------


def module_loaded(name: str, root: Path = ROOT) -> bool:
    return (root / "sys/module" / name).is_dir()


def module_version(name: str, root: Path = ROOT) -> str | None:
    text = _read(root, f"sys/module/{name}/version")
    return text.strip() if text and text.strip() else None


def kernel_release(root: Path = ROOT) -> str:
    return (_read(root, "proc/sys/kernel/osrelease") or "").strip()


def device_exists(name: str, root: Path = ROOT) -> bool:
    return (root / "dev" / name).exists()


@dataclass(frozen=True, kw_only=True)
class RdmaPort:
    number: str
    state: str  # "4: ACTIVE"
    link_layer: str  # InfiniBand | Ethernet (RoCE) | Unknown (EFA)

    @property
    def active(self) -> bool:
        return "ACTIVE" in self.state


@dataclass(frozen=True, kw_only=True)
class RdmaDevice:
    name: str
    driver: str  # efa, mlx5_core, ...
    ports: tuple[RdmaPort, ...]
    netdevs: tuple[str, ...] = ()  # its network interfaces (device/net), as sysfs shows them here

    @property
    def is_efa(self) -> bool:
        return self.driver == EFA.kernel_driver or self.name.startswith(EFA.device_prefixes)

    @property
    def is_roce(self) -> bool:
        """RDMA over Ethernet: its GIDs come from its netdev, which must be in this network namespace."""
        return not self.is_efa and any(p.link_layer == "Ethernet" for p in self.ports)


def rdma_devices(root: Path = ROOT) -> list[RdmaDevice]:
    """Every device under /sys/class/infiniband (IB, RoCE and EFA all register there)."""
    directory = root / "sys/class/infiniband"
    if not directory.is_dir():
        return []
    devices = []
    for path in sorted(directory.iterdir()):
        driver_link = path / "device" / "driver"
        driver = driver_link.resolve().name if driver_link.exists() else ""
        ports = []
        if (path / "ports").is_dir():
            for port in sorted((path / "ports").iterdir()):
                ports.append(
                    RdmaPort(
                        number=port.name,
                        state=(_read(port, "state") or "").strip(),
                        link_layer=(_read(port, "link_layer") or "").strip(),
                    )
                )
        net = path / "device" / "net"
        netdevs = tuple(sorted(n.name for n in net.iterdir())) if net.is_dir() else ()
        devices.append(RdmaDevice(name=path.name, driver=driver, ports=tuple(ports), netdevs=netdevs))
    return devices


def uverbs_devices(root: Path = ROOT) -> list[str]:
    """The verbs character devices this process can see (/dev/infiniband/uverbs*): what libibverbs,
    and so NCCL and libfabric, open; a container has them only if a device plugin or mount gives them."""
    directory = root / "dev" / "infiniband"
    return sorted(p.name for p in directory.glob("uverbs*")) if directory.is_dir() else []


def network_interfaces(root: Path = ROOT) -> list[str]:
    """This network namespace's interfaces (/sys/class/net shows the namespace of whoever mounted sysfs)."""
    directory = root / "sys/class/net"
    return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []


def container_kind(root: Path, env: Mapping[str, str]) -> str:
    """'kubernetes' in a pod, 'container' in another container (docker, podman, enroot), '' on a host."""
    if env.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    if any((root / marker).exists() for marker in (".dockerenv", "run/.containerenv")):
        return "container"  # docker's and podman's markers
    return ""


def directory_problem(root: Path, path: str) -> str:
    """Why `path` (as this process names it) could not be created or written; '' when it can."""
    target = root / PurePosixPath(path).relative_to("/") if path.startswith("/") else root / path
    existing = next((p for p in (target, *target.parents) if p.exists()), None)
    if existing is None:
        return "no existing parent"
    shown = "/" + existing.relative_to(root).as_posix() if existing != root else "/"
    if not existing.is_dir():
        return f"{shown} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{shown} is not writable (a read-only root, or another owner)"
    return ""


def memlock_limit(root: Path = ROOT) -> str | None:
    """Soft `Max locked memory` of this process (/proc/self/limits): 'unlimited' or a byte count."""
    for line in (_read(root, "proc/self/limits") or "").splitlines():
        if line.startswith("Max locked memory"):
            fields = line[len("Max locked memory") :].split()
            return fields[0] if fields else None
    return None


@dataclass(frozen=True, kw_only=True)
class HugePages:
    total: int
    free: int
    size_kb: int

    @property
    def total_mib(self) -> int:
        return self.total * self.size_kb // 1024


def hugepages(root: Path = ROOT) -> HugePages:
    values = {}
    for line in (_read(root, "proc/meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        if key in ("HugePages_Total", "HugePages_Free", "Hugepagesize"):
            values[key] = int(rest.split()[0]) if rest.split() else 0
    return HugePages(
        total=values.get("HugePages_Total", 0),
        free=values.get("HugePages_Free", 0),
        size_kb=values.get("Hugepagesize", 2048),
    )
