"""epstack.httpclient against a hostile server on 127.0.0.1 (tests/fakeserver.py): credentials stay with
their origin, only http(s) is spoken, answers are read within their cap and whole, JSON within its
bounds, and every failure is one line with the exit code of whose fault it is."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from epstack import httpclient
from epstack.errors import BAD_INPUT, ENVIRONMENT, BadInput, EnvironmentProblem
from tests.fakeserver import FakeServer, Reply, fake_server

pytestmark = pytest.mark.aws  # loopback only: the fake servers on 127.0.0.1 and 127.0.0.2

SECRET = {"Authorization": "Bearer s3cret-token"}


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with fake_server() as served:
        yield served


@pytest.fixture
def elsewhere() -> Iterator[FakeServer]:
    """Another origin: another loopback address."""
    with fake_server("127.0.0.2") as served:
        yield served


def get(url: str, **options: object) -> httpclient.Answer:
    return httpclient.request("GET", url, timeout=5, **options)  # type: ignore[arg-type]


def test_a_redirect_to_another_origin_drops_the_credentials(
    server: FakeServer, elsewhere: FakeServer
) -> None:
    server.replies["/a"] = Reply(302, headers={"Location": f"{elsewhere.url}/b"})
    server.replies["/c"] = Reply(307, headers={"Location": "/d"})
    server.replies["/d"] = Reply(200, b"same origin")
    elsewhere.replies["/b"] = Reply(200, b"moved")
    assert get(f"{server.url}/a", credentials=SECRET).body == b"moved"
    assert server.authorizations() == [SECRET["Authorization"]]
    assert elsewhere.authorizations() == [""], "the token stays with the origin it was given for"
    assert get(f"{server.url}/c", credentials=SECRET).body == b"same origin"
    assert server.authorizations()[-1] == SECRET["Authorization"], "kept on the same origin"


def test_a_redirect_of_a_write_is_not_followed(server: FakeServer, elsewhere: FakeServer) -> None:
    server.replies["/pulls"] = Reply(302, headers={"Location": f"{elsewhere.url}/pulls"})
    answer = httpclient.request("POST", f"{server.url}/pulls", data=b"{}", credentials=SECRET, timeout=5)
    assert answer.status == 302 and elsewhere.seen == []


@pytest.mark.parametrize(
    "location", ["file:///etc/passwd", "ftp://127.0.0.1/x", "http://10.0.0.1/internal", "data:,x"]
)
def test_a_redirect_goes_nowhere_but_https_or_loopback_http(server: FakeServer, location: str) -> None:
    server.replies["/a"] = Reply(301, headers={"Location": location})
    with pytest.raises(
        EnvironmentProblem, match=r"^GET http://127\.0\.0\.1:\d+/a redirected to .*not followed"
    ):
        get(f"{server.url}/a")


def test_redirects_end(server: FakeServer) -> None:
    server.replies["/loop"] = Reply(302, headers={"Location": "/loop"})
    with pytest.raises(EnvironmentProblem, match="redirected more than 5 times"):
        get(f"{server.url}/loop")
    assert len(server.seen) == 6


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("file:///etc/passwd", "is not an http(s) URL"),
        ("http://example.com/simple", "plain http to another machine"),
        ("http://127.0.0.1 :1/", "is not an http(s) URL"),
        ("https://host:99999/", "names no HOST[:PORT]"),
        ("https://ho st/", "is not an http(s) URL"),
        ("https://h\u0131st/", "is not an http(s) URL"),
    ],
)
def test_a_url_the_user_gave_is_checked_before_any_connection(url: str, problem: str) -> None:
    with pytest.raises(BadInput) as raised:
        get(url)
    assert problem in str(raised.value) and raised.value.exit_code == BAD_INPUT


def test_a_user_and_password_in_the_url_are_basic_credentials_never_shown(server: FakeServer) -> None:
    server.replies["/simple/"] = Reply(500, b"down")
    answer = get(f"http://me:pa%40ss@{server.url.removeprefix('http://')}/simple/")
    assert server.authorizations() == ["Basic bWU6cGFAc3M="]  # me:pa@ss
    assert "pa" not in answer.failed("answered HTTP 500").args[0].split("//")[1].split("/")[0]


def test_a_timeout_past_a_day_is_bad_input(server: FakeServer) -> None:
    for timeout in (1e300, float("inf"), float("nan"), 0.0, -1.0):
        with pytest.raises(BadInput, match="fix: give more than 0 and at most 86400 seconds"):
            httpclient.request("GET", server.url, timeout=timeout)
    assert server.seen == []


def test_a_header_http_cannot_carry_is_refused_without_showing_it(server: FakeServer) -> None:
    with pytest.raises(BadInput) as raised:
        get(server.url, credentials={"Authorization": "Bearer s3cr\x1bet\nX-Evil: 1"})
    assert "Authorization header" in str(raised.value) and "s3cr" not in str(raised.value)
    assert server.seen == []


def test_an_answer_is_read_within_its_cap(server: FakeServer) -> None:
    server.replies["/announced"] = Reply(body=b"x" * 2000)
    server.replies["/unannounced"] = Reply(body=b"x" * 1000, repeat=1000, length=-1)
    with pytest.raises(EnvironmentProblem, match=r"answered 2,000 bytes \(Content-Length\), over 1,000$"):
        get(f"{server.url}/announced", limit=1000)
    with pytest.raises(EnvironmentProblem, match=r"answered over 10,000 bytes, more than is read$"):
        get(f"{server.url}/unannounced", limit=10_000)
    assert get(f"{server.url}/announced", limit=2000).body == b"x" * 2000


def test_a_body_shorter_than_announced_is_an_error(server: FakeServer) -> None:
    server.replies["/short"] = Reply(body=b'{"files": []}', length=5000)
    with pytest.raises(EnvironmentProblem) as raised:
        get(f"{server.url}/short")
    assert str(raised.value).endswith("ended its body after 13 of 5,000 bytes announced")
    assert raised.value.exit_code == ENVIRONMENT


def test_a_dripping_body_ends_at_the_timeout(server: FakeServer) -> None:
    server.replies["/drip"] = Reply(body=b"x" * 100, drip_s=0.2)
    start = time.monotonic()
    with pytest.raises(EnvironmentProblem, match="answered too slowly"):
        httpclient.request("GET", f"{server.url}/drip", timeout=1)
    assert time.monotonic() - start < 5, "not the 20 s the whole body takes"


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"[" * 200_000 + b"]" * 200_000, "answered JSON nested deeper than 64"),
        (b'{"number": Infinity}', "answered JSON with Infinity, which JSON does not allow"),
        (b'{"number": NaN}', "answered JSON with NaN"),
        (b'{"number": 1e999}', "answered JSON with 1e999, a number past what a float holds"),
        (b'{"number": ' + b"7" * 5000 + b"}", "answered JSON with a number of 5,000 characters"),
        (b"<html>", "answered not JSON (Expecting value, line 1)"),
    ],
)
def test_json_answers_are_bounded(server: FakeServer, body: bytes, problem: str) -> None:
    server.replies["/j"] = Reply(body=body)
    with pytest.raises(EnvironmentProblem) as raised:
        get(f"{server.url}/j").json()
    assert problem in str(raised.value) and "\n" not in str(raised.value)


def test_server_text_is_shown_with_its_controls_escaped(server: FakeServer) -> None:
    server.replies["/e"] = Reply(500, b"\x1b[2J\x1b]0;owned\x07 \xe2\x80\xae")
    snippet = get(f"{server.url}/e").snippet()
    assert snippet == "\\x1b[2J\\x1b]0;owned\\x07 \\u202e"


def test_an_error_answer_is_read_only_as_far_as_a_message_quotes(server: FakeServer) -> None:
    server.replies["/big-error"] = Reply(500, b"e" * 1000, repeat=1000)
    with pytest.raises(EnvironmentProblem, match="answered 1,000,000 bytes"):
        get(f"{server.url}/big-error")


def test_nothing_listening_is_an_environment_problem() -> None:
    with pytest.raises(EnvironmentProblem, match=r"^GET http://127\.0\.0\.1:1/: no answer \(") as raised:
        get("http://127.0.0.1:1")
    assert raised.value.exit_code == ENVIRONMENT
