"""The doctor's checks of what a process sees inside a container (a Kubernetes pod, a pyxis task): the
host can be right and the container still miss what GIN needs. Each failing row names the fix, and
inside a container the `epstack cluster render` flag that gives it. Pure functions over Facts; standard
library only.
"""

from __future__ import annotations

from epstack.checkrow import Check
from epstack.cluster.site import JIT_CACHE_DIRS
from epstack.doctor.checks import RENDER, Facts
from epstack.fabric import RDMA_DEVICE_DIR

JIT_CACHE_VARS = ", ".join(name for name, _ in JIT_CACHE_DIRS)


def _fix(facts: Facts, *, host: str, container: str) -> str:
    return container if facts.container else host


def check_rdma_files(facts: Facts) -> Check:
    """The verbs devices NCCL and libfabric open, for the NICs sysfs shows."""
    expected = f">= 1 {RDMA_DEVICE_DIR}/uverbs* for {len(facts.rdma)} RDMA device(s)"
    if not facts.rdma:
        return Check(
            component="RDMA device files", expected="-", found="-", verdict="skipped", detail="no RDMA NIC"
        )
    if facts.uverbs:
        return Check(
            component="RDMA device files", expected=expected, found=", ".join(facts.uverbs), verdict="ok"
        )
    return Check(
        component="RDMA device files",
        expected=expected,
        found=f"none in {RDMA_DEVICE_DIR}",
        verdict="fail",
        fix=_fix(
            facts,
            host="modprobe ib_uverbs (EFA: the efa module), then check the udev rules",
            container=f"request the fabric's devices: {RENDER} asks the device plugin for them on jobs "
            "across nodes (--fabric-devices, --rdma-resource, --instance-type); Slurm mounts "
            f"{RDMA_DEVICE_DIR}",
        ),
        detail="NCCL GIN cannot open the NICs without them",
    )


def check_rdma_netns(facts: Facts) -> Check:
    """RoCE: GIN's GIDs come from the NIC's netdev, which must be in this network namespace."""
    roce = [d for d in facts.rdma if d.is_roce]
    if not roce:
        return Check(
            component="RDMA netdevs here",
            expected="-",
            found="-",
            verdict="skipped",
            detail="only RoCE needs its netdev in this network namespace (IB and EFA do not)",
        )
    here = set(facts.netdevs)
    missing = [d.name for d in roce if not here & set(d.netdevs)]
    found = ", ".join(f"{d.name}: {'/'.join(sorted(here & set(d.netdevs))) or 'none'}" for d in roce)
    return Check(
        component="RDMA netdevs here",
        expected="each RoCE device's netdev in this network namespace",
        found=found,
        verdict="fail" if missing else "ok",
        fix=""
        if not missing
        else _fix(
            facts,
            host="bring the RoCE netdevs up in this network namespace (ip link)",
            container=f"{RENDER} --host-network (the node's netdevs in the pod), or attach them with "
            "SR-IOV/Multus; then set NCCL_IB_GID_INDEX with --env",
        ),
        detail="" if not missing else f"{', '.join(missing)}: no GID without a netdev, so GIN cannot connect",
    )


def check_jit_cache(facts: Facts) -> Check:
    """The JIT caches must be writable: enroot's root filesystem is read-only by default."""
    problems = [f"{name}={path}: {problem}" for name, path, problem in facts.jit_caches if problem]
    found = "; ".join(problems) or ", ".join(f"{name}={path}" for name, path, _ in facts.jit_caches)
    return Check(
        component="JIT caches writable",
        expected="writable (DeepEP, Triton, FlashInfer, DeepGEMM compile at first use)",
        found=found or "-",
        verdict="fail" if problems else "ok",
        fix=""
        if not problems
        else _fix(
            facts,
            host=f"set {JIT_CACHE_VARS} to a writable directory",
            container=f"{RENDER} --cache-storage host:/DIR mounts a writable directory and points "
            f"{JIT_CACHE_VARS} at it",
        ),
    )
