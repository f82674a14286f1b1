"""The container of these tests starts when its start is checked, so a file's change time counts only
where a test says when its container started (start.container_started patched again)."""

from __future__ import annotations

import time

import pytest

from epstack.guard import start


@pytest.fixture(autouse=True)
def container_starts_when_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(start, "container_started", time.time)
