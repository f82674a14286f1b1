"""SGLang's native HTTP API as the serve smoke uses it (standard library only): /health_generate,
/server_info and /generate by token ids. Every failure is one RequestFailed naming the path and what
went wrong in words (timed out, refused, HTTP status, malformed answer), never a raw traceback."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from epstack.errors import EpstackError


class RequestFailed(EpstackError):
    """A request to the server failed or its answer was not what SGLang sends."""


HEALTH = "/health_generate"  # SGLang's: 200 once it generated one token


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    url: str  # http://host:port, no trailing slash
    health: str = HEALTH  # the path that answers 200 once the server serves (vLLM's: /health)

    def _call(self, path: str, body: object | None, timeout: float) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except TimeoutError:
            raise RequestFailed(f"{path}: no answer within {timeout:g} s") from None
        except (urllib.error.URLError, ConnectionError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError | socket.timeout):
                raise RequestFailed(f"{path}: no answer within {timeout:g} s") from None
            raise RequestFailed(f"{path}: {self.url} did not answer ({reason})") from None

    def healthy(self, timeout: float) -> bool:
        """True when the health path answers 200 (SGLang's /health_generate: it generated one token)."""
        try:
            status, _ = self._call(self.health, None, timeout)
        except RequestFailed:
            return False
        return status == 200

    def json(self, path: str, body: object | None = None, *, timeout: float) -> Any:
        """The JSON answer of GET (no body) or POST; RequestFailed for a status or a body that is not JSON."""
        status, raw = self._call(path, body, timeout)
        text = raw.decode(errors="replace")
        if status != 200:
            raise RequestFailed(f"{path}: HTTP {status}: {text.strip()[:300] or 'no body'}")
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise RequestFailed(f"{path}: malformed answer, not JSON ({exc.msg}): {text[:120]!r}") from None

    def server_info(self, timeout: float) -> dict[str, Any]:
        info = self.json("/server_info", timeout=timeout)
        if not isinstance(info, dict):
            raise RequestFailed(f"/server_info: malformed answer, not a JSON object: {str(info)[:120]}")
        return info
