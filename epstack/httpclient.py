"""The one HTTP client for every server epstack asks: the forge, registries and their token realms, the
package index, SGLang. What a server answers is untrusted, and so is where it sends us:

- http and https only (never file:, ftp: or data:), https unless the host is a loopback address (the
  serve smoke's endpoint excepted, `plain_http`: SGLang serves plain HTTP on a cluster's network, and
  the smoke sends it no credential);
- a URL is one host and port, no spaces; a user and password in it become Basic credentials;
- credentials (Authorization, a URL's user and password) go to the URL's origin only: a redirect to
  another scheme, host or port drops them; only GET and HEAD follow redirects, 5 at most;
- every answer is read in chunks up to a cap (`limit`), never whole: a 300 MB answer costs `limit`
  bytes of memory, and a body shorter than its Content-Length is an error, not a short answer;
- a timeout of at most MAX_TIMEOUT_S on the connection and each read, and the body read within it;
- JSON answers through epstack.inputs.parse_json (bounded depth, finite numbers of bounded length);
- every failure one line: BadInput (exit 2) for what the user gave (the URL, a timeout, a header
  value), EnvironmentProblem (exit 3) for what the server did; server text shown with its control
  characters escaped (epstack.errors.printable).

Standard library only (urllib's handlers for HTTP, HTTPS and proxies, none for redirects, files or
errors): the images install epstack without extras, and the serve smoke runs there.
"""

from __future__ import annotations

import base64
import ipaddress
import math
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import Message
from http.client import HTTPException, HTTPResponse
from typing import Any

from epstack.errors import BadInput, EnvironmentProblem, EpstackError, printable, shown
from epstack.inputs import parse_json

MAX_BODY_BYTES = 16 << 20  # a forge's or registry's answer is kilobytes
MAX_ERROR_BYTES = 64 << 10  # of an answer that is an error, only what a message quotes
MAX_TIMEOUT_S = 24 * 3600.0
MAX_REDIRECTS = 5
_NOT_FOLLOWED = "not followed; fix: point epstack at the server's own https URL"
_CHUNK = 64 << 10
_REDIRECTS = (301, 302, 303, 307, 308)
_HEADER_VALUE = re.compile(r"[\x20-\x7e\t]*", re.ASCII)


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost, with or without a port ([::1]:5000 for IPv6 with one)."""
    if host.startswith("[") and "]" in host:
        name = host[1 : host.index("]")]
    elif host.count(":") == 1:
        name = host.rsplit(":", 1)[0]
    else:
        name = host
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, kw_only=True)
class Url:
    """A URL checked for a request: scheme, host[:port] and the rest; its user and password apart."""

    scheme: str
    netloc: str  # host[:port], no user
    rest: str  # path, query
    userinfo: str = ""

    @property
    def origin(self) -> tuple[str, str]:
        return self.scheme, self.netloc

    @property
    def text(self) -> str:
        return f"{self.scheme}://{self.netloc}{self.rest}"

    @property
    def shown(self) -> str:
        """The URL as a message names it: no user or password, no query."""
        return shown(f"{self.scheme}://{self.netloc}{self.rest.split('?', 1)[0]}", quote=False)


_FIX = "fix: write https://HOST[:PORT]/PATH (http only to 127.0.0.1, ::1 or localhost)"
_NETLOC = re.compile(
    r"(?P<host>[A-Za-z0-9][A-Za-z0-9.-]{0,252}|\[[0-9A-Fa-f:.]{2,45}\])(?::(?P<port>[0-9]{1,5}))?", re.ASCII
)


def check_url(
    text: str,
    *,
    error: type[EpstackError] = BadInput,
    what: str = "the URL",
    fix: str = _FIX,
    plain_http: bool = False,
) -> Url:
    """`text` as a Url; `error` naming `what` and `fix` for anything but http(s)://HOST[:PORT]/... in
    printable ASCII, and for plain http to a host that is not a loopback address (unless `plain_http`)."""
    parts = urllib.parse.urlsplit(text) if text.isascii() and text.isprintable() else None
    if parts is None or parts.scheme not in ("http", "https") or " " in text:
        raise error(f"{what} {shown(_without_userinfo(text))} is not an http(s) URL; {fix}")
    userinfo, _, netloc = parts.netloc.rpartition("@")
    found = _NETLOC.fullmatch(netloc)
    if found is None or (found["port"] is not None and not 0 < int(found["port"]) < 65536):
        raise error(f"{what} {shown(_without_userinfo(text))} names no HOST[:PORT]; {fix}")
    if parts.scheme == "http" and not (plain_http or is_loopback(netloc)):
        raise error(
            f"{what} {shown(_without_userinfo(text))} is plain http to another machine (what goes and "
            f"comes back can be read and changed on the way); {fix}"
        )
    rest = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    return Url(scheme=parts.scheme, netloc=netloc, rest=rest, userinfo=userinfo)


def _without_userinfo(text: str) -> str:
    return re.sub(r"(://)[^/?#@]*@", r"\1", text, count=1)


def check_timeout(timeout: float, what: str = "the timeout") -> float:
    """A timeout of more than 0 and at most MAX_TIMEOUT_S seconds; BadInput otherwise."""
    if not (math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT_S):
        raise BadInput(f"{what} {timeout!r} s: fix: give more than 0 and at most {MAX_TIMEOUT_S:g} seconds")
    return timeout


def _check_headers(headers: Mapping[str, str]) -> None:
    """Header values HTTP can carry: printable ASCII; BadInput naming the header, never its value."""
    for name, value in headers.items():
        if not _HEADER_VALUE.fullmatch(value):
            raise BadInput(
                f"the {name} header would hold a character HTTP cannot carry (a control character, a "
                "line break or non-ASCII; the value is not shown); fix: check the token it is made of"
            )


@dataclass(frozen=True, kw_only=True)
class Answer:
    """A server's answer, read whole within the cap."""

    method: str
    url: Url  # the URL that answered, after any redirect
    status: int
    headers: Message
    body: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def where(self) -> str:
        return f"{self.method} {self.url.shown}"

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def snippet(self, length: int = 200) -> str:
        """The body's start as a message quotes it: one line, its controls escaped; "no body" for none."""
        text = " ".join(self.text().split())
        return printable(text[:length]) + ("..." if len(text) > length else "") if text else "no body"

    def failed(self, why: str) -> EnvironmentProblem:
        """The one-line error for this answer: `why` (the server's doing, so exit 3)."""
        return EnvironmentProblem(f"{self.where()} {why}")

    def json(self) -> Any:
        """The body as JSON within epstack.inputs' bounds; EnvironmentProblem naming the URL otherwise."""
        try:
            return parse_json(self.body)
        except ValueError as exc:
            raise self.failed(f"answered {exc}") from None


def _opener(url: Url) -> urllib.request.OpenerDirector:
    """HTTP and HTTPS, through the environment's proxy unless the host is this machine; no handler for
    redirects (followed here), errors (an answer like any other), files or data URLs."""
    opener = urllib.request.OpenerDirector()
    handlers: list[urllib.request.BaseHandler] = [urllib.request.HTTPHandler(), urllib.request.HTTPSHandler()]
    if not is_loopback(url.netloc):
        handlers.append(urllib.request.ProxyHandler())
    for handler in handlers:
        opener.add_handler(handler)
    return opener


def _read(response: HTTPResponse, where: str, *, limit: int, deadline: float) -> bytes:
    """The body in chunks, at most `limit` bytes and by `deadline`; the whole body its Content-Length says."""
    declared = response.headers.get("Content-Length", "")
    length = int(declared) if declared.isascii() and declared.isdigit() else None
    if length is not None and length > limit:
        raise EnvironmentProblem(f"{where} answered {length:,} bytes (Content-Length), over {limit:,}")
    body = bytearray()
    while chunk := response.read1(min(_CHUNK, limit + 1 - len(body))):
        body += chunk
        if len(body) > limit:
            raise EnvironmentProblem(f"{where} answered over {limit:,} bytes, more than is read")
        if time.monotonic() > deadline:
            raise EnvironmentProblem(f"{where} answered too slowly: its body took longer than the timeout")
    if length is not None and len(body) < length:
        raise EnvironmentProblem(f"{where} ended its body after {len(body):,} of {length:,} bytes announced")
    return bytes(body)


def _exchange(
    method: str, url: Url, *, headers: Mapping[str, str], data: bytes | None, timeout: float, limit: int
) -> Answer:
    request = urllib.request.Request(url.text, data=data, headers=dict(headers), method=method)
    deadline = time.monotonic() + timeout
    where = f"{method} {url.shown}"
    try:
        with _opener(url).open(request, timeout=timeout) as response:
            cap = limit if 200 <= response.status < 300 else min(limit, MAX_ERROR_BYTES)
            body = b"" if method == "HEAD" else _read(response, where, limit=cap, deadline=deadline)
            return Answer(method=method, url=url, status=response.status, headers=response.headers, body=body)
    except (OSError, HTTPException, ValueError) as exc:
        raise EnvironmentProblem(f"{where}: {_reason(exc, timeout)}") from None


def _reason(exc: BaseException, timeout: float) -> str:
    """What went wrong in words: no answer in time, refused, a broken answer."""
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, TimeoutError):
        return f"no answer within {timeout:g} s"
    if isinstance(exc, HTTPException):
        return f"not an HTTP answer ({type(exc).__name__}: {printable(str(exc))[:120]})"
    return f"no answer ({printable(str(reason))[:200]})"


def request(
    method: str,
    url: str | Url,
    *,
    headers: Mapping[str, str] | None = None,
    credentials: Mapping[str, str] | None = None,
    data: bytes | None = None,
    timeout: float,
    limit: int = MAX_BODY_BYTES,
    plain_http: bool = False,
) -> Answer:
    """`method` `url` and its answer, whatever its status (a redirect of GET or HEAD followed).
    `credentials` are headers for the URL's origin only (Authorization); a user and password in the URL
    add Basic credentials there. BadInput for a URL, timeout or header the caller gave that cannot be
    sent; EnvironmentProblem when the server cannot be reached or its answer breaks a bound."""
    target = url if isinstance(url, Url) else check_url(url, plain_http=plain_http)
    check_timeout(timeout)
    secret = dict(credentials or {})
    if target.userinfo and "Authorization" not in secret:
        pair = ":".join(urllib.parse.unquote(part) for part in target.userinfo.split(":", 1))
        secret["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    _check_headers({**(headers or {}), **secret})
    origin = target.origin
    for _ in range(MAX_REDIRECTS + 1):
        sent = {**(headers or {}), **(secret if target.origin == origin else {})}
        answer = _exchange(method, target, headers=sent, data=data, timeout=timeout, limit=limit)
        location = answer.headers.get("Location")
        if answer.status not in _REDIRECTS or method not in ("GET", "HEAD") or not location:
            return answer
        moved = urllib.parse.urljoin(target.text, location)
        target = check_url(
            moved,
            error=EnvironmentProblem,
            what=f"{answer.where()} redirected to",
            fix=_NOT_FOLLOWED,
            plain_http=plain_http,
        )
        if target.userinfo:
            raise answer.failed("redirected to a URL with a user or password in it")
    raise answer.failed(f"redirected more than {MAX_REDIRECTS} times")
