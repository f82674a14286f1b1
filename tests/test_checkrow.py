"""One verdict vocabulary: a row that fails the guard fails wherever it is read again (publish's JUnit)."""

from __future__ import annotations

from typing import get_args

import pytest

from epstack.checkrow import Check, Verdict
from epstack.publish import GuardRow


@pytest.mark.parametrize("verdict", get_args(Verdict))
def test_publish_fails_exactly_the_rows_the_guard_fails(verdict: Verdict) -> None:
    """An `extra` distribution (in no lock) fails the guard, so it fails its JUnit case too."""
    check = Check(component="nvidia-cuda-cccl", expected="in no lock", found="13.3.5.0.6", verdict=verdict)
    row = GuardRow(layer="base", component=check.component, expected=check.expected, found=check.found,
                   verdict=verdict)  # fmt: skip
    assert row.failed == check.failed
    assert check.failed == (verdict in ("mismatch", "missing", "extra"))
