"""`epstack image guard --at-start`: a container's start trusts what its build proved while nothing that
decides it changed (guard.record), and checks now only what can change after the build.

Checked now, without importing torch: the NVIDIA driver the runtime mounted (libcuda.so.1 through
ctypes, against the pinned CUDA as check_cuda judges it), DeepEP's JIT cache, writable by this user
on this file system, and the row of each JIT toolchain of epstack.jit.registry that CHECKED_AT_START
(DeepGEMM's and SGLang's kernels and FlashInfer's modules where each looks for them, Triton's launcher
against the folder of the driver mounted now; their bytes are the build's: the record covers the
image's files). Every other row is the build report's, marked proven
at build.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from epstack.checkrow import Check
from epstack.guard.deepep import JIT_CACHE, check_jit_cache
from epstack.guard.expected import load_expected
from epstack.guard.libraries import CUDA_DRIVER, CUDA_RUNTIME, CUDA_SKIPPED, live_cuda_rows
from epstack.guard.record import read_record, what_changed
from epstack.guard.report import GUARD_REPORT, GuardReport
from epstack.jit.registry import TOOLCHAINS
from epstack.layers import guard_scopes

CUDA_COMPONENTS = frozenset({CUDA_SKIPPED, CUDA_RUNTIME, CUDA_DRIVER})
PROVEN = "proven at build"


@dataclass(frozen=True, kw_only=True)
class Trusted:
    """The start's report from the build's: its rows, the live ones replaced."""

    report: GuardReport
    live: int  # rows checked now


def trusted_report(pins: Path, layer: str, locks: Path | None, env: Mapping[str, str]) -> Trusted | str:
    """The report at start from the build's record; or what changed since the build, in words."""
    record = read_record(layer)
    if isinstance(record, str):
        return record
    change = what_changed(record, layer=layer, pins=pins, locks=locks, env=env)
    if change:
        return change
    built = GUARD_REPORT.read(Path(record.report))
    expected = load_expected(pins, [scope.name for scope in guard_scopes(layer)[0]])
    rows: list[Check] = []
    live = 0
    archs = expected.torch_cuda_arch_list.split()
    checked = {chain.COMPONENT: chain for chain in TOOLCHAINS if chain.CHECKED_AT_START}
    for row in built.checks:
        if row.component in CUDA_COMPONENTS:
            if any(check.component in CUDA_COMPONENTS for check in rows):
                continue  # a GPU host's build: two rows, both replaced by the live ones
            now = live_cuda_rows(expected.cuda_major_minor, record.cuda_runtime)
        elif row.component == JIT_CACHE:
            now = [check_jit_cache(env)]
        elif row.component in checked:
            now = checked[row.component].guard_rows(env, archs, verify_bytes=False)
        else:
            rows.append(replace(row, detail=f"{row.detail}; {PROVEN}" if row.detail else PROVEN))
            continue
        rows += [replace(check, layer=row.layer) for check in now]
        live += len(now)
    return Trusted(report=replace(built, checks=tuple(rows)), live=live)
