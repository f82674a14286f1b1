"""Amazon ECR: login (what `aws ecr get-login-password | docker login` does), the digest of a tag,
and promotion of an image to another tag by its manifest (no pull, no push, same digest).

Promotion respects immutable tags: a destination tag that already names the same digest is a no-op,
one that names another digest in an IMMUTABLE repository is refused before any write, and ECR's own
ImageTagAlreadyExistsException (a race) gives the same one-line error.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from epstack.aws.clients import Backoff, ecr_client, error_code, region
from epstack.errors import BadInput, EnvironmentProblem
from epstack.httpclient import is_loopback
from epstack.image.registry import ECR_HOST, MANIFEST_TYPES, config_of

if TYPE_CHECKING:
    from mypy_boto3_ecr import ECRClient
    from mypy_boto3_ecr.type_defs import ImageIdentifierTypeDef


@dataclass(frozen=True, kw_only=True)
class EcrImage:
    """[ACCOUNT.dkr.ecr.REGION.amazonaws.com/]REPOSITORY(:TAG|@DIGEST)."""

    registry_id: str | None
    region: str | None
    repository: str
    tag: str = ""
    digest: str = ""

    @property
    def image_id(self) -> ImageIdentifierTypeDef:
        return {"imageTag": self.tag} if self.tag else {"imageDigest": self.digest}

    def __str__(self) -> str:
        host = f"{self.registry_id}.dkr.ecr.{self.region}.amazonaws.com/" if self.registry_id else ""
        return f"{host}{self.repository}" + (f":{self.tag}" if self.tag else f"@{self.digest}")


def parse_ecr_image(text: str) -> EcrImage:
    registry_id = region_name = None
    rest = text
    first, slash, remainder = text.partition("/")
    if slash and ("." in first or ":" in first):
        match = ECR_HOST.match(first)
        if not match:
            raise BadInput(
                f"{text}: {first} is not an ECR registry; fix: ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPO:TAG"
            )
        registry_id, region_name, rest = match["account"], match["region"], remainder
    name, at, digest = rest.partition("@")
    repository, colon, tag = name.rpartition(":") if ":" in name else (name, "", "")
    if not colon:
        repository = name
    if not repository or not (tag or (at and digest.startswith("sha256:"))):
        raise BadInput(f"{text}: no tag or digest; fix: write REPOSITORY:TAG (or a full ECR image URI)")
    return EcrImage(
        registry_id=registry_id, region=region_name, repository=repository, tag=tag, digest=digest
    )


def _ids(image: EcrImage) -> dict[str, Any]:
    return {"registryId": image.registry_id} if image.registry_id else {}


@dataclass(frozen=True, kw_only=True)
class Ecr:
    """ECR operations over one client (one region)."""

    client: ECRClient
    backoff: Backoff

    def digest(self, image: EcrImage) -> str | None:
        def describe() -> str | None:
            try:
                response = self.client.describe_images(
                    repositoryName=image.repository, imageIds=[image.image_id], **_ids(image)
                )
            except Exception as exc:
                if error_code(exc) == "ImageNotFoundException":
                    return None
                raise
            details = response.get("imageDetails", [])
            return str(details[0]["imageDigest"]) if details else None

        return self.backoff.call("ecr:DescribeImages", describe)

    def tag_immutable(self, repository: str, registry_id: str | None = None) -> bool:
        kwargs: dict[str, Any] = {"registryId": registry_id} if registry_id else {}
        response = self.backoff.call(
            "ecr:DescribeRepositories",
            lambda: self.client.describe_repositories(repositoryNames=[repository], **kwargs),
        )
        mutability = response["repositories"][0].get("imageTagMutability", "MUTABLE")
        return mutability.startswith("IMMUTABLE")

    def login_password(self, registry_id: str) -> str:
        response = self.backoff.call(
            "ecr:GetAuthorizationToken",
            lambda: self.client.get_authorization_token(registryIds=[registry_id]),
        )
        token = response["authorizationData"][0]["authorizationToken"]
        user, _, password = base64.b64decode(token).decode().partition(":")
        if user != "AWS" or not password:
            raise EnvironmentProblem("ecr:GetAuthorizationToken returned a token that is not AWS:<password>")
        return password

    def promote(self, source: EcrImage, destination: EcrImage, log: Callable[[str], None]) -> str:
        """Point `destination`'s tag at `source`'s manifest; return the digest."""
        if (source.registry_id, source.region) != (destination.registry_id, destination.region):
            raise BadInput(
                f"{source} -> {destination}: promote stays in one registry; fix: same account and region"
            )
        if not destination.tag:
            raise BadInput(f"{destination}: promote needs a destination tag; fix: REPOSITORY:TAG")
        found = self.backoff.call(
            "ecr:BatchGetImage",
            lambda: self.client.batch_get_image(
                repositoryName=source.repository,
                imageIds=[source.image_id],
                acceptedMediaTypes=list(MANIFEST_TYPES),
                **_ids(source),
            ),
        )
        if not found.get("images"):
            raise BadInput(f"{source}: no such image; fix: check the tag (epstack publish digest {source})")
        image = found["images"][0]
        digest = str(image["imageId"]["imageDigest"])
        existing = self.digest(destination)
        if existing == digest:
            log(f"{destination} already is {digest}")
            return digest
        if existing and self.tag_immutable(destination.repository, destination.registry_id):
            raise _tag_exists(destination, existing)
        outcome = self.backoff.call("ecr:PutImage", lambda: self._put(destination, image, digest))
        if outcome == "exists":
            log(f"{destination} already is {digest}")
            return digest
        if outcome != digest:
            raise EnvironmentProblem(f"{destination}: ECR stored digest {outcome}, the source is {digest}")
        log(f"{destination} -> {digest}" + (f" (was {existing})" if existing else ""))
        return digest

    def _put(self, destination: EcrImage, image: Any, digest: str) -> str:
        media_type = image.get("imageManifestMediaType")
        try:
            response = self.client.put_image(
                repositoryName=destination.repository,
                imageManifest=image["imageManifest"],
                imageTag=destination.tag,
                imageDigest=digest,
                **({"imageManifestMediaType": media_type} if media_type else {}),
                **_ids(destination),
            )
        except Exception as exc:
            code = error_code(exc)
            if code == "ImageAlreadyExistsException":
                return "exists"
            if code == "ImageTagAlreadyExistsException":
                raise _tag_exists(destination, None) from None
            if code == "LayersNotFoundException":
                raise BadInput(
                    f"{destination}: its repository lacks the image's layers (ECR shares none between "
                    "repositories); fix: push the image there, or promote within its repository"
                ) from None
            raise
        return str(response["image"]["imageId"]["imageDigest"])


def _tag_exists(destination: EcrImage, existing: str | None) -> BadInput:
    now = f" (it names {existing})" if existing else ""
    return BadInput(
        f"{destination}: the tag already exists{now} and {destination.repository}'s tags are immutable; "
        "fix: promote to a new tag"
    )


def ecr_for(image: EcrImage, backoff: Backoff) -> Ecr:
    return Ecr(client=ecr_client(image.region or region()), backoff=backoff)


@dataclass(frozen=True, kw_only=True)
class EcrRegistry:
    """The Registry protocol over ECR, for publish and pull."""

    host: str
    ecr: Ecr
    registry_id: str

    @classmethod
    def for_host(cls, host: str, backoff: Backoff | None = None) -> EcrRegistry:
        match = ECR_HOST.match(host)
        if not match:
            raise BadInput(f"{host}: not an ECR registry host")
        ecr = Ecr(client=ecr_client(match["region"]), backoff=backoff or Backoff())
        return cls(host=host, ecr=ecr, registry_id=match["account"])

    def digest(self, repository: str, tag: str) -> str | None:
        image = EcrImage(registry_id=self.registry_id, region=None, repository=repository, tag=tag)
        return self.ecr.digest(image)

    def tag_immutable(self, repository: str) -> bool:
        return self.ecr.tag_immutable(repository, self.registry_id)

    def config_digest(self, repository: str, tag: str) -> str | None:
        found = self.ecr.backoff.call(
            "ecr:BatchGetImage",
            lambda: self.ecr.client.batch_get_image(
                repositoryName=repository,
                registryId=self.registry_id,
                imageIds=[{"imageTag": tag}],
                acceptedMediaTypes=list(MANIFEST_TYPES),
            ),
        )
        images = found.get("images", [])
        return config_of(images[0].get("imageManifest", "")) if images else None


def login(
    registry: str,
    *,
    ecr: Ecr | None,
    docker_login: Callable[[str, str, str], None],
    log: Callable[[str], None],
) -> None:
    """Log Docker in to an ECR registry host[/namespace]; a loopback registry needs none."""
    host = registry.split("/", 1)[0]
    if is_loopback(host):
        log(f"{host}: a loopback registry, no login needed")
        return
    match = ECR_HOST.match(host)
    if not match:
        raise BadInput(
            f"{registry}: not an ECR registry, whose login epstack does; fix: docker login {host} (publish "
            "pushes to any registry with the credentials Docker has for it)"
        )
    client = ecr or Ecr(client=ecr_client(match["region"]), backoff=Backoff(log=log))
    docker_login(f"https://{host}", "AWS", client.login_password(match["account"]))
    log(f"logged in to {host}")
