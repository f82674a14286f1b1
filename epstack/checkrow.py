"""One row of a guard report: a component, what was expected, what was found, and the verdict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from epstack.distinfo import Dist

Verdict = Literal["ok", "mismatch", "missing", "extra", "skipped", "override (pinned)"]
FAILED: frozenset[Verdict] = frozenset({"mismatch", "missing", "extra"})


@dataclass(frozen=True, kw_only=True)
class Check:
    """One row of the report."""

    component: str
    expected: str
    found: str
    verdict: Verdict
    detail: str = ""
    layer: str = ""

    @property
    def failed(self) -> bool:
        return self.verdict in FAILED


def broken(component: str, expected: str, dist: Dist) -> Check:
    """The row for a distribution whose metadata cannot be read or trusted."""
    return Check(
        component=component,
        expected=expected,
        found=dist.version or "unreadable metadata",
        verdict="mismatch",
        detail=f"{dist.location}: {dist.problem}",
    )
