"""The guard: is what this Python has installed and loaded exactly what pins.env pins?

Each check is a small function returning Check rows (guard.distributions, libraries, deepep,
onecuda, epstack.jit.probe, each JIT toolchain's `guard_rows` through epstack.jit.registry); each
guard scope runs its own checks and those of the scopes below it, because an upper layer's install is
what moves a lower layer's pins. Runtime facts beat package claims: NCCL
is the libnccl mapped into this process, never torch.cuda.nccl.version().
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from importlib import metadata
from pathlib import Path

from epstack.checkrow import Check
from epstack.deepepmanifest import manifest_path
from epstack.guard.deepep import (
    check_deep_ep_owner,
    check_deep_ep_patches,
    check_deep_ep_source,
    check_elastic_buffer,
    check_jit_prerequisites,
    check_libstdcxx,
    check_nccl_link,
    deep_ep_owners,
    unreadable_deep_ep_records,
)
from epstack.guard.distributions import (
    check_distribution,
    check_nvshmem_headers,
    check_requirements,
    check_torch_cuda,
    closure_report,
)
from epstack.guard.expected import Expected, load_expected
from epstack.guard.libraries import check_cuda, check_nccl_loaded, try_import
from epstack.guard.onecuda import cuda_home, cuda_home_checks, other_major_check, release_wheel_checks
from epstack.guard.pythonfiles import python_file_checks
from epstack.guard.report import GuardReport
from epstack.guard.transfer import nixl_checks
from epstack.guard.vllm import check_deep_ep_v2_gate, check_no_other_engine
from epstack.jit.probe import layer_rows as jit_rows
from epstack.jit.registry import TOOLCHAINS
from epstack.layers import guard_scopes
from epstack.python import closure
from epstack.python.distinfo import files, find


def _read_maps() -> str:
    return Path("/proc/self/maps").read_text()


def _package_file(distribution: str, name: str) -> Path | None:
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return None
    return next((Path(str(dist.locate_file(f))) for f in files(dist)[0] if f.name == name), None)


def shipped_cache_rows(scope: str, archs: Sequence[str]) -> list[Check]:
    """The rows of the JIT caches of an image of `archs` whose toolchain's GUARD_SCOPES hold `scope`, in
    the registry's order."""
    return [
        row
        for chain in TOOLCHAINS
        if scope in chain.GUARD_SCOPES
        for row in chain.guard_rows(os.environ, archs)
    ]


def python_checks(pins: Expected) -> list[Check]:
    wheels = pins.wheels
    return [
        check_distribution(wheels.nccl, pins.nccl_version),
        check_distribution(wheels.nvshmem, pins.nvshmem_version),
        check_nvshmem_headers(pins.nvshmem_version, _package_file(wheels.nvshmem, "nvshmem_version.h")),
        *release_wheel_checks(pins.cuda_major_minor, wheels, pins.cuda_exceptions),
        other_major_check(wheels.major, metadata.distributions()),
    ]


def base_checks(pins: Expected) -> list[Check]:
    torch, error = try_import("torch") if find("torch") else (None, "torch not installed")
    return [
        check_distribution("torch", pins.torch_version),
        check_torch_cuda(pins, torch, error),
        *check_requirements("torch", pins.base_packages),
        check_nccl_loaded(pins.nccl_version, _read_maps()),
        *check_cuda(pins, torch, _read_maps),
        *cuda_home_checks(pins.cuda_major_minor, cuda_home(os.environ)),
        *jit_rows("base", os.environ),
        *shipped_cache_rows("base", pins.torch_cuda_arch_list.split()),
    ]


def deepep_checks(pins: Expected) -> list[Check]:
    distributions = list(metadata.distributions())
    owners = deep_ep_owners(distributions)
    extensions = [p for paths in owners.values() for p in paths if re.match(r"^_C\..*so$", p.name)]
    manifest = manifest_path()
    return [
        check_deep_ep_source(pins, manifest),
        check_deep_ep_patches(pins, manifest),
        check_deep_ep_owner(owners, unreadable_deep_ep_records(distributions)),
        check_elastic_buffer(owners),
        check_nccl_link(extensions[0] if extensions else None, _read_maps()),
        check_libstdcxx(extensions[0] if extensions else None),
        *check_jit_prerequisites(os.environ, _package_file(pins.wheels.nccl, "nccl.h")),
        *jit_rows("deepep", os.environ),
    ]


def sglang_checks(pins: Expected) -> list[Check]:
    return [
        check_distribution("sglang", pins.sglang_version),
        *nixl_checks(pins),
        *check_requirements("sglang", pins.base_packages),
        *jit_rows("sglang", os.environ),
        *shipped_cache_rows("sglang", pins.torch_cuda_arch_list.split()),
    ]


def vllm_checks(pins: Expected) -> list[Check]:
    return [
        check_distribution("vllm", pins.vllm_version),
        *check_requirements("vllm", pins.base_packages),
        check_no_other_engine("vllm"),
        check_deep_ep_v2_gate(),
        *jit_rows("vllm", os.environ),
        *shipped_cache_rows("vllm", pins.torch_cuda_arch_list.split()),
    ]


# The checks of each guard scope (epstack.layers.GUARD_SCOPES, in the same order).
SCOPE_CHECKS: dict[str, Callable[[Expected], list[Check]]] = {
    "python": python_checks,
    "base": base_checks,
    "deepep": deepep_checks,
    "sglang": sglang_checks,
    "vllm": vllm_checks,
}


def run_guard(pins_path: Path, layer: str, locks: Path | None = None) -> GuardReport:
    """The checks of `layer` and every layer below it ("all": every layer), what Python runs beyond its
    distributions (guard.pythonfiles); with `locks`, every distribution of the venv against the layer's
    locks too."""
    scopes, owner = guard_scopes(layer)
    selected = [scope.name for scope in scopes]
    pins = load_expected(pins_path, selected)
    checks = [replace(check, layer=name) for name in selected for check in SCOPE_CHECKS[name](pins)]
    checks += [replace(check, layer=selected[0]) for check in python_file_checks(layer)]
    distributions: list[closure.Distribution] = []
    if locks is not None and scopes[-1].closure:
        rows, distributions = closure_report(owner.name, locks)
        checks += [replace(row, layer=owner.name) for row in rows]
    return GuardReport(pins=pins_path, layer=layer, checks=tuple(checks), distributions=tuple(distributions))
