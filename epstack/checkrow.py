"""One row of a check report (the guard, the JIT probe, the doctor): a component, what was expected,
what was found, and the verdict, from one vocabulary. Standard library only (the doctor runs on bare
hosts)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

# warn: works, with a limit named (never fails); skipped: nothing to check, the reason given.
Verdict = Literal["ok", "mismatch", "missing", "extra", "fail", "warn", "skipped", "override (pinned)"]
FAILED: frozenset[Verdict] = frozenset({"mismatch", "missing", "extra", "fail"})


@dataclass(frozen=True, kw_only=True)
class Check:
    """One row of the report."""

    component: str
    expected: str
    found: str
    verdict: Verdict
    fix: str = ""  # what to do about a failure or a warning
    detail: str = ""
    layer: str = ""

    @property
    def failed(self) -> bool:
        return self.verdict in FAILED

    def json_fields(self, *names: str) -> dict[str, str]:
        """The row as a JSON object of the fields its report shows, in that order."""
        values = asdict(self)
        return {name: values[name] for name in names}
