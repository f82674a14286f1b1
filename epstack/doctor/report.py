"""The doctor's report: a host's facts gathered once (epstack.host, sysfs/procfs under a root, so
tests read fixture trees) and checked (epstack.doctor.checks) against the image's CUDA and NCCL. Standard
library only: `python3 -m epstack.doctor` runs on a bare GPU host.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epstack import host
from epstack.checkrow import Check
from epstack.cluster.site import JIT_CACHE_DIRS
from epstack.doctor.checks import (
    Facts,
    check_driver,
    check_driver_params,
    check_gpudirect,
    check_hugepages,
    check_memlock,
    check_nccl_env,
    check_rdma,
)
from epstack.doctor.pod import check_jit_cache, check_rdma_files, check_rdma_netns
from epstack.guard.loaded import cuda_driver_version


def _jit_caches(root: Path, env: Mapping[str, str]) -> tuple[tuple[str, str, str], ...]:
    """Each JIT cache variable set (DeepEP's own default, ~/.deep_ep, when unset) and its problem."""
    paths = {name: env[name] for name, _ in JIT_CACHE_DIRS if env.get(name)}
    paths.setdefault("EP_JIT_CACHE_DIR", f"{env.get('HOME', '/root')}/.deep_ep")
    return tuple((name, path, host.directory_problem(root, path)) for name, path in paths.items())


def gather(root: Path, env: Mapping[str, str]) -> Facts:
    real = root.resolve() == Path("/")
    return Facts(
        root=str(root),
        driver=host.nvidia_driver_version(root),
        driver_cuda=cuda_driver_version() if real else None,
        open_module=host.nvidia_open_module(root),
        gpus=tuple(host.nvidia_gpus(root)),
        params=host.nvidia_params(root),
        kernel=host.kernel_release(root),
        peermem=host.module_loaded("nvidia_peermem", root),
        gdrdrv=host.device_exists("gdrdrv", root),
        rdma=tuple(host.rdma_devices(root)),
        efa_driver=host.module_version("efa", root),
        memlock=host.memlock_limit(root),
        hugepages=host.hugepages(root),
        env={k: v for k, v in env.items() if k.startswith(("NCCL_", "EP_", "FI_", "NVSHMEM_"))},
        uverbs=tuple(host.uverbs_devices(root)),
        netdevs=tuple(host.network_interfaces(root)),
        container=host.container_kind(root, env),
        gdrdrv_module=host.module_loaded("gdrdrv", root),
        jit_caches=_jit_caches(root, env),
    )


# ---- the report ------------------------------------------------------------------------------


# The fields of a check row in the --json report.
ROW_FIELDS = ("component", "expected", "found", "verdict", "fix", "detail")


@dataclass(frozen=True, kw_only=True)
class Report:
    root: str
    cuda: str
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return not any(check.failed for check in self.checks)

    def to_json(self) -> str:
        document: dict[str, Any] = {
            "root": self.root,
            "image_cuda": self.cuda,
            "checks": [check.json_fields(*ROW_FIELDS) for check in self.checks],
            "ok": self.ok,
        }
        return json.dumps(document, indent=2) + "\n"


def run_doctor(facts: Facts, *, cuda: str, nccl_version: str, deepep_ref: str = "") -> Report:
    checks = check_driver(facts, cuda)
    if facts.driver is None:
        checks += [
            Check(component=name, expected="-", found="-", verdict="skipped", detail="no NVIDIA driver")
            for name in ("driver parameters", "GPUDirect RDMA", "/dev/gdrdrv")
        ]
    else:
        needed = bool(facts.rdma)
        checks += check_driver_params(facts, needed) + check_gpudirect(facts, needed)
    checks += check_rdma(facts)
    checks += [check_rdma_files(facts), check_rdma_netns(facts)]
    checks += [check_memlock(facts), check_hugepages(facts), check_jit_cache(facts)]
    checks += check_nccl_env(facts, nccl_version, deepep_ref)
    return Report(root=facts.root, cuda=cuda, checks=tuple(checks))
