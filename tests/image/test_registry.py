"""epstack.image.registry.LoopbackRegistry against a fake registry on 127.0.0.1 (tests/fakeserver.py):
what it answers is read through epstack.httpclient, and an answer that is no registry's is one line."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from epstack.errors import EnvironmentProblem
from epstack.image.registry import LoopbackRegistry
from tests.fakeserver import FakeServer, Reply, fake_server

pytestmark = pytest.mark.aws  # loopback only: the fake server on 127.0.0.1

DIGEST = "sha256:" + "d" * 64


@pytest.fixture
def registry() -> Iterator[tuple[FakeServer, LoopbackRegistry]]:
    with fake_server() as server:
        yield server, LoopbackRegistry(host=server.url.removeprefix("http://"))


def test_a_registry_answers_digests_and_manifests(registry: tuple[FakeServer, LoopbackRegistry]) -> None:
    server, loopback = registry
    server.replies["/v2/"] = Reply(200, b"{}")
    server.replies["/v2/epstack/manifests/t"] = Reply(
        200, b'{"config": {"digest": "sha256:c"}}', headers={"Docker-Content-Digest": DIGEST}
    )
    loopback.ping()
    assert loopback.digest("epstack", "t") == DIGEST and loopback.digest("epstack", "gone") is None
    assert loopback.config_digest("epstack", "t") == "sha256:c"


def test_an_answer_that_is_no_registry_s_is_one_line(registry: tuple[FakeServer, LoopbackRegistry]) -> None:
    server, loopback = registry
    server.replies["/v2/"] = Reply(404, b"not a registry")
    server.replies["/v2/epstack/manifests/t"] = Reply(200, b"{}")  # no Docker-Content-Digest
    with pytest.raises(
        EnvironmentProblem, match=r"^no registry at http://127\.0\.0\.1:\d+/v2/ \(GET .* 404\)"
    ):
        loopback.ping()
    with pytest.raises(EnvironmentProblem, match=r"answered HTTP 200 without a Docker-Content-Digest$"):
        loopback.digest("epstack", "t")
    server.replies["/v2/epstack/manifests/big"] = Reply(200, b"x" * 1000, repeat=20_000)
    with pytest.raises(EnvironmentProblem, match="answered 20,000,000 bytes"):
        loopback.manifest("epstack", "big")
