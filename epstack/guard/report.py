"""The guard's report: its rows, written as JSON by `epstack guard --json` and read by publish."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from epstack.checkrow import Check
from epstack.document import Schema
from epstack.python import closure


@dataclass(frozen=True, kw_only=True)
class GuardReport:
    """What `epstack guard --json` writes and `epstack publish` reads back from each image."""

    pins: Path
    layer: str
    checks: tuple[Check, ...]
    # Every distribution of the venv and of the layer's locks, ok ones included (the table shows a
    # summary row and the failing ones only).
    distributions: tuple[closure.Distribution, ...] = ()

    @property
    def ok(self) -> bool:
        return not any(check.failed for check in self.checks)

    def to_json(self) -> str:
        """The report, with the verdicts derived from its rows ("ok", each distribution's) written out."""
        checks = [check.json_fields(*ROW_FIELDS) for check in self.checks]
        distributions = [{**asdict(d), "verdict": d.verdict} for d in self.distributions]
        document = {"pins": str(self.pins), "layer": self.layer, "checks": checks, "ok": self.ok}
        if self.distributions:
            document["distributions"] = distributions
        return GUARD_REPORT.dumps(document)


# The fields of a check row in the --json report.
ROW_FIELDS = ("component", "expected", "found", "verdict", "detail", "layer")
GUARD_REPORT = Schema(
    name="guard-report",
    version=1,
    model=GuardReport,
    what="an epstack guard report",
    fix="run `epstack guard --json` of this epstack (rebuild the image with it)",
)
