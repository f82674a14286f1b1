"""Fixture hosts: the /proc and /sys files epstack doctor reads, in the kernel's and drivers' own
formats, written under a temporary root. `healthy_*` are hosts set up for DeepEP V2 across nodes;
tests break one thing at a time."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class Nic:
    name: str
    driver: str  # efa | mlx5_core
    state: str = "4: ACTIVE"
    link_layer: str = "InfiniBand"
    netdev: str = ""  # its network interface (device/net/<netdev>); RoCE's GIDs come from it


@dataclass(frozen=True, kw_only=True)
class Host:
    driver: str | None = "580.95.05"
    open_module: bool = True
    gpus: int = 8
    stream_mem_ops: str = "1"
    registry_dwords: str = "PeerMappingOverride=1;"
    kernel: str = "6.8.0-1024-aws"
    peermem: bool = False
    gdrdrv: bool = True
    nics: tuple[Nic, ...] = ()
    efa_version: str | None = None
    memlock: str = "unlimited"
    hugepages: int = 0
    # What a container sees: the verbs devices (one per NIC), this network namespace's interfaces
    # (None: every NIC's netdev and eth0), a docker marker, and GDRCopy's module loaded on the host.
    uverbs: bool = True
    netdevs: tuple[str, ...] | None = None
    container: bool = False
    gdrdrv_module: bool = True
    extra: dict[str, str] = field(default_factory=dict)

    def but(self, **changes: object) -> Host:
        return replace(self, **changes)  # type: ignore[arg-type]


HEALTHY_EFA = Host(
    nics=tuple(Nic(name=f"rdmap{16 + i}s27", driver="efa", link_layer="Unspecified") for i in range(4)),
    efa_version="3.3.0g",
    hugepages=2560,
)
HEALTHY_IB = Host(nics=tuple(Nic(name=f"mlx5_{i}", driver="mlx5_core") for i in range(4)), peermem=True)
HEALTHY_ROCE = HEALTHY_IB.but(
    nics=tuple(
        Nic(name=f"mlx5_{i}", driver="mlx5_core", link_layer="Ethernet", netdev=f"ens{i + 1}np0")
        for i in range(4)
    )
)
# The GPU machine: H200s, driver and NVLink, no RDMA NIC, no gdrdrv, default driver parameters.
GPU_NO_NIC = Host(stream_mem_ops="0", registry_dwords="", gdrdrv=False)
NO_GPU = Host(driver=None, gdrdrv=False, memlock="8388608")


def _write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def build(root: Path, host: Host) -> Path:
    if host.driver is not None:
        kind = "Open Kernel Module for x86_64" if host.open_module else "Kernel Module"
        _write(
            root,
            "proc/driver/nvidia/version",
            f"NVRM version: NVIDIA UNIX {kind}  {host.driver}  Release Build  (dvs-builder@U16-I3-B03-4-3)"
            "  Tue Sep 23 09:51:23 UTC 2025\n"
            "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n",
        )
        _write(root, "sys/module/nvidia/version", host.driver + "\n")
        for i in range(host.gpus):
            _write(
                root, f"proc/driver/nvidia/gpus/0000:{0x18 + i:02x}:00.0/information", "Model: NVIDIA H200\n"
            )
        _write(
            root,
            "proc/driver/nvidia/params",
            "ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n"
            f"EnableStreamMemOPs: {host.stream_mem_ops}\nEnableUserNUMAManagement: 1\n"
            f'RegistryDwords: "{host.registry_dwords}"\nRegistryDwordsPerDevice: ""\nRmMsg: ""\n',
        )
    if host.peermem:
        (root / "sys/module/nvidia_peermem").mkdir(parents=True)
    if host.gdrdrv:
        _write(root, "dev/gdrdrv", "")
    _write(root, "proc/sys/kernel/osrelease", host.kernel + "\n")
    for i, nic in enumerate(host.nics):
        pci = root / f"sys/devices/pci0000:00/0000:{0x30 + i:02x}:00.0"
        (root / "sys/bus/pci/drivers" / nic.driver).mkdir(parents=True, exist_ok=True)
        pci.mkdir(parents=True)
        (pci / "driver").symlink_to(f"../../../bus/pci/drivers/{nic.driver}")
        device = root / "sys/class/infiniband" / nic.name
        device.mkdir(parents=True)
        (device / "device").symlink_to(f"../../../devices/pci0000:00/0000:{0x30 + i:02x}:00.0")
        _write(device, "ports/1/state", nic.state + "\n")
        _write(device, "ports/1/link_layer", nic.link_layer + "\n")
        if nic.netdev:
            (pci / "net" / nic.netdev).mkdir(parents=True)
        if host.uverbs:
            _write(root, f"dev/infiniband/uverbs{i}", "")
    netdevs = (
        host.netdevs if host.netdevs is not None else ("eth0", *(n.netdev for n in host.nics if n.netdev))
    )
    for name in ("lo", *netdevs):
        (root / "sys/class/net" / name).mkdir(parents=True)
    if host.container:
        _write(root, ".dockerenv", "")
    if host.gdrdrv_module:
        (root / "sys/module/gdrdrv").mkdir(parents=True)
    if host.efa_version:
        _write(root, "sys/module/efa/version", host.efa_version + "\n")
    _write(
        root,
        "proc/self/limits",
        "Limit                     Soft Limit           Hard Limit           Units     \n"
        "Max open files            1048576              1048576              files     \n"
        f"Max locked memory         {host.memlock:<21}{host.memlock:<21}bytes     \n",
    )
    _write(
        root,
        "proc/meminfo",
        "MemTotal:       2113393420 kB\n"
        f"HugePages_Total:    {host.hugepages}\nHugePages_Free:     {host.hugepages}\n"
        "Hugepagesize:       2048 kB\n",
    )
    for relative, text in host.extra.items():
        _write(root, relative, text)
    return root
