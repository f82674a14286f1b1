"""A stand-in for GitHub's pull request API on 127.0.0.1 (GitHub itself cannot be reached from a test):
the three calls `pins bump --open-pr` makes, shaped as docs.github.com/rest/pulls/pulls describes them,
and a record of every call it was sent."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

TOKEN = "test-token"  # an obvious fake
OWNER, REPO = "acme", "epstack"


@dataclass
class Call:
    method: str
    path: str
    query: dict[str, str]
    authorization: str
    payload: dict[str, Any] | None


@dataclass
class Forge:
    """The repository's pull requests and every call made; `refuse` answers each call with that status,
    `fail_writes` each POST and PATCH (a forge that fails between the find and the create)."""

    url: str = ""
    pulls: list[dict[str, Any]] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    refuse: int = 0
    fail_writes: int = 0

    def writes(self) -> list[tuple[str, str]]:
        return [(call.method, call.path) for call in self.calls if call.method != "GET"]


def _handler(forge: Forge) -> type[http.server.BaseHTTPRequestHandler]:
    prefix = f"/repos/{OWNER}/{REPO}/pulls"

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _handle(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            payload = json.loads(self.rfile.read(length)) if length else None
            call = Call(self.command, url.path, dict(urllib.parse.parse_qsl(url.query)),
                        self.headers.get("Authorization", ""), payload)  # fmt: skip
            forge.calls.append(call)
            failing = forge.fail_writes if self.command != "GET" else 0
            if forge.refuse or failing or call.authorization != f"Bearer {TOKEN}":
                status = forge.refuse or failing or 401
                message = {401: "Bad credentials", 403: "Resource not accessible by integration"}
                return self._answer(status, {"message": message.get(status, "Server Error")})
            if self.headers.get("Accept") != "application/vnd.github+json":
                return self._answer(415, {"message": "Unsupported Media Type"})
            if self.command == "GET" and url.path == prefix:
                head = call.query.get("head", "")
                found = [
                    p for p in forge.pulls if f"{OWNER}:{p['head']['ref']}" == head and p["state"] == "open"
                ]
                return self._answer(200, found)
            if self.command == "POST" and url.path == prefix and payload:
                number = len(forge.pulls) + 1
                pull = {"number": number, "html_url": f"https://github.com/{OWNER}/{REPO}/pull/{number}",
                        "state": "open", "title": payload["title"], "body": payload["body"],
                        "head": {"ref": payload["head"]}, "base": {"ref": payload["base"]}}  # fmt: skip
                forge.pulls.append(pull)
                return self._answer(201, pull)
            if self.command == "PATCH" and url.path.startswith(f"{prefix}/") and payload:
                pull = forge.pulls[int(url.path.rsplit("/", 1)[1]) - 1]
                pull.update({key: payload[key] for key in ("title", "body") if key in payload})
                return self._answer(200, pull)
            return self._answer(404, {"message": "Not Found"})

        do_GET = do_POST = do_PATCH = _handle

    return Handler


@contextmanager
def standin_forge() -> Iterator[Forge]:
    """A Forge served on 127.0.0.1 at a free port (its API URL in .url), stopped after."""
    forge = Forge()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(forge))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    forge.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield forge
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
