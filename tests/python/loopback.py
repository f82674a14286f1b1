"""In-process HTTP to 127.0.0.1 (the local package index, a local registry) for tests that are not
marked 'network': the autouse guard in tests/conftest.py refuses every connect; this allows loopback."""

from __future__ import annotations

import _socket
import socket

import pytest

from tests.conftest import _is_loopback


def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """socket.connect reaches 127.0.0.1 and ::1, and raises OSError for any other address."""

    def connect(self: socket.socket, address: object) -> None:
        if not _is_loopback(address):
            raise OSError("this test may only reach 127.0.0.1")
        _socket.socket.connect(self, address)  # type: ignore[arg-type]

    monkeypatch.setattr(socket.socket, "connect", connect)
