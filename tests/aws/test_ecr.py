"""`epstack publish digest|promote|login` against moto's ECR over HTTP; Stubber for what moto cannot do.

Where moto differs from AWS (and what these tests do about it):
- an image pushed without imageDigest gets a digest moto makes from its layer digests, not the
  sha256 of the manifest: the tests store images with imageDigest = sha256(manifest), as AWS has it;
- an existing tag in an IMMUTABLE repository raises ImageAlreadyExistsException in moto and
  ImageTagAlreadyExistsException in AWS: epstack checks the tag first (same error either way), and
  AWS's exception (a race with another writer) is tested through Stubber;
- moto accepts PutImage into a repository that lacks the layers (AWS: LayersNotFoundException).
"""

from __future__ import annotations

import hashlib
import json

import boto3
import pytest
from botocore.stub import Stubber

from epstack.aws.clients import Backoff
from epstack.aws.ecr import Ecr, EcrImage, login, parse_ecr_image
from epstack.commands.main import main
from epstack.errors import BadInput

ACCOUNT = "123456789012"  # moto's default account
HOST = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com"
MEDIA = "application/vnd.docker.distribution.manifest.v2+json"


def manifest(seed: str) -> str:
    layer = "sha256:" + hashlib.sha256(seed.encode()).hexdigest()
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MEDIA,
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": 7,
                "digest": layer,
            },
            "layers": [
                {"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": 9, "digest": layer}
            ],
        }
    )


def push(repository: str, tag: str, seed: str) -> str:
    text = manifest(seed)
    digest = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    boto3.client("ecr").put_image(
        repositoryName=repository, imageManifest=text, imageTag=tag, imageDigest=digest
    )
    return digest


def tags_of(repository: str, digest: str) -> list[str]:
    images = boto3.client("ecr").describe_images(
        repositoryName=repository, imageIds=[{"imageDigest": digest}]
    )
    return sorted(images["imageDetails"][0].get("imageTags", []))


@pytest.fixture
def repos(aws: str) -> tuple[str, str]:
    """An immutable and a mutable repository, each with a candidate image."""
    ecr = boto3.client("ecr")
    ecr.create_repository(repositoryName="epstack", imageTagMutability="IMMUTABLE")
    ecr.create_repository(repositoryName="epstack-dev", imageTagMutability="MUTABLE")
    return push("epstack", "sglang-candidate", "one"), push("epstack-dev", "sglang-candidate", "one")


@pytest.mark.aws
def test_digest_prints_the_tags_digest(repos: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["publish", "digest", f"{HOST}/epstack:sglang-candidate"]) == 0
    assert capsys.readouterr().out == repos[0] + "\n"
    assert main(["publish", "digest", "epstack:no-such-tag"]) == 2
    assert "epstack:no-such-tag: no such tag" in capsys.readouterr().err
    assert main(["publish", "digest", "missing-repo:x"]) == 2


@pytest.mark.aws
def test_promote_retags_by_manifest(repos: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    digest = repos[0]
    assert (
        main(["publish", "promote", f"{HOST}/epstack:sglang-candidate", f"{HOST}/epstack:sglang-release"])
        == 0
    )
    assert tags_of("epstack", digest) == ["sglang-candidate", "sglang-release"]
    assert f"{HOST}/epstack:sglang-release -> {digest}" in capsys.readouterr().err
    # again: the tag already names the image, so nothing is written and nothing fails
    assert main(["publish", "promote", "epstack:sglang-candidate", "epstack:sglang-release"]) == 0
    assert f"epstack:sglang-release already is {digest}" in capsys.readouterr().err


@pytest.mark.aws
def test_promote_never_moves_an_immutable_tag(
    repos: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    other = push("epstack", "sglang-other", "two")
    assert main(["publish", "promote", "epstack:sglang-other", "epstack:sglang-candidate"]) == 2
    err = capsys.readouterr().err
    expected = f"epstack:sglang-candidate: the tag already exists (it names {repos[0]}) and epstack's tags"
    assert f"{expected} are immutable; fix: promote to a new tag" in err
    assert tags_of("epstack", repos[0]) == ["sglang-candidate"] and tags_of("epstack", other) == [
        "sglang-other"
    ]


@pytest.mark.aws
def test_promote_moves_a_mutable_tag(repos: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    other = push("epstack-dev", "sglang-other", "two")
    assert main(["publish", "promote", "epstack-dev:sglang-other", "epstack-dev:sglang-candidate"]) == 0
    assert tags_of("epstack-dev", other) == ["sglang-candidate", "sglang-other"]
    assert f"(was {repos[1]})" in capsys.readouterr().err


@pytest.mark.aws
def test_login_passes_the_token_password_on_stdin(aws: str) -> None:
    calls: list[tuple[str, str, str]] = []
    login(f"{HOST}/team", ecr=None, docker_login=lambda *args: calls.append(args), log=lambda m: None)
    assert calls == [
        (f"https://{HOST}", "AWS", f"{ACCOUNT}-auth-token")
    ]  # moto's token is AWS:<account>-auth-token
    calls.clear()
    login("127.0.0.1:5000", ecr=None, docker_login=lambda *args: calls.append(args), log=lambda m: None)
    assert calls == []
    with pytest.raises(BadInput, match="not an ECR registry"):
        login("registry.example.org", ecr=None, docker_login=lambda *args: None, log=lambda m: None)


def test_a_tag_written_by_someone_else_meanwhile_is_the_same_clear_error(fake_credentials: None) -> None:
    """AWS's ImageTagAlreadyExistsException (moto has none): the tag appeared between check and write."""
    client = boto3.client("ecr")
    text = manifest("one")
    digest = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    with Stubber(client) as stub:
        stub.add_response(
            "batch_get_image",
            {
                "images": [
                    {
                        "imageManifest": text,
                        "imageManifestMediaType": MEDIA,
                        "imageId": {"imageDigest": digest},
                    }
                ]
            },
        )
        stub.add_client_error("describe_images", "ImageNotFoundException", "not found", 400)
        stub.add_client_error("put_image", "ThrottlingException", "Rate exceeded", 400)
        stub.add_client_error(
            "put_image",
            "ImageTagAlreadyExistsException",
            "The image tag 'release' already exists in the 'epstack' repository and cannot be overwritten "
            "because the repository is immutable.",
            400,
        )
        ecr = Ecr(client=client, backoff=Backoff(sleep=lambda s: None))
        source, destination = parse_ecr_image("epstack:candidate"), parse_ecr_image("epstack:release")
        with pytest.raises(
            BadInput, match=r"^epstack:release: the tag already exists and epstack's tags are immutable"
        ):
            ecr.promote(source, destination, log=lambda m: None)
        stub.assert_no_pending_responses()


def test_image_references_parse() -> None:
    image = parse_ecr_image(f"{HOST}/team/epstack@sha256:{'a' * 64}")
    assert image == EcrImage(
        registry_id=ACCOUNT, region="us-east-1", repository="team/epstack", digest=f"sha256:{'a' * 64}"
    )
    assert str(parse_ecr_image("epstack:tag")) == "epstack:tag"
    for bad in ("epstack", "ghcr.io/x/epstack:tag", f"{HOST}/epstack"):
        with pytest.raises(BadInput):
            parse_ecr_image(bad)
