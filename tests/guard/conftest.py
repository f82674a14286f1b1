"""The container of these tests starts when its start is checked, so a file's change time counts only
where a test says when its container started (start.container_started patched again). Its root is ext4
whatever the host's (a test that wants overlayfs says so: tests/guard/test_unpacked.py), so the start
lists every folder."""

from __future__ import annotations

import time

import pytest

from epstack.guard import start
from epstack.guard.mounts import Mounts


@pytest.fixture(autouse=True)
def container_starts_when_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(start, "container_started", time.time)


@pytest.fixture(autouse=True)
def root_is_not_overlayfs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(start, "read_mounts", lambda: Mounts(root_type="ext4", points=()))
