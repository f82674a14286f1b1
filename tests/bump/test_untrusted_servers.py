"""What `pins bump` and `pins outdated` do with hostile upstream servers (issue 46), each a fake server on
127.0.0.1 (tests/fakeserver.py), another origin on 127.0.0.2: the forge's token stays with the forge,
a registry does not pick where its token comes from, the index's garbage is an error, and no answer
becomes a traceback."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from epstack.bump.forge import GitHub
from epstack.bump.upstream import current_digest, ls_remote
from epstack.cmd import call
from epstack.errors import BAD_INPUT, ENVIRONMENT, BadInput, CommandFailed, EnvironmentProblem
from epstack.python.releases import releases
from tests.bump.standinforge import OWNER, REPO, TOKEN
from tests.fakeserver import FakeServer, Reply, fake_server

pytestmark = pytest.mark.aws  # loopback only: the fake servers on 127.0.0.1 and 127.0.0.2

REMOTE = f"https://github.com/{OWNER}/{REPO}.git"
PULLS = f"/repos/{OWNER}/{REPO}/pulls"
TAG = "13.0.3-devel-ubuntu24.04"
DIGEST = "sha256:" + "b" * 64


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with fake_server() as served:
        yield served


@pytest.fixture
def elsewhere() -> Iterator[FakeServer]:
    with fake_server("127.0.0.2") as served:
        yield served


def forge_at(url: str, token: str = TOKEN) -> GitHub:
    return GitHub.from_environment(REMOTE, {"GITHUB_TOKEN": token, "GITHUB_API_URL": url})


def one_line(raised: pytest.ExceptionInfo[Exception]) -> str:
    message = str(raised.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_the_forge_token_does_not_follow_a_redirect_to_another_host(
    server: FakeServer, elsewhere: FakeServer
) -> None:
    server.replies[PULLS] = Reply(302, headers={"Location": f"{elsewhere.url}{PULLS}"})
    elsewhere.replies[PULLS] = Reply(200, b"[]", headers={"Content-Type": "application/json"})
    assert forge_at(server.url).find("b") is None
    assert server.authorizations() == [f"Bearer {TOKEN}"] and elsewhere.authorizations() == [""]


def test_a_create_answered_by_a_redirect_is_not_sent_on(server: FakeServer, elsewhere: FakeServer) -> None:
    server.replies[PULLS] = Reply(302, headers={"Location": f"{elsewhere.url}{PULLS}"})
    with pytest.raises(EnvironmentProblem) as raised:
        forge_at(server.url).create(head="b", base="main", title="t", body="b")
    assert f"POST {server.url}{PULLS} answered HTTP 302" in one_line(raised)
    assert raised.value.exit_code == ENVIRONMENT and elsewhere.seen == []


def test_a_plain_http_api_on_another_host_is_refused() -> None:
    with pytest.raises(BadInput, match=r"GITHUB_API_URL 'http://github\.example/api/v3' is plain http"):
        forge_at("http://github.example/api/v3")


@pytest.mark.parametrize("token", ["ghp_abc\x1bdef", "ghp_abc\ndef", "ghp_abc def", "ghp_\u00e9t\u00e9"])
def test_a_token_no_token_can_be_is_refused_without_being_shown(server: FakeServer, token: str) -> None:
    with pytest.raises(BadInput) as raised:
        forge_at(server.url, token).find("b")
    message = one_line(raised)
    assert "GITHUB_TOKEN holds a character no token has" in message and "abc" not in message
    assert raised.value.exit_code == BAD_INPUT and server.seen == []


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        (Reply(body=b'{"number": 1, "html_url": "https://x/1"', length=4096), "ended its body after"),
        (Reply(body=b"[" * 200_000 + b"]" * 200_000), "JSON nested deeper than 64"),
        (Reply(body=b'{"number": Infinity, "html_url": "https://x/1"}'), "JSON with Infinity"),
        (Reply(body=b'{"number": ' + b"9" * 5000 + b', "html_url": "https://x/1"}'), "5,000 characters"),
        (Reply(body=b'{"number": 1e300, "html_url": "https://x/1"}'), "answered no pull request"),
        (Reply(body=b'{"number": 1, "html_url": "https://x/\\u001b[2J"}'), "answered no pull request"),
        (Reply(body=b"\x1b[31m" * 10), "answered not JSON"),
    ],
)
def test_a_forge_answer_out_of_bounds_is_one_line_exit_3(
    server: FakeServer, reply: Reply, problem: str
) -> None:
    server.replies[PULLS] = reply
    with pytest.raises(EnvironmentProblem) as raised:
        forge_at(server.url).create(head="b", base="main", title="t", body="b")
    message = one_line(raised)
    assert message.startswith("--open-pr: ") and problem in message and "\x1b" not in message
    assert raised.value.exit_code == ENVIRONMENT


def test_an_error_message_from_the_forge_is_printed_literally(server: FakeServer) -> None:
    server.replies[PULLS] = Reply(422, json.dumps({"message": "bad\x1b]0;owned\x07\nline"}).encode())
    with pytest.raises(EnvironmentProblem) as raised:
        forge_at(server.url).create(head="b", base="main", title="t", body="b")
    assert one_line(raised).endswith("answered HTTP 422 (bad\\x1b]0;owned\\x07\\nline)")


def registry_pin(server: FakeServer) -> str:
    return f"{server.url.removeprefix('http://')}/nvidia/cuda:{TAG}@sha256:{'a' * 64}"


def challenge(realm: str) -> Reply:
    return Reply(401, headers={"WWW-Authenticate": f'Bearer realm="{realm}",service="registry"'})


@pytest.mark.parametrize(
    ("realm", "problem"),
    [
        ("file:///etc/passwd", "token realm 'file:///etc/passwd' is not an http(s) URL"),
        ("http://10.1.2.3/token", "token realm 'http://10.1.2.3/token' is plain http to another machine"),
        ("gopher://127.0.0.1/", "is not an http(s) URL"),
    ],
)
def test_a_registry_does_not_pick_where_its_token_comes_from(
    server: FakeServer, realm: str, problem: str
) -> None:
    server.replies[f"/v2/nvidia/cuda/manifests/{TAG}"] = challenge(realm)
    with pytest.raises(EnvironmentProblem) as raised:
        current_digest("CUDA_DEVEL_IMAGE", registry_pin(server))
    message = one_line(raised)
    assert message.startswith("CUDA_DEVEL_IMAGE: ") and problem in message
    assert len(server.seen) == 1, "nothing sent back to the registry"


def test_a_token_from_the_realm_is_sent_to_the_registry_only(
    server: FakeServer, elsewhere: FakeServer
) -> None:
    manifest = f"/v2/nvidia/cuda/manifests/{TAG}"
    server.replies[manifest] = lambda seen: (
        Reply(200, headers={"Docker-Content-Digest": DIGEST})
        if seen.headers.get("Authorization") == "Bearer abc.def"
        else challenge(f"{elsewhere.url}/token")
    )
    elsewhere.replies["/token"] = Reply(200, b'{"token": "abc.def"}')
    assert current_digest("CUDA_DEVEL_IMAGE", registry_pin(server)).endswith(f"@{DIGEST}")
    assert server.authorizations() == ["", "Bearer abc.def"] and elsewhere.authorizations() == [""]
    assert elsewhere.seen[0].path == "/token?service=registry"


@pytest.mark.parametrize(
    "token", [b'{"token": "a b\\r\\nX: y"}', b'{"token": 7}', b"[]", b'{"token": "' + b"t" * 9000 + b'"}']
)
def test_a_realm_answering_no_bearer_token_is_refused(
    server: FakeServer, elsewhere: FakeServer, token: bytes
) -> None:
    server.replies[f"/v2/nvidia/cuda/manifests/{TAG}"] = challenge(f"{elsewhere.url}/token")
    elsewhere.replies["/token"] = Reply(200, token)
    with pytest.raises(EnvironmentProblem, match="answered no bearer token"):
        current_digest("CUDA_DEVEL_IMAGE", registry_pin(server))


def test_a_digest_that_is_not_a_sha256_is_refused(server: FakeServer) -> None:
    server.replies[f"/v2/nvidia/cuda/manifests/{TAG}"] = Reply(
        200, headers={"Docker-Content-Digest": "sha256:x"}
    )
    with pytest.raises(EnvironmentProblem, match="without a sha256 Docker-Content-Digest"):
        current_digest("CUDA_DEVEL_IMAGE", registry_pin(server))


JSON_PAGE = {"Content-Type": "application/vnd.pypi.simple.v1+json"}


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        (Reply(200, b"hello", headers={"Content-Type": "text/plain"}), "answered text/plain, not a project"),
        (Reply(200, b"<html><body>maintenance</body></html>", headers={"Content-Type": "text/html"}),
         "lists no file of sglang"),
        (Reply(200, b'{"meta": {}}', headers=JSON_PAGE), "answered no PEP 691 project page"),
        (Reply(200, b'{"files": []}', headers=JSON_PAGE, length=100_000), "ended its body after 13"),
        (Reply(200, b'{"files": ' + b"[" * 100_000, headers=JSON_PAGE), "JSON nested deeper than 64"),
        (Reply(200, b'{"files": [], "x": -Infinity}', headers=JSON_PAGE), "JSON with -Infinity"),
    ],
)  # fmt: skip
def test_an_index_answering_garbage_is_an_error_not_nothing_newer(
    server: FakeServer, reply: Reply, problem: str
) -> None:
    server.replies["/simple/sglang/"] = reply
    with pytest.raises(EnvironmentProblem) as raised:
        releases("sglang", index=f"{server.url}/simple")
    assert problem in one_line(raised) and raised.value.exit_code == ENVIRONMENT


def test_an_index_page_with_a_5000_digit_version_keeps_the_real_releases(server: FakeServer) -> None:
    files = [f"sglang-{'9' * 5000}.tar.gz", f"sglang-{'9' * 200}-py3-none-any.whl", "sglang-0.5.24.tar.gz",
             "sglang-0.5.\u0662\u0664.tar.gz", "sglang-0.5.23-py3-none-any.whl"]  # fmt: skip
    body = json.dumps({"files": [{"filename": name} for name in files]}).encode()
    server.replies["/simple/sglang/"] = Reply(200, body, headers=JSON_PAGE)
    assert releases("sglang", index=f"{server.url}/simple") == ("0.5.24", "0.5.23")


def test_what_a_git_server_says_is_printed_literally(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """git prints the remote's own text ("remote: ..."); a stand-in git says what a hostile one would."""
    (tmp_path / "git").write_text(
        "#!/bin/sh\nprintf 'remote: \\033]0;owned\\007\\033[2J gone\\n' >&2\nexit 128\n"
    )
    (tmp_path / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with pytest.raises(EnvironmentProblem) as raised:
        ls_remote("https://git.example/repo.git", "--tags")
    assert one_line(raised).endswith("remote: \\x1b]0;owned\\x07\\x1b[2J gone")
    with pytest.raises(CommandFailed) as failed:
        call("git", "push", capture=True)
    assert "\x1b" not in str(failed.value) and "\\x1b[2J gone" in str(failed.value)
