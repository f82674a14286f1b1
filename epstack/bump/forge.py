"""A bump's pull request on the forge, through its REST API; GitHub's first
(docs.github.com/rest/pulls/pulls: GET /repos/{owner}/{repo}/pulls?head=OWNER:BRANCH&state=open,
POST /repos/{owner}/{repo}/pulls -> 201, PATCH /repos/{owner}/{repo}/pulls/{number} -> 200).

The token comes from the environment (GITHUB_TOKEN) and goes only into the Authorization header: it is
never printed, logged or written. `open_pull_request` is idempotent: the open pull request of the head
branch is found and updated, or left alone when its title and body are already the bump's.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from epstack import httpclient
from epstack.errors import BadInput, EnvironmentProblem, shown

GITHUB_API = "https://api.github.com"
TOKEN_VARIABLE = "GITHUB_TOKEN"
FORGE_TIMEOUT_S = 30.0
_TOKEN = re.compile(r"[\x21-\x7e]+", re.ASCII)  # what a token is made of: printable ASCII, no space
_MAX_NUMBER = 2**31  # a pull request's number is a positive int32 on GitHub
_REMOTE = re.compile(  # https://github.com/O/R(.git), git@github.com:O/R.git, ssh://git@github.com/O/R
    r"^(?:https://(?:[^@/]+@)?|ssh://git@|git@)github\.com[:/](?P<owner>[\w.-]+)/(?P<repo>[\w.-]+?)(?:\.git)?/?$"
)
Action = Literal["created", "updated", "unchanged"]


@dataclass(frozen=True, kw_only=True)
class PullRequest:
    number: int
    url: str  # the page a reviewer opens (html_url)
    title: str
    body: str


class Forge(Protocol):
    """What a bump needs of a forge: the open pull request of a branch, a new one, an edit."""

    def find(self, head: str) -> PullRequest | None: ...
    def create(self, *, head: str, base: str, title: str, body: str) -> PullRequest: ...
    def update(self, number: int, *, title: str, body: str) -> PullRequest: ...


@dataclass(frozen=True, kw_only=True)
class GitHub:
    """One repository on GitHub (or a GitHub Enterprise server: GITHUB_API_URL)."""

    api: str
    owner: str
    repo: str
    token: str = field(repr=False)
    timeout: float = FORGE_TIMEOUT_S

    @classmethod
    def from_environment(cls, remote: str, env: Mapping[str, str] = os.environ) -> GitHub:
        """The repository of GITHUB_REPOSITORY (OWNER/REPO, as GitHub Actions sets it), else of the git
        remote `remote`; the API of GITHUB_API_URL, else api.github.com. BadInput without a token."""
        token = env.get(TOKEN_VARIABLE, "").strip()
        if not token:
            raise BadInput(
                f"--open-pr: {TOKEN_VARIABLE} is not set; fix: export {TOKEN_VARIABLE} with a token that may "
                "write pull requests and contents of the repository"
            )
        if not _TOKEN.fullmatch(token):
            raise BadInput(
                f"--open-pr: {TOKEN_VARIABLE} holds a character no token has (a control character, a space "
                f"or non-ASCII; the token is not shown); fix: export {TOKEN_VARIABLE} with the token alone"
            )
        named = env.get("GITHUB_REPOSITORY", "")
        match = (
            re.fullmatch(r"(?P<owner>[\w.-]+)/(?P<repo>[\w.-]+)", named) if named else _REMOTE.match(remote)
        )
        if match is None:
            where = f"GITHUB_REPOSITORY={shown(named)}" if named else f"the git remote {shown(remote)}"
            raise BadInput(
                f"--open-pr: {where} names no GitHub repository; fix: set GITHUB_REPOSITORY=OWNER/REPO"
            )
        api = (env.get("GITHUB_API_URL") or GITHUB_API).rstrip("/")
        httpclient.check_url(api, what="--open-pr: GITHUB_API_URL")
        return cls(api=api, owner=match["owner"], repo=match["repo"], token=token)

    def find(self, head: str) -> PullRequest | None:
        query = urllib.parse.urlencode({"head": f"{self.owner}:{head}", "state": "open"})
        found = self._call("GET", f"pulls?{query}")
        return _pull(found[0]) if isinstance(found, list) and found else None

    def create(self, *, head: str, base: str, title: str, body: str) -> PullRequest:
        return _pull(self._call("POST", "pulls", {"title": title, "head": head, "base": base, "body": body}))

    def update(self, number: int, *, title: str, body: str) -> PullRequest:
        return _pull(self._call("PATCH", f"pulls/{number}", {"title": title, "body": body}))

    def _call(self, method: str, path: str, payload: dict[str, str] | None = None) -> Any:
        """The JSON answer of one call; the token goes to the API's origin only (httpclient)."""
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "epstack",
        }
        data = json.dumps(payload).encode() if payload is not None else None
        if data is not None:
            headers["Content-Type"] = "application/json"
        try:
            answer = httpclient.request(
                method,
                f"{self.api}/repos/{self.owner}/{self.repo}/{path}",
                headers=headers,
                credentials={"Authorization": f"Bearer {self.token}"},
                data=data,
                timeout=self.timeout,
            )
        except EnvironmentProblem as exc:
            raise EnvironmentProblem(
                f"--open-pr: {exc}; fix: run where the forge is reachable, or set GITHUB_API_URL"
            ) from None
        if answer.status in (401, 403):
            raise BadInput(
                f"--open-pr: {answer.where()} answered HTTP {answer.status} ({_message(answer)}): "
                f"{TOKEN_VARIABLE} was refused; fix: a token of {self.owner}/{self.repo} with pull requests "
                "and contents write access"
            )
        if not answer.ok:
            raise EnvironmentProblem(
                f"--open-pr: {answer.where()} answered HTTP {answer.status} ({_message(answer)})"
            )
        try:
            return answer.json() if answer.body else None
        except EnvironmentProblem as exc:
            raise EnvironmentProblem(f"--open-pr: {exc}") from None


def _message(answer: httpclient.Answer) -> str:
    """GitHub's one-line reason ({"message": ...}), else the body's start; shown literally and bounded."""
    try:
        message = answer.json().get("message")
    except (EnvironmentProblem, AttributeError):
        message = None
    return shown(message, quote=False) if isinstance(message, str) and message else answer.snippet()


def _pull(answer: Any) -> PullRequest:
    """A pull request from the forge's answer: a positive int32 number and strings, else EnvironmentProblem
    (the forge answered something else)."""
    fields = answer if isinstance(answer, dict) else {}
    number = fields.get("number")
    url, title, body = (fields.get(key) or "" for key in ("html_url", "title", "body"))
    if (
        type(number) is not int
        or not 0 < number < _MAX_NUMBER
        or not all(isinstance(text, str) for text in (url, title, body))
        or not (url.startswith("https://") and url.isprintable())
    ):
        raise EnvironmentProblem(
            f"--open-pr: the forge answered no pull request: {shown(json.dumps(answer), quote=False)}"
        )
    return PullRequest(number=number, url=url, title=title, body=body)


def open_pull_request(
    forge: Forge, found: PullRequest | None, *, head: str, base: str, title: str, body: str
) -> tuple[Action, PullRequest]:
    """The open pull request of `head` (`found`: forge.find's answer) with this title and body:
    created, updated, or left as it is."""
    if found is None:
        return "created", forge.create(head=head, base=base, title=title, body=body)
    if (found.title, found.body) == (title, body):
        return "unchanged", found
    return "updated", forge.update(found.number, title=title, body=body)
