"""Greedy generations by token ids: the prompts, SGLang's /generate answer read strictly, and how two
generations of one prompt are compared.

Two greedy runs of one prompt through different kernels (a batch of 32 instead of one, DeepEP V2's
dispatch/combine instead of none) may part at a near tie of the top logits. They agree when their
tokens are equal, or when at the first position where they differ each run's token is among the other's
top-N candidates (the rule vLLM's check_logprobs_close applies); after that the runs condition on
different text and are not compared. A wrong dispatch or combine changes the hidden states and with
them the whole distribution: its token is then not among the other's top N (N of a 151,936-word vocab).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from epstack.smoke.serving.client import RequestFailed

TOP_N = 5  # top_logprobs_num asked of SGLang


def prompt(seed: int, index: int, length: int, vocab: int) -> list[int]:
    """The index-th prompt of a run: token ids in [1, vocab), the same for the same seed."""
    rng = random.Random(f"{seed}/{index}")
    return [rng.randrange(1, vocab) for _ in range(length)]


def request(prompts: list[list[int]], max_new_tokens: int) -> dict[str, Any]:
    """The /generate body: greedy, exactly max_new_tokens (EOS ignored), top-N logprobs per token."""
    return {
        "input_ids": prompts[0] if len(prompts) == 1 else prompts,
        "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True},
        "return_logprob": True,
        "top_logprobs_num": TOP_N,
    }


@dataclass(frozen=True, kw_only=True)
class Generation:
    output_ids: list[int]
    logprobs: list[float]  # of each output token
    top: list[dict[int, float]]  # per output position: the top-N token ids and their logprobs


def _entry(e: object) -> bool:
    """[logprob, token id, ...] as SGLang sends it: a number, then an int (JSON has no other kinds)."""
    return (
        isinstance(e, list)
        and len(e) >= 2
        and isinstance(e[0], int | float)
        and isinstance(e[1], int)
        and not isinstance(e[0], bool)
        and not isinstance(e[1], bool)
    )


def _entries(value: object, what: str) -> list[list[Any]]:
    if not isinstance(value, list) or not all(_entry(e) for e in value):
        raise RequestFailed(f"/generate: malformed answer: meta_info.{what} is not a list of [logprob, id]")
    return value


def parse(answer: object, asked: int) -> Generation:
    """One generation from SGLang's answer; RequestFailed when it is malformed or short of `asked` tokens."""
    if not isinstance(answer, dict) or not isinstance(answer.get("meta_info"), dict):
        raise RequestFailed(f"/generate: malformed answer, no meta_info: {str(answer)[:120]}")
    ids = answer.get("output_ids")
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise RequestFailed("/generate: malformed answer: output_ids is not a list of token ids")
    meta = answer["meta_info"]
    if len(ids) != asked or meta.get("completion_tokens") != asked:
        raise RequestFailed(
            f"/generate: asked for {asked} tokens (ignore_eos), got {len(ids)} output ids, "
            f"completion_tokens {meta.get('completion_tokens')}"
        )
    chosen = _entries(meta.get("output_token_logprobs"), "output_token_logprobs")
    tops = meta.get("output_top_logprobs")
    if not isinstance(tops, list) or len(tops) != asked or len(chosen) != asked:
        raise RequestFailed("/generate: malformed answer: logprobs do not cover every output token")
    top = [{int(e[1]): float(e[0]) for e in _entries(t, "output_top_logprobs")} for t in tops]
    return Generation(output_ids=ids, logprobs=[float(e[0]) for e in chosen], top=top)


def parse_batch(answer: object, size: int, asked: int) -> list[Generation]:
    if not isinstance(answer, list) or len(answer) != size:
        raise RequestFailed(f"/generate: a batch of {size} prompts answered {str(answer)[:120]}")
    return [parse(entry, asked) for entry in answer]


@dataclass(frozen=True, kw_only=True)
class Agreement:
    identical: bool
    close: bool  # identical, or parted at a near tie (each token in the other's top N)
    first_divergence: int | None  # output position where the tokens first differ
    max_logprob_diff: float  # over the positions before the first divergence

    @property
    def matched(self) -> str:
        return "identical" if self.identical else f"parted at token {self.first_divergence}"


def compare(a: Generation, b: Generation) -> Agreement:
    diverged = next(
        (k for k, (x, y) in enumerate(zip(a.output_ids, b.output_ids, strict=True)) if x != y), None
    )
    common = len(a.output_ids) if diverged is None else diverged
    diff = max((abs(a.logprobs[k] - b.logprobs[k]) for k in range(common)), default=0.0)
    close = diverged is None or (
        a.output_ids[diverged] in b.top[diverged] and b.output_ids[diverged] in a.top[diverged]
    )
    return Agreement(
        identical=diverged is None, close=close, first_divergence=diverged, max_logprob_diff=diff
    )
