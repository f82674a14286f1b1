"""epstack.bump.forge against the stand-in forge on 127.0.0.1 (tests/bump/standinforge.py): a pull
request created, found and updated, left alone when it already says it; a token missing or refused is
one line that says so and never shows the token."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from epstack.bump.forge import GitHub, open_pull_request
from epstack.errors import BAD_INPUT, ENVIRONMENT, BadInput, EnvironmentProblem
from tests.bump.standinforge import OWNER, REPO, TOKEN, Forge, standin_forge
from tests.registry import free_port

pytestmark = pytest.mark.aws  # loopback only: the stand-in forge on 127.0.0.1

REMOTE = f"https://github.com/{OWNER}/{REPO}.git"


@pytest.fixture
def forge() -> Iterator[Forge]:
    with standin_forge() as served:
        yield served


def github(forge: Forge, token: str = TOKEN) -> GitHub:
    return GitHub.from_environment(REMOTE, {"GITHUB_TOKEN": token, "GITHUB_API_URL": forge.url})


def test_create_then_nothing_to_do_then_update(forge: Forge) -> None:
    client = github(forge)
    action, pull = open_pull_request(client, client.find("b"), head="b", base="main", title="t", body="one")
    assert (action, pull.number, pull.url) == ("created", 1, f"https://github.com/{OWNER}/{REPO}/pull/1")
    create = forge.calls[-1]
    assert create.payload == {"title": "t", "head": "b", "base": "main", "body": "one"}
    assert create.authorization == f"Bearer {TOKEN}"
    assert forge.calls[0].query == {"head": f"{OWNER}:b", "state": "open"}, "found by its head branch"

    action, again = open_pull_request(client, client.find("b"), head="b", base="main", title="t", body="one")
    assert (action, again.number) == ("unchanged", 1)
    assert forge.writes() == [("POST", f"/repos/{OWNER}/{REPO}/pulls")], "nothing sent when nothing changed"

    action, updated = open_pull_request(
        client, client.find("b"), head="b", base="main", title="t", body="two"
    )
    assert (action, updated.number, updated.body) == ("updated", 1, "two")
    assert forge.writes()[-1] == ("PATCH", f"/repos/{OWNER}/{REPO}/pulls/1")
    assert forge.calls[-1].payload == {"title": "t", "body": "two"}
    assert len(forge.pulls) == 1


def test_a_closed_pull_request_is_not_reused(forge: Forge) -> None:
    client = github(forge)
    open_pull_request(client, None, head="b", base="main", title="t", body="one")
    forge.pulls[0]["state"] = "closed"
    action, pull = open_pull_request(client, client.find("b"), head="b", base="main", title="t", body="one")
    assert (action, pull.number) == ("created", 2)


@pytest.mark.parametrize(("status", "reason"), [(0, "Bad credentials"), (401, "Bad credentials"),
                                               (403, "Resource not accessible by integration")])  # fmt: skip
def test_a_refused_token_is_one_line_without_the_token(forge: Forge, status: int, reason: str) -> None:
    forge.refuse = status
    client = github(forge, token="wrong-token" if not status else TOKEN)
    with pytest.raises(BadInput) as raised:
        client.find("b")
    message = str(raised.value)
    assert f"answered HTTP {status or 401} ({reason})" in message and "GITHUB_TOKEN was refused" in message
    assert (
        "\n" not in message and "token" in message and TOKEN not in message and "wrong-token" not in message
    )
    assert raised.value.exit_code == BAD_INPUT


@pytest.mark.parametrize("token", ["", "  "])
def test_no_token_is_bad_input_before_any_call(token: str) -> None:
    with pytest.raises(BadInput, match=r"^--open-pr: GITHUB_TOKEN is not set; fix: export GITHUB_TOKEN"):
        GitHub.from_environment(REMOTE, {"GITHUB_TOKEN": token})


def test_an_unreachable_forge_is_an_environment_problem() -> None:
    client = GitHub.from_environment(
        REMOTE, {"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": f"http://127.0.0.1:{free_port()}"}
    )
    with pytest.raises(
        EnvironmentProblem,
        match=r"^--open-pr: GET http://127\.0\.0\.1:\d+/repos/acme/epstack/pulls: no answer ",
    ) as raised:
        client.find("b")
    assert raised.value.exit_code == ENVIRONMENT


@pytest.mark.parametrize(
    ("remote", "env", "expected"),
    [
        ("https://github.com/acme/epstack.git", {}, ("acme", "epstack")),
        ("git@github.com:acme/ep.stack.git", {}, ("acme", "ep.stack")),
        ("ssh://git@github.com/acme/epstack", {}, ("acme", "epstack")),
        ("/srv/git/epstack.git", {"GITHUB_REPOSITORY": "org/fork"}, ("org", "fork")),
    ],
)
def test_the_repository_from_the_remote_or_github_repository(
    remote: str, env: dict[str, str], expected: tuple[str, str]
) -> None:
    client = GitHub.from_environment(remote, {"GITHUB_TOKEN": TOKEN, **env})
    assert (client.owner, client.repo, client.api) == (*expected, "https://api.github.com")
    assert TOKEN not in repr(client)


def test_a_remote_off_github_names_the_fix() -> None:
    with pytest.raises(
        BadInput,
        match=r"the git remote '/srv/git/x.git' names no GitHub repository; fix: set GITHUB_REPOSITORY",
    ):
        GitHub.from_environment("/srv/git/x.git", {"GITHUB_TOKEN": TOKEN})
