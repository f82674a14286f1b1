"""Any OCI registry the Docker credentials reach: the Docker CLI backend (`docker manifest inspect`)
reads what the real registry on 127.0.0.1 holds exactly as its HTTP API does; publish picks it for any
host that is neither ECR nor loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from epstack.aws.ecr import EcrRegistry
from epstack.aws.publish import registry_for
from epstack.commands.main import main
from epstack.image.engine import DockerEngine
from epstack.image.registry import DockerRegistry, LoopbackRegistry

ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com"


@pytest.mark.parametrize("host", ["ghcr.io", "harbor.example.com:8443", "registry.example"])
def test_any_other_host_is_read_with_the_docker_credentials(host: str) -> None:
    engine = DockerEngine(cli="/usr/bin/docker", buildx=False)
    assert registry_for(host, engine) == DockerRegistry(host=host, cli="/usr/bin/docker")
    assert isinstance(registry_for("127.0.0.1:5000", engine), LoopbackRegistry)


def test_ecr_keeps_its_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    assert isinstance(registry_for(ECR, DockerEngine(cli="docker", buildx=False)), EcrRegistry)


@pytest.fixture
def pushed(engine: DockerEngine, registry: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A one-file image pushed to the real registry as tiny:1; (repository, its image ID)."""
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "hello").write_text("hello\n")
    local, remote = "epstack-test-registry-tiny:1", f"{registry}/epstack-test/tiny:1"
    engine.import_rootfs(tmp_path / "root", local, [])
    try:
        engine.tag(local, remote)
        engine.push(remote)
        yield "epstack-test/tiny", engine.image_id(local)
    finally:
        for ref in (remote, local):
            engine.remove(ref)


@pytest.mark.docker
def test_the_docker_backend_reads_what_the_registry_holds(
    engine: DockerEngine, registry: str, pushed: tuple[str, str]
) -> None:
    repository, image_id = pushed
    docker, api = DockerRegistry(host=registry, cli=engine.cli), LoopbackRegistry(host=registry)
    assert docker.digest(repository, "1") == api.digest(repository, "1") is not None
    assert docker.config_digest(repository, "1") == api.config_digest(repository, "1") == image_id
    assert docker.digest(repository, "no-such-tag") is None
    assert docker.tag_immutable(repository) is False


@pytest.mark.docker
def test_publish_digest_reads_any_registry(
    registry: str, pushed: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    repository, _ = pushed
    assert main(["publish", "digest", f"{registry}/{repository}:1"]) == 0
    out = capsys.readouterr().out
    assert out == f"{LoopbackRegistry(host=registry).digest(repository, '1')}\n"
    assert main(["publish", "digest", f"{registry}/{repository}:no-such-tag"]) == 2
    assert "no such tag" in capsys.readouterr().err
