"""What the serve smoke asks a running vLLM server, as the same check rows SGLang's get
(epstack.smoke.serving.checks): the all-to-all backend it was started with, DeepEP V2's buffer, exact
token counts, greedy output repeated alone and inside a batch of 32.

vLLM has no /server_info: the backend is read from its log's "non-default args" line (what it parsed).
Its all-to-all kernels, and so DeepEP V2, run only when data parallel is above 1; at data parallel 1 the
buffer row says so and is skipped: nothing went through DeepEP. Above 1 the buffer row needs the line
vLLM's DeepEPV2All2AllManager logs at DEBUG ("DeepEP v2 all2all args", the ElasticBuffer's arguments):
the smoke starts vLLM with VLLM_LOGGING_LEVEL=DEBUG for it.
"""

from __future__ import annotations

import re
from pathlib import Path

from epstack.checkrow import Check
from epstack.smoke.serving import generation, vllmapi
from epstack.smoke.serving.checks import (
    BATCH,
    PROMPT_LEN,
    PROMPT_VOCAB,
    PROMPTS,
    Asked,
    Probed,
    agreement_row,
)
from epstack.smoke.serving.client import Endpoint
from epstack.smoke.serving.profiles import ServePlan
from epstack.smoke.serving.vllmcommand import all_to_all_ran

BACKEND_LINE = re.compile(r"non-default args: (\{.*)$", re.MULTILINE)
BUFFER_LINE = re.compile(r"DeepEP v2 all2all args (.*)$", re.MULTILINE)
LOGGING = {"VLLM_LOGGING_LEVEL": "DEBUG"}  # the buffer's line is vLLM's DEBUG


def _log(log: Path | None) -> str | None:
    return log.read_text(errors="replace") if log is not None and log.exists() else None


def backend(log: Path | None, plan: ServePlan) -> Check:
    """`--all2all-backend deepep_v2` with expert parallel, as vLLM's log says it parsed them."""
    expected = "deepep_v2" if plan.a2a == "deepep_v2" else "none (no expert parallel)"
    row = {"component": "all2all-backend", "expected": expected}
    text = _log(log)
    if text is None:
        return Check(**row, found="no log", verdict="skipped", detail="attached by --url: pass --server-log")
    parsed = BACKEND_LINE.search(text)
    if parsed is None:
        return Check(**row, found="no non-default args line", verdict="fail", detail=str(log),
                     fix="the server did not start as vLLM 0.33.0 does: read its log")  # fmt: skip
    args = parsed.group(1)
    deepep = "'all2all_backend': 'deepep_v2'" in args and "'enable_expert_parallel': True" in args
    found = "deepep_v2" if deepep else "none (no expert parallel)" if "all2all_backend" not in args else args
    return Check(
        **row,
        found=found,
        verdict="ok" if found == expected else "mismatch",
        fix="" if found == expected else "serve with --enable-expert-parallel --all2all-backend deepep_v2",
    )


def buffer(log: Path | None, plan: ServePlan) -> Check:
    """DeepEP V2's ElasticBuffer, as vLLM logs its arguments; skipped, said why, where none is made."""
    row = {"component": "deepep-v2-buffer", "expected": "DeepEP v2 all2all args (ElasticBuffer)"}
    if not all_to_all_ran(plan):
        why = "data parallel 1: vLLM runs no all-to-all (use_all2all_kernels): DeepEP V2 was not exercised"
        return Check(**row, found="-", verdict="skipped", detail=why if plan.a2a == "deepep_v2" else "no EP")
    text = _log(log)
    if text is None:
        return Check(**row, found="no log", verdict="skipped", detail="attached by --url: pass --server-log")
    line = BUFFER_LINE.search(text)
    if line is None:
        fix = "the server built no DeepEP V2 buffer (is VLLM_LOGGING_LEVEL=DEBUG set?): read its log"
        return Check(**row, found="not in the log", verdict="fail", detail=str(log), fix=fix)
    return Check(**row, found=line.group(1)[:200], verdict="ok")


def probe(endpoint: Endpoint, *, plan: ServePlan, log: Path | None, asked: Asked) -> Probed:
    """Every check against one vLLM server; RequestFailed (a named request failure) stops it."""
    info = vllmapi.server_info(endpoint, asked.timeout_s)
    checks = [backend(log, plan)]
    if checks[0].failed:
        return Probed(checks=checks, alone=[], info=info)
    checks.append(buffer(log, plan))
    model = str(info.get("model_path") or plan.model_path)
    prompts = [generation.prompt(asked.seed, i, PROMPT_LEN, PROMPT_VOCAB) for i in range(BATCH)]

    def ask(batch: list[list[int]]) -> list[generation.Generation]:
        return vllmapi.generate(endpoint, batch, asked.tokens, model, asked.timeout_s)

    alone = [ask([p])[0] for p in prompts[:PROMPTS]]
    checks.append(Check(component="token-counts", expected=f"{asked.tokens} tokens each",
                        found=f"{PROMPTS}/{PROMPTS} requests", verdict="ok"))  # fmt: skip
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
    compared = [generation.compare(a, b) for a, b in zip(alone, batch, strict=False)]
    checks.append(agreement_row(f"greedy-in-batch-of-{BATCH}", "as alone", compared))
    return Probed(checks=checks, alone=alone, info=info)
