"""The report of `epstack jit probe` (epstack.jit.probe): one Probe per toolchain compiled, and where
an image keeps each layer's (imagepaths.REPORTS/jit-<layer>.json), which the guard and FlashInfer's
row read."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from epstack import imagepaths
from epstack.document import Schema

REPORTS = Path(imagepaths.REPORTS)
Verdict = Literal["ok", "failed", "skipped"]


@dataclass(frozen=True, kw_only=True)
class Probe:
    """How one toolchain's compile went."""

    toolchain: str
    title: str
    module: str
    verdict: Verdict
    compiler: str = ""  # the compiler the toolchain runs, as it chooses it
    compiler_version: str = ""
    seconds: float = 0.0
    detail: str = ""  # the compiler's own error, or why it was skipped
    steering: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class JitReport:
    layer: str
    archs: tuple[str, ...]
    probes: tuple[Probe, ...]

    @property
    def ok(self) -> bool:
        return all(probe.verdict != "failed" for probe in self.probes)

    def to_json(self) -> str:
        return JIT_REPORT.dumps(self)


JIT_REPORT = Schema(
    name="jit-report",
    version=1,
    model=JitReport,
    what="a JIT probe report",
    fix="`epstack jit probe` again",
)


def reports_folder() -> Path:
    """Where the image keeps its layers' reports; EPSTACK_REPORTS names another folder."""
    return Path(os.environ.get("EPSTACK_REPORTS") or REPORTS)


def report_path(layer: str) -> Path:
    """Where the image keeps a layer's JIT report."""
    return reports_folder() / f"jit-{layer}.json"


def read_report(path: Path) -> JitReport:
    """A report the probe wrote; BadInput naming the file for anything else."""
    return JIT_REPORT.read(path)
