"""The doctor's checks: each reads Facts (what epstack.host found) and returns rows with a verdict
and, for a failure or a warning, its fix. Pure functions, tested on fixture hosts.

GPU-initiated networking settings (driver parameters, GPUDirect RDMA, gdrdrv) fail only where an RDMA
NIC exists to use them; without one they warn, and the RDMA row says why inter-node DeepEP cannot run.
Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from epstack import host
from epstack.checkrow import Check, Verdict
from epstack.fabric import EFA, GDRDRV
from epstack.stack import DEEPEP_REFS_WITHOUT_EFA_GDA, EFA_GDA_MIN_NCCL, GIN_EFA_GDA, GIN_PROXY

# Minimum Linux driver per CUDA major (NVIDIA's CUDA compatibility guide, minor version compatibility).
MIN_DRIVER = {13: "580", 12: "525.60.13"}
# vLLM tools/ep_kernels/configure_system_drivers.sh: what IBGDA / GPU-initiated networking needs.
DRIVER_PARAMS_FIX = (
    "echo 'options nvidia NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords=\"PeerMappingOverride=1;\"' "
    ">> /etc/modprobe.d/nvidia.conf, then update-initramfs -u (or dracut --force) and reboot"
)
EFA_GDA_MIN_DRIVER = "3.3.0"  # aws-ofi-nccl 1.21 doc/gin-getting-started.md, EFA-GDA requirements
MEMLOCK_FIX = (
    "set memlock unlimited: '* - memlock unlimited' in /etc/security/limits.conf; containers: docker "
    "--ulimit memlock=-1, containerd/kubelet LimitMEMLOCK=infinity, pods: IPC_LOCK (epstack cluster "
    "render adds it); Slurm: PropagateResourceLimits"
)
RENDER = "epstack cluster render"


@dataclass(frozen=True, kw_only=True)
class Facts:
    """Everything the checks read, gathered once (tests build it from fixture trees)."""

    root: str
    driver: str | None
    driver_cuda: str | None  # cuDriverGetVersion where libcuda loads (the real root only)
    open_module: bool
    gpus: tuple[str, ...]
    params: dict[str, str]
    kernel: str
    peermem: bool
    gdrdrv: bool
    rdma: tuple[host.RdmaDevice, ...]
    efa_driver: str | None
    memlock: str | None
    hugepages: host.HugePages
    env: dict[str, str] = field(default_factory=dict)
    # What a container sees (epstack.doctor.pod): its verbs devices, its network namespace's
    # interfaces, what kind of container it is ('' on a host), whether the host loaded gdrdrv, and
    # each JIT cache (variable, path, why it cannot be written or '').
    uverbs: tuple[str, ...] = ()
    netdevs: tuple[str, ...] = ()
    container: str = ""
    gdrdrv_module: bool = False
    jit_caches: tuple[tuple[str, str, str], ...] = ()


def gdrdrv_fix(facts: Facts) -> str:
    """/dev/gdrdrv absent: the module is missing on the host, or the container was not given the device."""
    if facts.container and facts.gdrdrv_module:
        return (
            f"the host has GDRCopy's gdrdrv module but this container has no {GDRDRV}: {RENDER} mounts it "
            "for jobs across nodes (Kubernetes: hostPath + NVIDIA_GDRCOPY=enabled; Slurm: "
            f"--container-mounts={GDRDRV}:{GDRDRV}); without it NCCL GIN is unavailable"
        )
    return (
        "install GDRCopy's gdrdrv kernel module (the pinned GDRCOPY_VERSION; "
        "gdrcopy's insmod.sh or its dkms package)"
    )


def _module_kind(facts: Facts) -> str:
    return "open" if facts.open_module else "proprietary"


def _at_least(found: str, floor: str) -> bool:
    return host.version_tuple(found) >= host.version_tuple(floor)


# ---- checks: each returns rows -----------------------------------------------------------------


def check_driver(facts: Facts, cuda: str) -> list[Check]:
    major = int(cuda.split(".", maxsplit=1)[0])
    floor = MIN_DRIVER.get(major, "0")
    expected = f">= {floor} (CUDA {major}.x, the image's CUDA {cuda})"
    if facts.driver is None:
        return [
            Check(
                component="NVIDIA driver",
                expected=expected,
                found="not loaded",
                verdict="fail",
                fix="this is no GPU host (no /proc/driver/nvidia, no nvidia module); run the doctor on a "
                "GPU node, or install the NVIDIA driver",
            )
        ]
    rows = [
        Check(
            component="NVIDIA driver",
            expected=expected,
            found=f"{facts.driver} ({len(facts.gpus)} GPU(s), {_module_kind(facts)} kernel module)",
            verdict="ok" if _at_least(facts.driver, floor) else "fail",
            fix="" if _at_least(facts.driver, floor) else f"install an NVIDIA driver >= {floor}",
        )
    ]
    if facts.driver_cuda is not None:
        newer = _at_least(facts.driver_cuda, ".".join(cuda.split(".")[:2]))
        rows.append(
            Check(
                component="driver CUDA version",
                expected=f">= {'.'.join(cuda.split('.')[:2])}",
                found=facts.driver_cuda,
                verdict="ok" if newer else "warn",
                detail=""
                if newer
                else "runs through minor-version compatibility: no PTX JIT of newer PTX; "
                "DeepEP compiles cubins with the image's nvcc, which works",
            )
        )
    return rows


def check_driver_params(facts: Facts, needed: bool) -> list[Check]:
    stream = facts.params.get("EnableStreamMemOPs", "")
    dwords = host.registry_dwords(facts.params.get("RegistryDwords", ""))
    rows = []
    for component, found, good in (
        ("NVreg_EnableStreamMemOPs", stream or "unset", stream == "1"),
        (
            "PeerMappingOverride",
            dwords.get("PeerMappingOverride", "unset"),
            dwords.get("PeerMappingOverride") == "1",
        ),
    ):
        bad: Verdict = "fail" if needed else "warn"
        rows.append(
            Check(
                component=component,
                expected="1",
                found=found,
                verdict="ok" if good else bad,
                fix="" if good else DRIVER_PARAMS_FIX,
                detail="" if good or needed else "only GPU-initiated networking (IBGDA, EFA-GDA) needs it",
            )
        )
    return rows


def check_gpudirect(facts: Facts, needed: bool) -> list[Check]:
    kernel_ok = _at_least(facts.kernel or "0", "5.12")
    dmabuf = facts.open_module and kernel_ok
    if facts.peermem or dmabuf:
        how = "nvidia_peermem loaded" if facts.peermem else f"dma-buf (open module, Linux {facts.kernel})"
        rdma = Check(component="GPUDirect RDMA", expected="peermem or dma-buf", found=how, verdict="ok")
    else:
        rdma = Check(
            component="GPUDirect RDMA",
            expected="peermem or dma-buf",
            found=f"neither ({_module_kind(facts)} module, Linux {facts.kernel or '?'})",
            verdict="fail" if needed else "warn",
            fix="modprobe nvidia_peermem, or the open kernel module on Linux >= 5.12 (dma-buf)",
        )
    gdr = Check(
        component="/dev/gdrdrv",
        expected="present (GDRCopy kernel module)",
        found="present" if facts.gdrdrv else "absent",
        verdict="ok" if facts.gdrdrv else ("fail" if needed else "warn"),
        fix="" if facts.gdrdrv else gdrdrv_fix(facts),
    )
    return [rdma, gdr]


def check_rdma(facts: Facts) -> list[Check]:
    if not facts.rdma:
        return [
            Check(
                component="RDMA NIC (EFA or IB)",
                expected=">= 1 device",
                found="none in /sys/class/infiniband",
                verdict="fail",
                fix="inter-node DeepEP V2 cannot run on this host: it crosses nodes only through NCCL "
                "GIN over an RDMA NIC (EFA, InfiniBand or RoCE); single-node runs (direct mode, NVLink) "
                "still work",
            )
        ]
    rows = []
    efa = [d for d in facts.rdma if d.is_efa]
    ib = [d for d in facts.rdma if not d.is_efa]
    if efa:
        version = facts.efa_driver or "unknown"
        gda = facts.efa_driver is not None and _at_least(facts.efa_driver, EFA_GDA_MIN_DRIVER)
        rows.append(
            Check(
                component="EFA devices",
                expected=f">= 1, driver >= {EFA_GDA_MIN_DRIVER} for EFA-GDA",
                found=f"{len(efa)} ({', '.join(d.name for d in efa)}), driver {version}",
                verdict="ok" if gda else "warn",
                fix=""
                if gda
                else "update the EFA driver (aws-efa-installer >= 1.50.0) for EFA-GDA; "
                "GIN proxy mode works with older drivers",
            )
        )
    if ib:
        down = [d.name for d in ib if not any(p.active for p in d.ports)]
        layers = sorted({p.link_layer for d in ib for p in d.ports if p.link_layer})
        rows.append(
            Check(
                component="IB/RoCE devices",
                expected=">= 1 with an ACTIVE port",
                found=f"{len(ib)} ({', '.join(d.name for d in ib)}), {'/'.join(layers) or '?'}"
                + (f"; no active port: {', '.join(down)}" if down else ""),
                verdict="fail" if len(down) == len(ib) else ("warn" if down else "ok"),
                fix="" if not down else "bring the ports up (cabling, subnet manager; see ibstat)",
            )
        )
    return rows


def check_memlock(facts: Facts) -> Check:
    good = facts.memlock == "unlimited"
    return Check(
        component="memlock ulimit",
        expected="unlimited",
        found=f"{facts.memlock} bytes" if (facts.memlock or "").isdigit() else facts.memlock or "unknown",
        verdict="ok" if good else "fail",
        fix="" if good else MEMLOCK_FIX,
    )


def check_hugepages(facts: Facts) -> Check:
    if not any(d.is_efa for d in facts.rdma):
        return Check(
            component="huge pages",
            expected="-",
            found=f"{facts.hugepages.total_mib} MiB",
            verdict="skipped",
            detail="only EFA's libfabric needs them",
        )
    need_mib = int(EFA.hugepages_2mi.removesuffix("Mi"))
    good = facts.hugepages.total_mib >= need_mib
    return Check(
        component="huge pages",
        expected=f">= {need_mib} MiB (the EFA pods' hugepages-2Mi)",
        found=f"{facts.hugepages.total} x {facts.hugepages.size_kb} kB = {facts.hugepages.total_mib} MiB",
        verdict="ok" if good else "fail",
        fix=""
        if good
        else f"sysctl -w vm.nr_hugepages={need_mib // 2} (2 MiB pages); persist it in /etc/sysctl.d",
    )


def check_nccl_env(facts: Facts, nccl_version: str, deepep_ref: str = "") -> list[Check]:
    """The NCCL and DeepEP variables the host sets against what the image's pins (NCCL_VERSION, and
    DEEPEP_REF where the pins file has it) can do."""
    env, rows = facts.env, []

    def problem(name: str, verdict: Verdict, why: str, fix: str) -> None:
        rows.append(
            Check(
                component=f"env {name}",
                expected="-",
                found=f"{name}={env[name]}",
                verdict=verdict,
                fix=fix,
                detail=why,
            )
        )

    if env.get("NCCL_CUMEM_ENABLE") == "0":
        problem(
            "NCCL_CUMEM_ENABLE",
            "fail",
            "DeepEP V2's symmetric memory needs NCCL's cuMem",
            "unset it or set 1",
        )
    if env.get("NCCL_P2P_DISABLE") == "1":
        problem("NCCL_P2P_DISABLE", "fail", "turns off NVLink inside the node", "unset it")
    if env.get("NCCL_IB_DISABLE") == "1" and any(not d.is_efa for d in facts.rdma):
        problem("NCCL_IB_DISABLE", "fail", "the host's IB/RoCE NICs would go unused", "unset it")
    if env.get("NCCL_NET_GDR_LEVEL") in ("0", "LOC"):
        problem("NCCL_NET_GDR_LEVEL", "warn", "turns off GPUDirect RDMA", "unset it")
    if env.get("EP_DISABLE_GIN", "0") not in ("", "0") and facts.rdma:
        problem("EP_DISABLE_GIN", "warn", "DeepEP V2 then cannot cross nodes", "unset it for multi-node runs")
    if env.get("NCCL_GIN_TYPE") == GIN_EFA_GDA and not _at_least(nccl_version, EFA_GDA_MIN_NCCL):
        problem(
            "NCCL_GIN_TYPE",
            "fail",
            f"EFA-GDA needs NCCL >= {EFA_GDA_MIN_NCCL}; pins have {nccl_version}",
            f"raise NCCL_VERSION to {EFA_GDA_MIN_NCCL} or set NCCL_GIN_TYPE={GIN_PROXY}",
        )
    elif env.get("NCCL_GIN_TYPE") == GIN_EFA_GDA and deepep_ref in DEEPEP_REFS_WITHOUT_EFA_GDA:
        problem(
            "NCCL_GIN_TYPE",
            "fail",
            f"DeepEP {deepep_ref[:7]} requires GIN strong and VA signals, which EFA-GDA does not have",
            f"unset it: the image sets NCCL_GIN_TYPE={GIN_PROXY}, the proxy",
        )
    if "FI_PROVIDER" in env and env["FI_PROVIDER"] != "efa" and any(d.is_efa for d in facts.rdma):
        problem("FI_PROVIDER", "fail", "the host's NICs are EFA", "set FI_PROVIDER=efa or unset it")
    if not rows:
        names = ", ".join(sorted(env)) or "none set"
        rows.append(
            Check(component="NCCL/EP environment", expected="no conflicts", found=names, verdict="ok")
        )
    return rows
