"""What the serve smoke asks a running server, as check rows: the backend it reports, DeepEP V2's buffer
in its log, exact token counts, greedy output repeated alone and inside a batch of 32, and the same
prompts served without DeepEP compared token by token (epstack.smoke.serving.generation's rule)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epstack.checkrow import Check
from epstack.smoke.serving import generation
from epstack.smoke.serving.client import Endpoint
from epstack.smoke.serving.generation import Agreement, Generation

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


def _prompts(asked: Asked, count: int) -> list[list[int]]:
    return [generation.prompt(asked.seed, i, PROMPT_LEN, PROMPT_VOCAB) for i in range(count)]


def backend(info: dict[str, Any], expected: str) -> Check:
    found = str(info.get("moe_a2a_backend", "not in /server_info"))
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
    line = BUFFER_LINE.search(log.read_text(errors="replace")) if log.exists() else None
    if line is None:
        return Check(
            **row,
            found="not in the log",
            verdict="fail",
            detail=str(log),
            fix="the server did not build DeepEP V2's buffer: read its log",
        )
    return Check(**row, found=line.group(0)[len("Initialized DeepEP v2 ElasticBuffer: ") :], verdict="ok")


def agreement_row(component: str, expected: str, agreements: list[Agreement]) -> Check:
    identical = sum(a.identical for a in agreements)
    parted = [a for a in agreements if not a.identical]
    close = all(a.close for a in agreements)
    found = f"{identical}/{len(agreements)} identical"
    if parted:
        found += ", " + ", ".join(a.matched for a in parted)
    worst = max((a.max_logprob_diff for a in agreements), default=0.0)
    return Check(
        component=component,
        expected=expected,
        found=found,
        verdict="ok" if close else "fail",
        detail=f"max |logprob difference| before parting {worst:.3g}"
        + ("" if close else "; a token outside the other's top-5: not a near tie"),
        fix=""
        if close
        else "the outputs differ beyond numerics: read the server log, run `epstack smoke elastic`",
    )


def probe(endpoint: Endpoint, *, a2a: str, log: Path | None, asked: Asked) -> Probed:
    """Every check against one server; RequestFailed (a named request failure) stops it."""
    info = endpoint.server_info(asked.timeout_s)
    kept = {k: info.get(k) for k in ("moe_a2a_backend", "moe_runner_backend", "version", "model_path")}
    checks = [backend(info, a2a)]
    if checks[0].failed:
        return Probed(checks=checks, alone=[], info=kept)
    checks.append(buffer(log, a2a))
    prompts = _prompts(asked, BATCH)
    alone = [
        generation.parse(
            endpoint.json("/generate", generation.request([p], asked.tokens), timeout=asked.timeout_s),
            asked.tokens,
        )
        for p in prompts[:PROMPTS]
    ]
    checks.append(
        Check(
            component="token-counts",
            expected=f"{asked.tokens} tokens each",
            found=f"{PROMPTS}/{PROMPTS} requests",
            verdict="ok",
        )
    )
    again = generation.parse(
        endpoint.json("/generate", generation.request(prompts[:1], asked.tokens), timeout=asked.timeout_s),
        asked.tokens,
    )
    repeat = generation.compare(alone[0], again)
    checks.append(
        Check(
            component="greedy-repeat",
            expected="identical",
            found=repeat.matched,
            verdict="ok" if repeat.identical else "fail",
            fix="" if repeat.identical else "greedy decoding is not deterministic here",
        )
    )
    batch = generation.parse_batch(
        endpoint.json("/generate", generation.request(prompts, asked.tokens), timeout=asked.timeout_s),
        BATCH,
        asked.tokens,
    )
    checks.append(
        agreement_row(
            f"greedy-in-batch-of-{BATCH}",
            "as alone",
            [generation.compare(a, b) for a, b in zip(alone, batch, strict=False)],
        )
    )
    return Probed(checks=checks, alone=alone, info=kept)


def not_compared(why: str) -> Check:
    """The comparison's row where serving without DeepEP would run the same kernels: skipped, said why."""
    return Check(component="deepep-v2-vs-none", expected="as without DeepEP", found="-", verdict="skipped",
                 detail=why)  # fmt: skip


def without_deepep(through: list[Generation], reference: list[Generation]) -> tuple[Check, dict[str, Any]]:
    """The DeepEP V2 server's greedy outputs against the same prompts served with --moe-a2a-backend none."""
    agreements = [generation.compare(a, b) for a, b in zip(through, reference, strict=True)]
    row = agreement_row("deepep-v2-vs-none", "as without DeepEP", agreements)
    shifted = reference[1:] + reference[:1]
    summary = {
        "prompts": len(agreements),
        "identical": sum(a.identical for a in agreements),
        "close": sum(a.close for a in agreements),
        "first_divergence": [a.first_divergence for a in agreements],
        "max_logprob_diff": max((a.max_logprob_diff for a in agreements), default=0.0),
        "first_token_equal": sum(
            a.output_ids[0] == b.output_ids[0] for a, b in zip(through, reference, strict=True)
        ),
        # the control: each prompt against another prompt's reference (a rule passing these proves nothing)
        "control_first_token_equal": sum(
            a.output_ids[0] == b.output_ids[0] for a, b in zip(through, shifted, strict=True)
        ),
        "control_close": sum(generation.compare(a, b).close for a, b in zip(through, shifted, strict=True)),
    }
    return row, summary
