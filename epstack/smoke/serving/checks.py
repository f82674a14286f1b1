"""What the serve smoke asks a running server, as check rows: the backend it reports, DeepEP V2's buffer
in its log, exact token counts, greedy output repeated alone and inside a batch of 32, every answer's
values (whole token ids, finite logprobs), and the same prompts served without DeepEP compared prompt by
prompt (epstack.smoke.serving.generation's rule), with the control: the rule must refuse each prompt
against another prompt's reference."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epstack.checkrow import Check
from epstack.errors import printable, shown
from epstack.inputs import search_log
from epstack.smoke.serving import generation
from epstack.smoke.serving.client import Endpoint
from epstack.smoke.serving.generation import Agreement, BadValue, Generation

PROMPTS = 8  # prompts checked alone, and compared without DeepEP
BATCH = 32
PROMPT_LEN = 64
PROMPT_VOCAB = 30_000  # token ids below every served model's vocabulary size
# sglang/srt/layers/moe/token_dispatcher/deepep_v2.py logs this once the collective construction succeeded.
BUFFER_LINE = re.compile(r"Initialized DeepEP v2 ElasticBuffer: .*")


@dataclass(frozen=True, kw_only=True)
class Asked:
    seed: int
    tokens: int  # max_new_tokens of each check request
    timeout_s: float  # per request


@dataclass(frozen=True, kw_only=True)
class Probed:
    checks: list[Check]
    alone: list[Generation]  # the PROMPTS prompts, each alone
    info: dict[str, Any]  # what /server_info said that the report keeps


def _text(value: object) -> str | None:
    """A value /server_info gave, as the report keeps it: text, its controls escaped, its length bounded."""
    return None if value is None else shown(str(value), quote=False)


def _prompts(asked: Asked, count: int) -> list[list[int]]:
    return [generation.prompt(asked.seed, i, PROMPT_LEN, PROMPT_VOCAB) for i in range(count)]


def backend(info: dict[str, Any], expected: str) -> Check:
    found = shown(str(info.get("moe_a2a_backend", "not in /server_info")), quote=False)
    return Check(
        component="moe-a2a-backend",
        expected=expected,
        found=found,
        verdict="ok" if found == expected else "mismatch",
        fix=""
        if found == expected
        else f"serve with --moe-a2a-backend {expected} (epstack cluster emits it)",
    )


def buffer(log: Path | None, a2a: str) -> Check:
    row = {"component": "deepep-v2-buffer", "expected": "Initialized DeepEP v2 ElasticBuffer"}
    if a2a != "deepep_v2":
        return Check(**row, found="-", verdict="skipped", detail=f"backend {a2a}")
    if log is None:
        return Check(**row, found="no log", verdict="skipped", detail="attached by --url: pass --server-log")
    line = search_log(log, BUFFER_LINE, what="a server log") if log.exists() else None
    if line is None:
        return Check(
            **row,
            found="not in the log",
            verdict="fail",
            detail=str(log),
            fix="the server did not build DeepEP V2's buffer: read its log",
        )
    found = printable(line[len("Initialized DeepEP v2 ElasticBuffer: ") :])
    return Check(**row, found=shown(found, quote=False), verdict="ok")


def _why(agreement: Agreement) -> str:
    """Why two generations of one prompt are not close, in words."""
    if not agreement.in_top:
        return f"token {agreement.first_divergence}: a token outside the other's top-{generation.TOP_N}"
    return f"logprobs {agreement.max_logprob_diff:.3g} apart"


def agreement_row(component: str, expected: str, agreements: list[Agreement]) -> Check:
    """One row for pairs of generations (prompt by prompt): where each parted, how far apart the logprobs
    were up to there, and which pairs broke the rule and why."""
    identical = sum(a.identical for a in agreements)
    parted = [(i, a) for i, a in enumerate(agreements) if not a.identical]
    found = f"{identical}/{len(agreements)} identical"
    if parted:
        found += "; parted: " + ", ".join(f"prompt {i} at token {a.first_divergence}" for i, a in parted)
    worst = max((a.max_logprob_diff for a in agreements), default=0.0)
    broken = [(i, a) for i, a in enumerate(agreements) if not a.close]
    detail = f"max |logprob difference| up to the parting {worst:.3g} (tolerance {generation.TOLERANCE:g})"
    detail += "; per prompt " + " ".join(f"{a.max_logprob_diff:.3g}" for a in agreements)
    if broken:
        detail += "; not within the rule: " + ", ".join(f"prompt {i} ({_why(a)})" for i, a in broken)
    return Check(
        component=component,
        expected=expected,
        found=found,
        verdict="fail" if broken else "ok",
        detail=detail,
        fix="the outputs differ beyond rounding: read the server log, run `epstack smoke elastic`"
        if broken
        else "",
    )


def values_row(answers: int, bad: BadValue | None) -> Check:
    """Every answer's token ids whole numbers and logprobs finite (a NaN from a broken kernel, `true`)."""
    return Check(
        component="answer-values",
        expected="token ids >= 0, finite logprobs",
        found=f"{answers} answers" if bad is None else str(bad).removeprefix("/generate: "),
        verdict="ok" if bad is None else "fail",
        fix="" if bad is None else "the server answered a value no model gives: read its log",
    )


def probe(endpoint: Endpoint, *, a2a: str, log: Path | None, asked: Asked) -> Probed:
    """Every check against one server; RequestFailed (a named request failure) stops it."""
    info = endpoint.server_info(asked.timeout_s)
    kept = {k: _text(info.get(k)) for k in ("moe_a2a_backend", "moe_runner_backend", "version", "model_path")}
    checks = [backend(info, a2a)]
    if checks[0].failed:
        return Probed(checks=checks, alone=[], info=kept)
    checks.append(buffer(log, a2a))

    def ask(prompts: list[list[int]]) -> list[Generation]:
        # NaN and Infinity read as floats: the answer-values row names them (a broken kernel's NaN)
        request = generation.request(prompts, asked.tokens)
        answer = endpoint.json("/generate", request, timeout=asked.timeout_s, nonfinite=True)
        if len(prompts) == 1:
            return [generation.parse(answer, asked.tokens)]
        return generation.parse_batch(answer, len(prompts), asked.tokens)

    return Probed(checks=checks, alone=greedy(ask, asked, checks), info=kept)


# The server's generations of some prompts (one request): SGLang's /generate, vLLM's /v1/completions.
Ask = Callable[[list[list[int]]], list[Generation]]


def greedy(ask: Ask, asked: Asked, checks: list[Check]) -> list[Generation]:
    """The greedy requests through `ask` (alone, again, in a batch), their rows and the answer-values
    row; returns the prompts alone, none when an answer held a value no model gives."""
    try:
        alone = _generations(ask, asked, checks)
    except BadValue as bad:
        checks.append(values_row(0, bad))
        return []
    checks.append(values_row(PROMPTS + 1 + BATCH, None))
    return alone


def _generations(ask: Ask, asked: Asked, checks: list[Check]) -> list[Generation]:
    """The greedy requests (alone, again, in a batch) and their rows; returns the prompts alone."""
    prompts = _prompts(asked, BATCH)
    alone = [ask([p])[0] for p in prompts[:PROMPTS]]
    checks.append(
        Check(
            component="token-counts",
            expected=f"{asked.tokens} tokens each",
            found=f"{PROMPTS}/{PROMPTS} requests",
            verdict="ok",
        )
    )
    repeat = generation.compare(alone[0], ask(prompts[:1])[0])
    checks.append(
        Check(
            component="greedy-repeat",
            expected="identical",
            found=repeat.matched,
            verdict="ok" if repeat.identical else "fail",
            fix="" if repeat.identical else "greedy decoding is not deterministic here",
        )
    )
    batch = ask(prompts)
    checks.append(
        agreement_row(
            f"greedy-in-batch-of-{BATCH}",
            "as alone",
            [generation.compare(a, b) for a, b in zip(alone, batch, strict=False)],
        )
    )
    return alone


def not_compared(why: str) -> Check:
    """The comparison's row where serving without DeepEP would run the same kernels: skipped, said why."""
    return Check(component="deepep-v2-vs-none", expected="as without DeepEP", found="-", verdict="skipped",
                 detail=why)  # fmt: skip


def control_row(agreements: list[Agreement]) -> Check:
    """The rule against each prompt's output and another prompt's reference: it must refuse every pair,
    or passing the real comparison proves nothing (a model whose answers do not depend on the prompt)."""
    accepted = [i for i, a in enumerate(agreements) if a.close]
    return Check(
        component="deepep-v2-vs-none-control",
        expected="every shifted pair refused",
        found=f"{len(agreements) - len(accepted)}/{len(agreements)} refused",
        verdict="fail" if accepted else "ok",
        detail="each prompt against the next prompt's output without DeepEP"
        + (f"; accepted: prompts {', '.join(map(str, accepted))}" if accepted else ""),
        fix="the model's answers do not tell prompts apart: serve weights whose output depends on the prompt"
        if accepted
        else "",
    )


def summary(agreements: list[Agreement]) -> dict[str, Any]:
    return {
        "prompts": len(agreements),
        "identical": sum(a.identical for a in agreements),
        "close": sum(a.close for a in agreements),
        "first_divergence": [a.first_divergence for a in agreements],
        "max_logprob_diff": [round(a.max_logprob_diff, 6) for a in agreements],
    }


def without_deepep(
    through: list[Generation], reference: list[Generation]
) -> tuple[list[Check], dict[str, Any]]:
    """The DeepEP V2 server's greedy outputs against the same prompts served with --moe-a2a-backend none,
    and the control: each against the next prompt's (the rule must refuse those). The summary keeps both
    runs' generations, so the rule can be applied again to a report."""
    agreements = [generation.compare(a, b) for a, b in zip(through, reference, strict=True)]
    shifted = reference[1:] + reference[:1]
    control = [generation.compare(a, b) for a, b in zip(through, shifted, strict=True)]
    rows = [agreement_row("deepep-v2-vs-none", "as without DeepEP", agreements), control_row(control)]
    kept = {
        **summary(agreements),
        "tolerance": generation.TOLERANCE,
        "control": summary(control),
        "through": [dataclasses.asdict(g) for g in through],
        "reference": [dataclasses.asdict(g) for g in reference],
    }
    return rows, kept
