"""Facts per fabric (AWS EFA, InfiniBand/RoCE), written once: the GIN types it can use and the
environment the base image bakes in for the pinned one, the environment a multi-node job adds, the
Kubernetes device resource, huge pages, and the NCCL that can do GIN (DeepEP V2's only way between
nodes) over it.

The base Dockerfile renders its fabric ENV from here; epstack.cluster's jobs and `epstack doctor`
read the same table. Standard library only: GPU hosts import this bare for the doctor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from epstack.stack import (
    DEEPEP_MIN_SMS_WITHOUT_OVERLAP,
    DEEPEP_NUM_SMS_ENV,
    DEEPEP_V2_MIN_NCCL,
    EFA_GDA_MIN_NCCL,
    GIN_EFA_GDA,
    GIN_GDAKI,
    GIN_PROXY,
    release,
)

# Every image: DeepEP's JIT finds CUDA here; NCCL's cuMem allocator backs the symmetric memory
# DeepEP V2's GIN windows need.
COMMON_IMAGE_ENV: tuple[tuple[str, str], ...] = (
    ("CUDA_HOME", "/usr/local/cuda"),
    ("NCCL_CUMEM_ENABLE", "1"),
)


# Where GDRCopy's kernel module puts its device: DeepEP V2 loads libgdrapi, and NCCL GIN cannot start
# without it (awslabs/awsome-distributed-ai PR #1241's review: pods that never got /dev/gdrdrv abort
# with "NCCL GIN is unavailable").
GDRDRV = "/dev/gdrdrv"
# The RDMA devices' character devices (uverbs, rdma_cm): EFA's and IB's alike.
RDMA_DEVICE_DIR = "/dev/infiniband"


@dataclass(frozen=True, kw_only=True)
class HostAccess:
    """What a container running GIN of one type needs from its host, and why (written into the job)."""

    devices: tuple[str, ...]
    capabilities: tuple[str, ...]
    reason: str


_GDRDRV_REASON = (
    f"{GDRDRV}: DeepEP V2 and NCCL GIN need GDRCopy; without it NCCL GIN is unavailable "
    "(awslabs/awsome-distributed-ai PR #1241 review)"
)
_IPC_LOCK_REASON = "IPC_LOCK: DeepEP and NCCL pin host memory past the memlock limit"


@dataclass(frozen=True, kw_only=True)
class Fabric:
    name: str
    title: str
    # Its pins.env keys, by the layer of its targets they belong to (the base layer installs the fabric,
    # the deepep layer applies its DeepEP patches).
    pin_keys: dict[str, tuple[str, ...]]
    # The key of its pinned GIN type, and of its DeepEP patches.
    gin_key: str
    patches_key: str
    # The GIN types a pins file may pick for this fabric (EFA_GIN_TYPE, IB_GIN_TYPE).
    gin_types: tuple[str, ...]
    # ENV lines of the base image besides NCCL_GIN_TYPE, in order. Library paths never go here: the
    # images add theirs to ld.so.conf.d, so a driver mount's LD_LIBRARY_PATH is never replaced.
    image_env_base: tuple[tuple[str, str], ...]
    # What a job crossing nodes adds at run time (Kubernetes container env, sbatch exports).
    job_env: tuple[tuple[str, str], ...]
    # The device plugin's resource name, and how many per node unless the user says otherwise.
    k8s_resource: str
    # 2 MiB huge pages per pod, where the fabric's library uses them ("" where it does not).
    hugepages_2mi: str
    # The oldest NCCL whose GIN works over this fabric, and where that floor comes from.
    gin_min_nccl: str
    gin_floor_source: str
    # Devices of the fabric per node a job requests unless the user says: one per GPU (EFA), or one.
    device_per_gpu: bool
    # The base image's install step of the fabric (images/partials/).
    install_template: str
    # How the doctor knows the fabric's NICs in /sys/class/infiniband: their kernel driver, and the
    # device name prefixes it gives them ("" and (): any other RDMA device).
    kernel_driver: str = ""
    device_prefixes: tuple[str, ...] = ()
    # Per pinned GIN type: what it is and where that comes from (a job's note), and the host devices and
    # capabilities a job crossing nodes needs.
    gin_modes: Mapping[str, str] = field(default_factory=dict)
    gin_host_access: Mapping[str, HostAccess] = field(default_factory=dict)
    # Fabric devices per instance type (the device plugin counts each), and the instance a job
    # assumes unless told; empty where the count does not follow the instance type.
    instance_devices: Mapping[str, int] = field(default_factory=dict)
    default_instance: str = ""

    def gin_ok(self, nccl_version: str) -> bool:
        return release(nccl_version) >= release(self.gin_min_nccl)

    def host_access(self, gin_type: str) -> HostAccess:
        """What GIN of `gin_type` over this fabric needs from the host (the pins validate the type)."""
        return self.gin_host_access[gin_type]

    def image_env(self, gin_type: str) -> tuple[tuple[str, str], ...]:
        """The base image's environment for a pinned GIN type."""
        env = (*self.image_env_base, ("NCCL_GIN_TYPE", gin_type))
        if gin_type == GIN_EFA_GDA:
            # The GIN guide: NCCL's symmetric GIN collective kernels do not support EFA-GDA.
            env = (*env, ("NCCL_SYM_GIN_KERNELS_ENABLE", "0"))
        return env


EFA = Fabric(
    name="efa",
    title="AWS EFA",
    pin_keys={
        "base": ("EFA_INSTALLER_VERSION", "EFA_INSTALLER_SHA256", "AWS_OFI_NCCL_VERSION", "EFA_GIN_TYPE"),
        "deepep": ("DEEPEP_PATCHES_EFA",),
    },
    gin_key="EFA_GIN_TYPE",
    patches_key="DEEPEP_PATCHES_EFA",
    gin_types=(GIN_PROXY, GIN_EFA_GDA),
    # NCCL loads aws-ofi-nccl (libnccl-net-ofi.so) as its net plugin; libfabric's EFA provider and no
    # other (aws-ofi-nccl's doc/efa-env-var.md: needed only up to aws-ofi-nccl 1.5, harmless after).
    image_env_base=(("FI_PROVIDER", "efa"), ("NCCL_NET_PLUGIN", "ofi")),
    # GPUDirect RDMA through EFA. doc/efa-env-var.md: libfabric >= 1.18 with aws-ofi-nccl >= 1.7 (the
    # installer's 2.6 and 1.21) turn it on themselves, and setting it on p4/p5 is harmless. DeepEP's SM
    # count, which it cannot size itself over EFA (stack.DEEPEP_MIN_SMS_WITHOUT_OVERLAP).
    job_env=(
        ("FI_EFA_USE_DEVICE_RDMA", "1"),
        (DEEPEP_NUM_SMS_ENV, str(DEEPEP_MIN_SMS_WITHOUT_OVERLAP)),
    ),
    k8s_resource="vpc.amazonaws.com/efa",
    # The EFA device plugin's documented pod setting; libfabric's EFA provider backs its buffers
    # with 2 MiB huge pages.
    hugepages_2mi="5120Mi",
    gin_min_nccl=EFA_GDA_MIN_NCCL,
    gin_floor_source=f"aws-ofi-nccl 1.21 doc/gin-getting-started.md: NCCL {EFA_GDA_MIN_NCCL}-1 or later",
    device_per_gpu=True,
    install_template="partials/fabric-efa.j2",
    kernel_driver="efa",
    device_prefixes=("efa", "rdmap"),
    # aws-ofi-nccl 1.21's doc/gin-getting-started.md: both need NCCL 2.31.2-1, aws-ofi-nccl 1.21.0 and
    # GDRCopy 2.5 (libgdrapi and gdrdrv); NCCL 2.31 takes the proxy on EFA unless told 5.
    gin_modes={
        GIN_PROXY: f"the host proxy over aws-ofi-nccl: the GIN guide's proxy mode, NCCL >= "
        f"{EFA_GDA_MIN_NCCL}",
        GIN_EFA_GDA: f"EFA-GDA, GPU-initiated: NCCL >= {EFA_GDA_MIN_NCCL}, P5en, P6-B200 or P6-B300, the "
        "NVIDIA driver's PeerMappingOverride=1",
    },
    gin_host_access={
        GIN_PROXY: HostAccess(
            devices=(GDRDRV,), capabilities=("IPC_LOCK",), reason=f"{_GDRDRV_REASON}; {_IPC_LOCK_REASON}"
        ),
        # EFA-GDA: the GPU writes the EFA queues itself; awsome-distributed-ai's DeepEP V2 EFA-GDA
        # jobs run with /dev/gdrdrv and IPC_LOCK (SYS_ADMIN there is for CUPTI profiling only).
        GIN_EFA_GDA: HostAccess(
            devices=(GDRDRV,), capabilities=("IPC_LOCK",), reason=f"{_GDRDRV_REASON}; {_IPC_LOCK_REASON}"
        ),
    },
    # EFA interfaces per instance (AWS's EFA docs, "supported instance types"): the EFA device plugin
    # advertises each as one vpc.amazonaws.com/efa.
    instance_devices={
        "p4d.24xlarge": 4,
        "p4de.24xlarge": 4,
        "p5.48xlarge": 32,
        "p5e.48xlarge": 32,
        "p5en.48xlarge": 16,
        # 8 EFA interfaces of 400 Gb/s (whn09/pplx-garden-benchmark's p6-b200 runs: "EFA 400Gb/s x 8").
        "p6-b200.48xlarge": 8,
    },
    default_instance="p5.48xlarge",
)

IB = Fabric(
    name="ib",
    title="InfiniBand/RoCE",
    pin_keys={"base": ("RDMA_CORE_VERSION", "IB_GIN_TYPE"), "deepep": ("DEEPEP_PATCHES_IB",)},
    gin_key="IB_GIN_TYPE",
    patches_key="DEEPEP_PATCHES_IB",
    gin_types=(GIN_PROXY, GIN_GDAKI),
    image_env_base=(),
    # NCCL finds the HCAs itself; NCCL_IB_HCA and NCCL_IB_GID_INDEX (RoCE) are site facts.
    job_env=(),
    # k8s-rdma-shared-dev-plugin's resource as commonly configured; --rdma-resource changes it.
    k8s_resource="rdma/ib",
    hugepages_2mi="",
    gin_min_nccl=DEEPEP_V2_MIN_NCCL,
    gin_floor_source=(
        f"DeepEP V2 needs NCCL's GIN device API (NCCL {DEEPEP_V2_MIN_NCCL}); IB GDAKI/proxy ship with it"
    ),
    device_per_gpu=False,
    install_template="partials/fabric-ib.j2",
    gin_modes={
        GIN_PROXY: "the host proxy, for NICs without GDAKI",
        GIN_GDAKI: "GDAKI, GPU-initiated: the GPU rings the NIC itself",
    },
    gin_host_access={
        GIN_PROXY: HostAccess(
            devices=(GDRDRV,), capabilities=("IPC_LOCK",), reason=f"{_GDRDRV_REASON}; {_IPC_LOCK_REASON}"
        ),
        # GDAKI: the GPU rings the NIC's doorbells through mapped device memory. NVSHMEM's IBGDA, the
        # same mechanism, fails in a non-privileged container (sgl-project/sglang#12533); llm-d's
        # wide-EP pods run it with SYS_RAWIO. Where that is not enough: --privileged.
        GIN_GDAKI: HostAccess(
            devices=(GDRDRV,),
            capabilities=("IPC_LOCK", "SYS_RAWIO"),
            reason=f"{_GDRDRV_REASON}; {_IPC_LOCK_REASON}; SYS_RAWIO: GDAKI maps the NIC's doorbells "
            "into GPU memory, which fails without it (sgl-project/sglang#12533; llm-d wide-ep-lws); "
            "--privileged where it is still refused",
        ),
    },
)

FABRICS: dict[str, Fabric] = {EFA.name: EFA, IB.name: IB}
