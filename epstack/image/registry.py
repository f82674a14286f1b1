"""Registries epstack pushes to and reads digests from, behind one Protocol.

Three backends: Amazon ECR (epstack.aws.ecr, through boto3: its immutable tags are known), a registry
on this machine's loopback address (Docker's distribution, e.g. Debian's docker-registry, read over its
HTTP API v2), and any other OCI registry the Docker credentials reach (`docker login HOST`: GHCR,
Harbor, Artifactory, Quay, a site's own), read with the Docker CLI's `docker manifest inspect`, so its
credential helpers and certificates are those `docker push` uses.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Protocol

from epstack import cmd, httpclient
from epstack.errors import BadInput, EnvironmentProblem, shown
from epstack.inputs import parse_json

ECR_HOST = re.compile(
    r"^(?P<account>[0-9]{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$"
)
# The manifest media types epstack reads (OCI and Docker, single and multi-platform).
MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)


def split_registry(registry: str) -> tuple[str, str]:
    """'host[:port][/namespace]' -> (host, namespace)."""
    host, _, namespace = registry.strip().rstrip("/").partition("/")
    if not host:
        raise BadInput("the registry is empty; fix: --registry HOST[:PORT][/NAMESPACE]")
    return host, namespace


class Registry(Protocol):
    """What publish and pull need from a registry."""

    @property
    def host(self) -> str: ...

    def digest(self, repository: str, tag: str) -> str | None:
        """The manifest digest the tag points at, None when the tag does not exist."""
        ...

    def tag_immutable(self, repository: str) -> bool:
        """True when an existing tag may not be moved."""
        ...

    def config_digest(self, repository: str, tag: str) -> str | None:
        """The image config digest (Docker's image ID) the tag's manifest names."""
        ...


@dataclass(frozen=True, kw_only=True)
class LoopbackRegistry:
    """A distribution registry on 127.0.0.1, over plain HTTP (Docker allows loopback without TLS)."""

    host: str
    timeout: float = 10.0

    def _request(self, method: str, path: str) -> httpclient.Answer:
        return httpclient.request(
            method,
            f"http://{self.host}{path}",
            headers={"Accept": ", ".join(MANIFEST_TYPES)},
            timeout=self.timeout,
        )

    def ping(self) -> None:
        try:
            answer = self._request("GET", "/v2/")
            if not answer.ok:
                raise answer.failed(f"answered HTTP {answer.status}")
        except EnvironmentProblem as exc:
            raise EnvironmentProblem(
                f"no registry at http://{self.host}/v2/ ({exc}); fix: start one, e.g. docker-registry serve "
                "CONFIG with http.addr 127.0.0.1:PORT"
            ) from None

    def digest(self, repository: str, tag: str) -> str | None:
        answer = self._request("HEAD", f"/v2/{repository}/manifests/{tag}")
        if answer.status == 404:
            return None
        digest = answer.headers.get("Docker-Content-Digest", "")
        if not answer.ok or not digest:
            raise answer.failed(f"answered HTTP {answer.status} without a Docker-Content-Digest")
        return str(digest)

    def manifest(self, repository: str, reference: str) -> bytes:
        """The manifest bytes by tag or digest (what a pull by digest verifies)."""
        answer = self._request("GET", f"/v2/{repository}/manifests/{reference}")
        if not answer.ok:
            raise answer.failed(f"answered HTTP {answer.status}")
        return answer.body

    def tag_immutable(self, repository: str) -> bool:
        return False

    def config_digest(self, repository: str, tag: str) -> str | None:
        return config_of(self.manifest(repository, tag))


def config_of(manifest: bytes | str) -> str | None:
    """config.digest of an image manifest (None for an index, which names no single image)."""
    try:
        return str(parse_json(manifest)["config"]["digest"])
    except (ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True, kw_only=True)
class DockerRegistry:
    """Any OCI registry, read with `docker manifest inspect` (the Docker CLI `cli`, its credentials).
    Such a registry says nothing of immutable tags: an existing tag is moved only when it already
    names this image (publish checks the image's config digest first)."""

    host: str
    cli: str
    timeout: float = 60.0

    def _inspect(self, repository: str, tag: str) -> dict[str, object] | None:
        """The verbose manifest of `repository:tag`, None when the tag does not exist."""
        ref = f"{self.host}/{repository}:{tag}"
        insecure = ["--insecure"] if httpclient.is_loopback(self.host) else []
        done = cmd.run(
            self.cli, "manifest", "inspect", "--verbose", *insecure, ref, echo=False, timeout=self.timeout
        )
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or ["no answer"])[0]
            if "no such manifest" in said or "manifest unknown" in said:
                return None
            raise EnvironmentProblem(
                f"{ref}: `docker manifest inspect` failed ({shown(said, quote=False)}); fix: docker login "
                f"{self.host}, or check the registry's name"
            )
        try:
            found = parse_json(done.stdout)
        except ValueError:
            found = None
        if not isinstance(found, dict) or not isinstance(found.get("Descriptor"), dict):
            raise EnvironmentProblem(
                f"{ref}: not one image's manifest (a multi-platform index?); fix: publish pushes one image "
                "per tag: use another tag"
            )
        return found

    def digest(self, repository: str, tag: str) -> str | None:
        found = self._inspect(repository, tag)
        descriptor: object = found["Descriptor"] if found else None
        return str(descriptor["digest"]) if isinstance(descriptor, dict) else None

    def tag_immutable(self, repository: str) -> bool:
        return False

    def config_digest(self, repository: str, tag: str) -> str | None:
        """From the parsed manifest the CLI shows (Docker's or OCI's), else its raw bytes (newer CLIs)."""
        found = self._inspect(repository, tag) or {}
        for key in ("SchemaV2Manifest", "OCIManifest"):
            if key in found:
                return config_of(json.dumps(found[key]))
        try:
            raw = base64.b64decode(str(found["Raw"]), validate=True)
        except (binascii.Error, KeyError):
            return None
        return config_of(raw)
