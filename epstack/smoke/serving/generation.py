"""Greedy generations by token ids: the prompts, SGLang's /generate answer read strictly, and how two
generations of one prompt are compared.

Two greedy runs of one prompt through different kernels (a batch of 32 instead of one, DeepEP V2's
dispatch/combine instead of none) differ by rounding: the same token gets nearly the same logprob in both,
and where the top two candidates are that close the runs may part. They agree when, at every position up
to and including the first where the tokens differ, each token either run chose gets the same logprob in
the other within TOLERANCE (read from the other's top-N where it is not the chosen one), and at the parting
each run's token is among the other's top N (the rule vLLM's check_logprobs_close applies, with the
logprobs held to it too); after the parting the runs condition on different text and are not compared.
A wrong dispatch or combine moves the hidden states and with them every logit: logprobs of the same token
part by more than rounding, and a parted token is no longer a near tie. TOLERANCE, measured on the tiny
model's generated checkpoint (benchmarks/serve/faults/cpu_power.py): one bf16 step of rounding in every
MoE output moved a logprob by at most 0.062; a combine halved by up to 0.31, zeroed by up to 0.47.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from typing import Any

from epstack.smoke.serving.client import RequestFailed

TOP_N = 5  # top_logprobs_num asked of SGLang
TOLERANCE = 0.15  # nats: how far two runs' logprobs of one token may be apart


class BadValue(RequestFailed):
    """An answer in SGLang's shape holding a value no model gives: a token id that is not a whole number
    (JSON true included) or is negative, a logprob that is not finite."""


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
    """[logprob, token id, ...] as SGLang sends it: a list of at least two (the values are read after)."""
    return isinstance(e, list) and len(e) >= 2


def _entries(value: object, what: str) -> list[list[Any]]:
    if not isinstance(value, list) or not all(_entry(e) for e in value):
        raise RequestFailed(f"/generate: malformed answer: meta_info.{what} is not a list of [logprob, id]")
    return value


def token_id(value: object, where: str) -> int:
    """A token id as JSON carries one: a whole number >= 0; BadValue otherwise (bool is an int in Python)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadValue(f"/generate: {where} is {json_text(value)}, not a token id")
    return value


def logprob(value: object, where: str) -> float:
    """A logprob: a finite number (NaN and Infinity are what a broken kernel sends); BadValue otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadValue(f"/generate: {where} is {json_text(value)}, not a finite logprob")
    return float(value)


def json_text(value: object) -> str:
    return json.dumps(value, allow_nan=True)[:40]


def parse(answer: object, asked: int) -> Generation:
    """One generation from SGLang's answer; RequestFailed when it is malformed or short of `asked` tokens,
    BadValue when a token id or a logprob is not one."""
    if not isinstance(answer, dict) or not isinstance(answer.get("meta_info"), dict):
        raise RequestFailed(f"/generate: malformed answer, no meta_info: {str(answer)[:120]}")
    ids = answer.get("output_ids")
    if not isinstance(ids, list):
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
    entries = [_entries(t, "output_top_logprobs") for t in tops]
    output_ids = [token_id(i, f"output_ids[{k}]") for k, i in enumerate(ids)]
    logprobs = [logprob(e[0], f"output_token_logprobs[{k}]") for k, e in enumerate(chosen)]
    top = [
        {
            token_id(e[1], f"output_top_logprobs[{k}][{j}][1]"): logprob(
                e[0], f"output_top_logprobs[{k}][{j}][0]"
            )
            for j, e in enumerate(t)
        }
        for k, t in enumerate(entries)
    ]
    return Generation(output_ids=output_ids, logprobs=logprobs, top=top)


def parse_batch(answer: object, size: int, asked: int) -> list[Generation]:
    if not isinstance(answer, list) or len(answer) != size:
        raise RequestFailed(f"/generate: a batch of {size} prompts answered {str(answer)[:120]}")
    return [parse(entry, asked) for entry in answer]


@dataclass(frozen=True, kw_only=True)
class Agreement:
    identical: bool  # the same tokens
    close: bool  # within the rule (see the module): logprobs within TOLERANCE, a parting at a near tie
    first_divergence: int | None  # output position where the tokens first differ
    max_logprob_diff: float  # the largest difference of one token's logprob, up to and at the parting
    in_top: bool  # at the parting, each run's token among the other's top N (True when identical)

    @property
    def matched(self) -> str:
        return "identical" if self.identical else f"parted at token {self.first_divergence}"


def _diff(a: Generation, b: Generation, k: int, token: int) -> float:
    """|a's logprob of `token` at k - b's|, each read from its chosen token or its top N (inf if absent)."""

    def of(g: Generation) -> float | None:
        return g.logprobs[k] if g.output_ids[k] == token else g.top[k].get(token)

    x, y = of(a), of(b)
    return math.inf if x is None or y is None else abs(x - y)


def compare(a: Generation, b: Generation) -> Agreement:
    diverged = next(
        (k for k, (x, y) in enumerate(zip(a.output_ids, b.output_ids, strict=True)) if x != y), None
    )
    common = len(a.output_ids) if diverged is None else diverged
    diffs = [abs(a.logprobs[k] - b.logprobs[k]) for k in range(common)]
    in_top = diverged is None or (
        a.output_ids[diverged] in b.top[diverged] and b.output_ids[diverged] in a.top[diverged]
    )
    if diverged is not None and in_top:
        diffs += [_diff(a, b, diverged, run.output_ids[diverged]) for run in (a, b)]
    worst = max(diffs, default=0.0)
    return Agreement(
        identical=diverged is None,
        close=in_top and worst <= TOLERANCE,
        first_divergence=diverged,
        max_logprob_diff=worst,
        in_top=in_top,
    )
