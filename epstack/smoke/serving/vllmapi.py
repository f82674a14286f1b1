"""vLLM's OpenAI-compatible API as the serve smoke uses it: /health, /version, /v1/models, and
/v1/completions by token ids, read strictly into the same Generation the SGLang checks compare.

vLLM 0.33.0 takes a prompt as token ids (`prompt`: a list of ints, or a list of them for a batch), answers
one choice per prompt (`index`), and with `logprobs: N` and `return_tokens_as_token_ids: true` names every
output token and every top-N candidate "token_id:<id>" (entrypoints/openai/completion/protocol.py).
`ignore_eos` makes the count exact. Every malformed answer is one RequestFailed naming what is wrong.
"""

from __future__ import annotations

import re
from typing import Any

from epstack.smoke.serving.client import Endpoint, RequestFailed
from epstack.smoke.serving.generation import TOP_N, BadValue, Generation, logprob

HEALTH = "/health"
COMPLETIONS = "/v1/completions"
_TOKEN = re.compile(r"token_id:(\d+)")


def request(prompts: list[list[int]], max_new_tokens: int, model: str) -> dict[str, Any]:
    """The /v1/completions body: greedy, exactly max_new_tokens (EOS ignored), top-N logprobs by id."""
    return {
        "model": model,
        "prompt": prompts[0] if len(prompts) == 1 else prompts,
        "max_tokens": max_new_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "logprobs": TOP_N,
        "return_tokens_as_token_ids": True,
    }


def _token(text: object, where: str) -> int:
    found = _TOKEN.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        raise RequestFailed(
            f"{COMPLETIONS}: malformed answer: {where} {str(text)[:40]!r} is not token_id:<id>"
        )
    return int(found.group(1))


def _number(value: object, where: str) -> float:
    """A logprob (generation.logprob: BadValue for one that is not finite, `true`), named as vLLM's."""
    try:
        return logprob(value, where)
    except BadValue as bad:
        raise BadValue(str(bad).replace("/generate:", f"{COMPLETIONS}:", 1)) from None


def _generation(choice: object, asked: int) -> Generation:
    logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
    if not isinstance(logprobs, dict):
        raise RequestFailed(
            f"{COMPLETIONS}: malformed answer: a choice without logprobs: {str(choice)[:120]}"
        )
    tokens, chosen, tops = (logprobs.get(key) for key in ("tokens", "token_logprobs", "top_logprobs"))
    if not all(isinstance(part, list) for part in (tokens, chosen, tops)):
        raise RequestFailed(
            f"{COMPLETIONS}: malformed answer: logprobs lack tokens, token_logprobs or top_logprobs"
        )
    assert isinstance(tokens, list) and isinstance(chosen, list) and isinstance(tops, list)
    if not len(tokens) == len(chosen) == len(tops) == asked:
        raise RequestFailed(
            f"{COMPLETIONS}: asked for {asked} tokens (ignore_eos), got {len(tokens)} tokens, "
            f"{len(chosen)} logprobs, {len(tops)} top-logprob sets"
        )
    if not all(isinstance(top, dict) for top in tops):
        raise RequestFailed(f"{COMPLETIONS}: malformed answer: top_logprobs is not one object per token")
    return Generation(
        output_ids=[_token(text, "token") for text in tokens],
        logprobs=[_number(value, "token_logprobs") for value in chosen],
        top=[{_token(k, "candidate"): _number(v, "top_logprobs") for k, v in top.items()} for top in tops],
    )


def parse(answer: object, count: int, asked: int) -> list[Generation]:
    """One generation per prompt, in the prompts' order; RequestFailed when malformed or short."""
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not isinstance(choices, list) or len(choices) != count:
        raise RequestFailed(f"{COMPLETIONS}: {count} prompts answered {str(answer)[:120]}")
    indexed = sorted(choices, key=lambda c: c.get("index", -1) if isinstance(c, dict) else -1)
    if [c.get("index") if isinstance(c, dict) else None for c in indexed] != list(range(count)):
        raise RequestFailed(f"{COMPLETIONS}: malformed answer: choices are not indexed 0..{count - 1}")
    return [_generation(choice, asked) for choice in indexed]


def generate(
    endpoint: Endpoint, prompts: list[list[int]], asked: int, model: str, timeout: float
) -> list[Generation]:
    """The prompts' greedy generations, one request for all of them."""
    # NaN and Infinity read as floats: the answer-values row names them (a broken kernel's NaN)
    answer = endpoint.json(COMPLETIONS, request(prompts, asked, model), timeout=timeout, nonfinite=True)
    return parse(answer, len(prompts), asked)


def server_info(endpoint: Endpoint, timeout: float) -> dict[str, Any]:
    """vLLM's version and the model it serves (/version, /v1/models), as the report keeps them."""
    version = endpoint.json("/version", timeout=timeout)
    models = endpoint.json("/v1/models", timeout=timeout)
    data = models.get("data") if isinstance(models, dict) else None
    if (
        not isinstance(version, dict)
        or not isinstance(data, list)
        or not data
        or not isinstance(data[0], dict)
    ):
        raise RequestFailed(
            f"/version, /v1/models: malformed answers: {str(version)[:60]} {str(models)[:60]}"
        )
    return {"version": version.get("version"), "model_path": data[0].get("root") or data[0].get("id")}
