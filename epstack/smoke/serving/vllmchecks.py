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
from epstack.errors import shown
from epstack.inputs import search_log
from epstack.smoke.serving import generation, vllmapi
from epstack.smoke.serving.checks import Asked, Probed, greedy
from epstack.smoke.serving.client import Endpoint
from epstack.smoke.serving.profiles import ServePlan
from epstack.smoke.serving.vllmcommand import all_to_all_ran

BACKEND_LINE = re.compile(r"non-default args: \{.*")
BUFFER_LINE = re.compile(r"DeepEP v2 all2all args .*")
LOGGING = {"VLLM_LOGGING_LEVEL": "DEBUG"}  # the buffer's line is vLLM's DEBUG


def _line(log: Path | None, pattern: re.Pattern[str]) -> str | None:
    """The first line of the server's log `pattern` matches (read bounded, epstack.inputs.search_log)."""
    return search_log(log, pattern, what="a server log") if log is not None and log.exists() else None


def backend(log: Path | None, plan: ServePlan) -> Check:
    """`--all2all-backend deepep_v2` with expert parallel, as vLLM's log says it parsed them."""
    expected = "deepep_v2" if plan.a2a == "deepep_v2" else "none (no expert parallel)"
    row = {"component": "all2all-backend", "expected": expected}
    if log is None or not log.exists():
        return Check(**row, found="no log", verdict="skipped", detail="attached by --url: pass --server-log")
    parsed = _line(log, BACKEND_LINE)
    if parsed is None:
        return Check(**row, found="no non-default args line", verdict="fail", detail=str(log),
                     fix="the server did not start as vLLM 0.33.0 does: read its log")  # fmt: skip
    deepep = "'all2all_backend': 'deepep_v2'" in parsed and "'enable_expert_parallel': True" in parsed
    found = (
        "deepep_v2" if deepep else "none (no expert parallel)" if "all2all_backend" not in parsed else parsed
    )
    return Check(
        **row,
        found=shown(found, quote=False),
        verdict="ok" if found == expected else "mismatch",
        fix="" if found == expected else "serve with --enable-expert-parallel --all2all-backend deepep_v2",
    )


def buffer(log: Path | None, plan: ServePlan) -> Check:
    """DeepEP V2's ElasticBuffer, as vLLM logs its arguments; skipped, said why, where none is made."""
    row = {"component": "deepep-v2-buffer", "expected": "DeepEP v2 all2all args (ElasticBuffer)"}
    if not all_to_all_ran(plan):
        why = "data parallel 1: vLLM runs no all-to-all (use_all2all_kernels): DeepEP V2 was not exercised"
        return Check(**row, found="-", verdict="skipped", detail=why if plan.a2a == "deepep_v2" else "no EP")
    if log is None or not log.exists():
        return Check(**row, found="no log", verdict="skipped", detail="attached by --url: pass --server-log")
    line = _line(log, BUFFER_LINE)
    if line is None:
        fix = "the server built no DeepEP V2 buffer (is VLLM_LOGGING_LEVEL=DEBUG set?): read its log"
        return Check(**row, found="not in the log", verdict="fail", detail=str(log), fix=fix)
    return Check(**row, found=shown(line.removeprefix("DeepEP v2 all2all args "), quote=False), verdict="ok")


def probe(endpoint: Endpoint, *, plan: ServePlan, log: Path | None, asked: Asked) -> Probed:
    """Every check against one vLLM server; RequestFailed (a named request failure) stops it."""
    info = vllmapi.server_info(endpoint, asked.timeout_s)
    checks = [backend(log, plan)]
    if checks[0].failed:
        return Probed(checks=checks, alone=[], info=info)
    checks.append(buffer(log, plan))
    model = str(info.get("model_path") or plan.model_path)

    def ask(prompts: list[list[int]]) -> list[generation.Generation]:
        return vllmapi.generate(endpoint, prompts, asked.tokens, model, asked.timeout_s)

    return Probed(checks=checks, alone=greedy(ask, asked, checks), info=info)
