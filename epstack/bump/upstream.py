"""What upstream has beside the package index, for `epstack pins outdated` and `pins bump`: the tags
and commits of a git repository (`git ls-remote`), the tags and digests of an image repository (the
registry's HTTP API v2, anonymous, with the bearer token Docker Hub asks for), and where a reviewer
reads what a release or a commit range brings. Each question is bounded by a timeout and says how it
failed as an EnvironmentProblem; the caller turns that into a row, or the command's one-line error.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from epstack import httpclient
from epstack.cmd import run
from epstack.errors import EnvironmentProblem, EpstackError, printable, shown
from epstack.httpclient import is_loopback
from epstack.image.registry import MANIFEST_TYPES
from epstack.oci import parse_reference
from epstack.pins.deepepsources import git_sources

GIT_TIMEOUT_S = 30.0
REGISTRY_TIMEOUT_S = 20.0
DOCKER_HUB_API = "https://registry-1.docker.io"
_MAX_TAG_PAGES = 20
IMAGE_KEYS = ("CUDA_DEVEL_IMAGE", "CUDA_RUNTIME_IMAGE")  # the pins that name an image by tag and digest
# Where a release's notes are, by the pin that names the release.
RELEASE_NOTES = {
    "SGLANG_VERSION": "https://github.com/sgl-project/sglang/releases/tag/v{version}",
    "TORCH_VERSION": "https://github.com/pytorch/pytorch/releases/tag/v{version}",
    "NCCL_VERSION": "https://github.com/NVIDIA/nccl/releases/tag/v{version}-1",
}
# v2.5.2, 12.1.0, v2.30.7-1: ASCII digits, a few parts of a few digits each (a tag is a server's text).
_NUMBERS = r"[0-9]{1,12}(?:\.[0-9]{1,12}){1,5}"
_RELEASE_TAG = re.compile(rf"v?(?P<version>{_NUMBERS})(?:-1)?", re.ASCII)
_TOKEN = re.compile(r"[A-Za-z0-9._~+/=-]{1,8192}", re.ASCII)  # RFC 6750's b64token, bounded


def ls_remote_command(repo: str, *refs: str) -> tuple[str, ...]:
    """The `git ls-remote` that lists `refs` of `repo` (all tags when `refs` is ("--tags",))."""
    flags = tuple(ref for ref in refs if ref.startswith("-"))
    return ("git", "ls-remote", *flags, "--", repo, *(ref for ref in refs if not ref.startswith("-")))


def ls_remote(repo: str, *refs: str, timeout: float = GIT_TIMEOUT_S) -> dict[str, str]:
    """ref name -> commit; an annotated tag's ref names the commit it points at (its ^{} line)."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_HTTP_LOW_SPEED_LIMIT": "1000",
           "GIT_HTTP_LOW_SPEED_TIME": str(int(timeout))}  # fmt: skip
    try:
        result = run(*ls_remote_command(repo, *refs), env=env, timeout=timeout)
    except EpstackError as exc:  # no git, or no answer within the timeout
        raise EnvironmentProblem(str(exc)) from None
    if result.returncode != 0:
        detail = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
        raise EnvironmentProblem(f"git ls-remote {repo}: {printable(detail)}")
    refs_found: dict[str, str] = {}
    for line in result.stdout.splitlines():
        commit, _, ref = line.partition("\t")
        if ref.endswith("^{}"):
            refs_found[ref[:-3]] = commit
        else:
            refs_found.setdefault(ref, commit)
    return refs_found


def newest_release_tag(tags: dict[str, str]) -> tuple[str, str] | None:
    """(tag, commit) of the highest release-looking tag (v1.2.3, 1.2.3, v2.30.7-1); None if there is none."""
    releases = {}
    for ref, commit in tags.items():
        name = ref.removeprefix("refs/tags/")
        match = _RELEASE_TAG.fullmatch(name)
        if match:
            releases[Version(match["version"])] = (name, commit)
    return releases[max(releases)] if releases else None


@dataclass(frozen=True, kw_only=True)
class ImageRepository:
    """An image repository as its registry's API names it."""

    api: str  # https://registry-1.docker.io, or http://127.0.0.1:PORT for a loopback registry
    name: str  # library/ubuntu, nvidia/cuda
    timeout: float = REGISTRY_TIMEOUT_S

    @classmethod
    def of(cls, repository: str, *, hub: str = DOCKER_HUB_API) -> ImageRepository:
        """`repository` as written in a reference: [host[:port]/]path; no host is Docker Hub (`hub`)."""
        first, slash, rest = repository.partition("/")
        if slash and ("." in first or ":" in first or first == "localhost"):
            scheme = "http" if is_loopback(first) else "https"
            return cls(api=f"{scheme}://{first}", name=rest)
        return cls(api=hub.rstrip("/"), name=repository if slash else f"library/{repository}")

    def tags(self) -> list[str]:
        """Every tag, page after page (Link: rel="next"), up to _MAX_TAG_PAGES pages."""
        tags: list[str] = []
        path: str | None = f"/v2/{self.name}/tags/list?n=1000"
        for _ in range(_MAX_TAG_PAGES):
            if path is None:
                break
            answer = self._get(path, "application/json")
            listed = answer.json()
            page = listed.get("tags") if isinstance(listed, dict) else None
            if not isinstance(page, list | None) or not all(isinstance(tag, str) for tag in page or []):
                raise answer.failed("answered no tag list ({'tags': [...]})")
            tags += page or []
            next_link = re.match(r'\s*<([^>]+)>\s*;\s*rel="?next"?', answer.headers.get("Link", ""))
            path = next_link[1] if next_link else None
        return tags

    def digest(self, tag: str) -> str:
        """The digest `tag` points at now (the index's, for a multi-platform image)."""
        answer = self._get(f"/v2/{self.name}/manifests/{tag}", ", ".join(MANIFEST_TYPES), method="HEAD")
        return str(answer.headers.get("Docker-Content-Digest", ""))

    def _get(self, path: str, accept: str, *, method: str = "GET", token: str = "") -> httpclient.Answer:
        """The answer of `path` on the registry, with the anonymous pull token a 401 asks for."""
        url = httpclient.check_url(urllib.parse.urljoin(self.api + "/", path), error=EnvironmentProblem)
        if url.origin != httpclient.check_url(self.api).origin:
            raise EnvironmentProblem(f"{self.api}: its next page {shown(path)} is on another server")
        credentials = {"Authorization": f"Bearer {token}"} if token else {}
        answer = httpclient.request(
            method, url, headers={"Accept": accept}, credentials=credentials, timeout=self.timeout
        )
        challenge = answer.headers.get("WWW-Authenticate", "")
        if answer.status == 401 and not token and challenge.startswith("Bearer "):
            return self._get(path, accept, method=method, token=self._token(challenge))
        if not answer.ok:
            raise answer.failed(f"answered HTTP {answer.status}")
        return answer

    def _token(self, challenge: str) -> str:
        """An anonymous pull token from the realm the registry's challenge names: an https URL (http only
        where the registry too is on this machine), asked with no credentials, answering a bearer token."""
        fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        query = urllib.parse.urlencode({k: v for k, v in fields.items() if k in ("service", "scope")})
        realm = fields.get("realm", "")
        what = f"{self.api}'s token realm"
        url = httpclient.check_url(realm, error=EnvironmentProblem, what=what, fix="fix: ask its operator")
        if url.scheme == "http" and not is_loopback(urllib.parse.urlsplit(self.api).netloc):
            raise EnvironmentProblem(f"{what} {url.shown} is plain http for a registry on another machine")
        answer = httpclient.request(
            "GET", f"{url.text}{'&' if '?' in url.rest else '?'}{query}", timeout=self.timeout
        )
        if not answer.ok:
            raise answer.failed(f"answered HTTP {answer.status}: no pull token")
        found = answer.json()
        token = (found.get("token") or found.get("access_token")) if isinstance(found, dict) else None
        if not isinstance(token, str) or not _TOKEN.fullmatch(token):
            raise answer.failed("answered no bearer token")
        return token


def current_digest(key: str, pinned: str, *, hub: str = DOCKER_HUB_API) -> str:
    """`pinned` (the value of `key`: REPOSITORY:TAG@sha256:...) with the digest its tag points at now,
    asked of the registry (HEAD of the manifest); EnvironmentProblem, with the fix, when it cannot be
    asked or names no digest."""
    reference = parse_reference(pinned)
    repository = ImageRepository.of(reference.repository, hub=hub)
    fix = f"fix: run where the registry answers, or give {key}=IMAGE:TAG@sha256:..."
    try:
        digest = repository.digest(reference.tag)
    except EnvironmentProblem as exc:
        raise EnvironmentProblem(f"{key}: {exc}; {fix}") from None
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest, re.ASCII):
        raise EnvironmentProblem(
            f"{key}: {repository.api} answered for {reference.repository}:{reference.tag} without a sha256 "
            f"Docker-Content-Digest; {fix}"
        )
    return f"{reference.repository}:{reference.tag}@{digest}"


def newest_image_tag(tags: list[str], pinned: str, *, minor: str = "") -> str | None:
    """The highest tag shaped like `pinned` (13.0.3-devel-ubuntu24.04: VERSION-devel-ubuntu24.04), and
    of CUDA `minor` (13.0) when given; None if there is none."""
    _, sep, suffix = pinned.partition("-")
    if not sep:
        return None
    found: dict[Version, str] = {}
    for tag in tags:
        head, _, tail = tag.partition("-")
        if tail != suffix or not re.fullmatch(_NUMBERS, head, re.ASCII):
            continue
        if minor and not (head == minor or head.startswith(f"{minor}.")):
            continue
        try:
            found[Version(head)] = tag
        except InvalidVersion:
            continue
    return found[max(found)] if found else None


def change_links(
    pinned: Mapping[str, str], changes: Mapping[str, tuple[str, str]]
) -> tuple[tuple[str, str], ...]:
    """(what, URL) where a reviewer reads what a bump brings: the new release's notes, and the compare
    view between the old and new commit of a git pin on GitHub (DeepEP's, fmt's, GDRCopy's)."""
    links = [
        (f"{key} {new}: release notes", RELEASE_NOTES[key].format(version=new))
        for key, (_, new) in changes.items()
        if key in RELEASE_NOTES
    ]
    for source in git_sources(pinned):
        if source.key in changes and source.repo.startswith("https://github.com/"):
            old, new = changes[source.key]
            repo = source.repo.removesuffix(".git")
            links.append((f"{source.name} {old[:12]}...{new[:12]}: compare", f"{repo}/compare/{old}...{new}"))
    return tuple(links)
