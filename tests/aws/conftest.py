"""Fixtures for the CodeBuild/ECR tests: buildspecs written from text, moto's server on 127.0.0.1."""

from __future__ import annotations

import textwrap
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from moto.server import ThreadedMotoServer

from epstack.pins.load import load_pins
from epstack.pins.model import Pins
from tests.conftest import PINS

REGION = "us-east-1"


@pytest.fixture
def pins() -> Pins:
    return load_pins(PINS)


@pytest.fixture
def buildspec(tmp_path: Path) -> Callable[[str], Path]:
    """Write a buildspec (dedented) under tmp_path/src and return its path."""

    def write(text: str, name: str = "buildspec.yml") -> Path:
        path = tmp_path / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
        return path

    return write


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """moto's server over HTTP on a free 127.0.0.1 port, for the whole session."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """boto3 in this test talks to moto's server (AWS_ENDPOINT_URL), with fake credentials; the
    server's state is reset after the test."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    yield moto_server
    urllib.request.urlopen(urllib.request.Request(f"{moto_server}/moto-api/reset", method="POST")).close()


@pytest.fixture
def fake_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """For Stubber tests: a client that never looks for credentials on the network."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
