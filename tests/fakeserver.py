"""A hostile HTTP server on a loopback address, for the tests of what epstack does with a server's answer
(tests/test_httpclient.py, tests/bump/test_untrusted_servers.py): each path answers what the test sets,
Content-Length may lie, a body may drip, and every request is recorded with its headers. Tests that use
it are marked `aws` (loopback only, tests/conftest.py)."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    length: int | None = None  # the Content-Length announced (len(body) when None; -1: none at all)
    repeat: int = 1  # the body sent this many times (a large answer without holding it)
    drip_s: float = 0.0  # a pause before each byte of the body


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeServer:
    url: str = ""
    replies: dict[str, Reply | Callable[[Seen], Reply]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)

    def authorizations(self) -> list[str]:
        return [each.headers.get("Authorization", "") for each in self.seen]


def _handler(server: FakeServer) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            seen = Seen(
                self.command, self.path, dict(self.headers), self.rfile.read(length) if length else b""
            )
            server.seen.append(seen)
            found = server.replies.get(self.path.split("?", 1)[0], Reply(404, b"not here"))
            reply = found(seen) if callable(found) else found
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            announced = len(reply.body) * reply.repeat if reply.length is None else reply.length
            if announced >= 0:
                self.send_header("Content-Length", str(announced))
            self.end_headers()
            if self.command == "HEAD":
                return
            try:
                for _ in range(reply.repeat):
                    self._send(reply)
            except (BrokenPipeError, ConnectionResetError):  # the client stopped reading: as it should
                pass

        def _send(self, reply: Reply) -> None:
            if not reply.drip_s:
                self.wfile.write(reply.body)
                return
            for byte in reply.body:
                time.sleep(reply.drip_s)
                self.wfile.write(bytes([byte]))
                self.wfile.flush()

        do_GET = do_POST = do_PATCH = do_HEAD = _handle

    return Handler


@contextmanager
def fake_server(host: str = "127.0.0.1") -> Iterator[FakeServer]:
    """A FakeServer on `host` (127.0.0.1, or 127.0.0.2 for another origin) at a free port, stopped after."""
    fake = FakeServer()
    httpd = http.server.ThreadingHTTPServer((host, 0), _handler(fake))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    fake.url = f"http://{host}:{httpd.server_address[1]}"
    try:
        yield fake
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
