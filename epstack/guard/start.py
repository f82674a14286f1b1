"""`epstack image guard --at-start`: a container's start trusts what its build proved while nothing that
decides it changed (guard.record), refuses it where something did, and checks now only what can change
after the build.

Refused: any file or folder of the record's trees not as the build left it, or written in this
container, and any refused variable (epstack.guard.environment) set otherwise than the build: each named
with how it changed. The full guard runs only where the record cannot judge: no record (or none this
epstack reads), other pins or locks asked for, or a variable the full guard judges (a JIT's compiler,
NCCL's plugins) set otherwise.

Checked now, without importing torch: the NVIDIA driver the runtime mounted (libcuda.so.1 through
ctypes, against the pinned CUDA as check_cuda judges it), DeepEP's JIT cache, writable by this user
on this file system, and the row of each JIT toolchain of epstack.jit.registry that CHECKED_AT_START
(DeepGEMM's and SGLang's kernels and FlashInfer's modules where each looks for them, Triton's launcher
against the folder of the driver mounted now; their bytes are the build's: the record covers the
image's files). Every other row is the build report's, marked proven
at build.
"""

from __future__ import annotations

import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from epstack.checkrow import Check
from epstack.errors import BadInput
from epstack.guard.changes import Change
from epstack.guard.deepep import JIT_CACHE, check_jit_cache
from epstack.guard.environment import Difference, deciding, differences, given
from epstack.guard.expected import load_expected
from epstack.guard.fingerprint import container_started
from epstack.guard.libraries import CUDA_DRIVER, CUDA_RUNTIME, CUDA_SKIPPED, LoadedRuntime, live_cuda_rows
from epstack.guard.mounts import read_mounts
from epstack.guard.record import file_changes, inputs_change, read_record, unpacked_before_record
from epstack.guard.report import GUARD_REPORT, GuardReport
from epstack.jit.registry import TOOLCHAINS
from epstack.layers import guard_scopes

CUDA_COMPONENTS = frozenset({CUDA_SKIPPED, CUDA_RUNTIME, CUDA_DRIVER})
PROVEN = "proven at build"
CHANGED = "changed since the build"  # a refused start's row per file
SHOWN = 25  # lines a refused start prints at most (its --json report holds every row)
UNSET = "(unset)"
WALK = "EPSTACK_GUARD_WALK"
WALK_CHANGED, WALK_FULL = "changed", "full"


@dataclass(frozen=True, kw_only=True)
class Trusted:
    """The start's report from the build's: its rows, the live ones replaced."""

    report: GuardReport
    live: int  # rows checked now
    listed: int = 0  # folders of the record's trees listed now
    folders: int = 0  # of those the trees have (the others' digests kept: unpacked before the record)


@dataclass(frozen=True, kw_only=True)
class Refused:
    """A start refused: the refused variables set otherwise than the build, the files changed since it."""

    pins: Path
    layer: str
    variables: tuple[Difference, ...]
    changes: tuple[Change, ...]

    def lines(self) -> list[str]:
        """One line per variable and per change (at most SHOWN), then how many more."""
        shown = [*map(str, self.variables), *map(str, self.changes)]
        more = len(shown) - SHOWN
        return shown[:SHOWN] + ([f"and {more} more (all in the --json report)"] if more > 0 else [])

    def summary(self) -> str:
        parts = []
        if self.variables:
            count = len(self.variables)
            parts.append(f"{count} variable{'s' if count > 1 else ''} set otherwise than the build")
        if self.changes:
            count = len(self.changes)
            parts.append(
                f"{count} file{'s' if count > 1 else ''} or folder{'s' if count > 1 else ''} changed since it"
            )
        return " and ".join(parts)

    @property
    def report(self) -> GuardReport:
        rows = [
            Check(
                component=d.name,
                expected=d.built if d.built is not None else UNSET,
                found=d.now if d.now is not None else UNSET,
                verdict="mismatch",
                detail=f"{d.variable.effect} ({d.variable.source})",
                layer=self.layer,
            )
            for d in self.variables
        ]
        rows += [
            Check(
                component=CHANGED,
                expected="as built",
                found=c.kind,
                verdict="mismatch",
                detail=c.path,
                layer=self.layer,
            )
            for c in self.changes
        ]
        return GuardReport(pins=self.pins, layer=self.layer, checks=tuple(rows))


def judge_start(
    pins: Path, layer: str, locks: Path | None, env: Mapping[str, str]
) -> Trusted | Refused | str:
    """The start's verdict from the build's record: trusted (the report at start), refused (what
    changed), or why the record cannot judge it, in words (the full guard runs)."""
    walk_all = _walk_all(env)
    record = read_record(layer)
    if isinstance(record, str):
        return record
    judged = differences(deciding(given(env)), record.env)
    refused = tuple(d for d in judged if d.variable.verdict == "refused")
    unpacked = None if walk_all else unpacked_before_record(record, layer, read_mounts())
    walked = file_changes(record, layer, container_started(), unpacked)
    if refused or walked.changes:
        return Refused(pins=pins, layer=layer, variables=refused, changes=walked.changes)
    asked = inputs_change(record, layer=layer, pins=pins, locks=locks)
    if asked or judged:
        return asked or str(judged[0])
    if sys.flags.no_site and record.env.get("VIRTUAL_ENV"):
        _venv_last_on_path(record.env["VIRTUAL_ENV"])
    trusted = _trusted(record.report, pins, layer, record.cuda_runtime, env)
    return replace(trusted, listed=walked.listed, folders=walked.folders)


def _walk_all(env: Mapping[str, str]) -> bool:
    """EPSTACK_GUARD_WALK: `full` lists every folder of the record's trees (where layers may be unpacked
    out of order); unset or `changed`, only those that can differ from the build's."""
    value = env.get(WALK, "") or WALK_CHANGED
    if value not in (WALK_FULL, WALK_CHANGED):
        raise BadInput(f"{WALK}={value}: use {WALK_CHANGED} (the default) or {WALK_FULL}")
    return value == WALK_FULL


def _venv_last_on_path(venv: str) -> None:
    """In the start's isolated interpreter (epstack-start: no site), the venv's site-packages, just found
    as the build left it, goes last on the path: the live rows read its distributions' metadata. Its .pth
    files still do not run."""
    scheme = {"base": venv, "platbase": venv}
    for key in ("purelib", "platlib"):
        folder = sysconfig.get_path(key, "venv", vars=scheme)
        if folder not in sys.path:
            sys.path.append(folder)


def _trusted(report: str, pins: Path, layer: str, runtime: LoadedRuntime, env: Mapping[str, str]) -> Trusted:
    """The build's report with the rows that can change after the build checked now."""
    built = GUARD_REPORT.read(Path(report))
    expected = load_expected(pins, [scope.name for scope in guard_scopes(layer)[0]])
    rows: list[Check] = []
    live = 0
    archs = expected.torch_cuda_arch_list.split()
    checked = {chain.COMPONENT: chain for chain in TOOLCHAINS if chain.CHECKED_AT_START}
    for row in built.checks:
        if row.component in CUDA_COMPONENTS:
            if any(check.component in CUDA_COMPONENTS for check in rows):
                continue  # a GPU host's build: two rows, both replaced by the live ones
            now = live_cuda_rows(expected.cuda_major_minor, runtime)
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
