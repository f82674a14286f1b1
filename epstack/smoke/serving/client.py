"""SGLang's native HTTP API as the serve smoke uses it, through epstack.httpclient: /health_generate,
/server_info and /generate by token ids. Every failure is one RequestFailed naming the path and what
went wrong in words (timed out, refused, HTTP status, an answer too large or cut short, malformed or
unbounded JSON), never a raw traceback; the server's text in it has its control characters escaped."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from epstack import httpclient
from epstack.errors import EnvironmentProblem, EpstackError
from epstack.inputs import parse_json

# /generate for a batch of 32 prompts with top-5 logprobs is about 6.4 KB a token asked (--tokens): 64
# MiB holds 10,000 of them; anything larger is no answer of SGLang's to these requests.
MAX_ANSWER_BYTES = 64 << 20


class RequestFailed(EpstackError):
    """A request to the server failed or its answer was not what SGLang sends."""


HEALTH = "/health_generate"  # SGLang's: 200 once it generated one token


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    url: str  # http://host:port, no trailing slash
    health: str = HEALTH  # the path that answers 200 once the server serves (vLLM's: /health)

    def _call(self, path: str, body: object | None, timeout: float) -> httpclient.Answer:
        data = None if body is None else json.dumps(body).encode()
        try:
            return httpclient.request(
                "GET" if data is None else "POST",
                self.url + path,
                headers={"Content-Type": "application/json"},
                data=data,
                timeout=timeout,
                limit=MAX_ANSWER_BYTES,
                plain_http=True,  # SGLang on a cluster's network: no credential is sent
            )
        except EnvironmentProblem as exc:
            raise RequestFailed(str(exc)) from None

    def healthy(self, timeout: float) -> bool:
        """True when the health path answers 200 (SGLang's /health_generate: it generated one token)."""
        try:
            answer = self._call(self.health, None, timeout)
        except RequestFailed:
            return False
        return answer.status == 200

    def json(self, path: str, body: object | None = None, *, timeout: float, nonfinite: bool = False) -> Any:
        """The JSON answer of GET (no body) or POST; RequestFailed for a status or a body that is not JSON.
        `nonfinite`: NaN and Infinity are read as floats, for the caller's checks to name."""
        answer = self._call(path, body, timeout)
        if answer.status != 200:
            raise RequestFailed(f"{path}: HTTP {answer.status}: {answer.snippet(300)}")
        try:
            return parse_json(answer.body, nonfinite=nonfinite)
        except ValueError as exc:
            raise RequestFailed(f"{path}: malformed answer, {exc}: {answer.snippet(120)}") from None

    def server_info(self, timeout: float) -> dict[str, Any]:
        info = self.json("/server_info", timeout=timeout)
        if not isinstance(info, dict):
            raise RequestFailed(f"/server_info: malformed answer, not a JSON object: {str(info)[:120]}")
        return info
