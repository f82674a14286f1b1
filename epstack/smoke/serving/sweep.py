"""The load sweep: SGLang's own load generator, `python -m sglang.benchmark.serving`, once per
concurrency, its JSONL result read into one row each.

Why SGLang's and not AIPerf: it ships in the pinned sglang wheel (the server's own version, nothing
added to the image), speaks SGLang's native /generate with token ids (--dataset-name random-ids
--tokenize-prompt: exact input lengths, no dataset download), and reports TTFT, ITL and end-to-end
latency percentiles and output tokens/s, the figures of the seeds' AIPerf table.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epstack import cmd
from epstack.errors import CommandFailed

CONCURRENCIES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
MODULE = "sglang.benchmark.serving"


@dataclass(frozen=True, kw_only=True)
class Level:
    """One concurrency of the sweep, as sglang.benchmark.serving measured it (milliseconds)."""

    concurrency: int
    requests: int
    completed: int
    errors: int
    first_error: str
    duration_s: float
    output_tokens: int
    output_tokens_per_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    e2e_p50_ms: float
    e2e_p99_ms: float


def argv(
    *, url: str, model: str, isl: int, osl: int, concurrency: int, requests: int, seed: int, output: Path
) -> list[str]:
    return [
        sys.executable, "-m", MODULE,
        "--backend", "sglang",
        "--base-url", url,
        "--model", model,
        "--tokenizer", model,
        "--dataset-name", "random-ids",
        "--tokenize-prompt",
        "--random-input-len", str(isl),
        "--random-output-len", str(osl),
        "--random-range-ratio", "1",
        "--num-prompts", str(requests),
        "--max-concurrency", str(concurrency),
        "--warmup-requests", "1",
        "--ready-check-timeout-sec", "0",
        "--seed", str(seed),
        "--disable-tqdm",
        "--output-details",
        "--output-file", str(output),
    ]  # fmt: skip


def parse(result: dict[str, Any], *, concurrency: int, requests: int) -> Level:
    """A Level from one line of the JSONL; CommandFailed names a field the tool did not write."""
    try:
        errors = [e for e in result.get("errors", []) if e]
        return Level(
            concurrency=concurrency,
            requests=requests,
            completed=int(result["completed"]),
            errors=requests - int(result["completed"]),
            first_error=str(errors[0]).strip().splitlines()[-1][:300] if errors else "",
            duration_s=round(float(result["duration"]), 3),
            output_tokens=int(result["total_output_tokens"]),
            output_tokens_per_s=round(float(result["output_throughput"]), 1),
            ttft_p50_ms=round(float(result["median_ttft_ms"]), 2),
            ttft_p99_ms=round(float(result["p99_ttft_ms"]), 2),
            itl_p50_ms=round(float(result["median_itl_ms"]), 3),
            itl_p99_ms=round(float(result["p99_itl_ms"]), 3),
            e2e_p50_ms=round(float(result["median_e2e_latency_ms"]), 2),
            e2e_p99_ms=round(float(result["p99_e2e_latency_ms"]), 2),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CommandFailed(f"{MODULE} wrote a result without {exc} at concurrency {concurrency}") from None


def run_level(
    *,
    url: str,
    model: str,
    isl: int,
    osl: int,
    concurrency: int,
    requests: int,
    seed: int,
    work: Path,
    timeout_s: float,
) -> Level:
    """One concurrency; CommandFailed when the tool fails, hangs past timeout_s or writes no result."""
    output = work / f"sweep-c{concurrency}.jsonl"
    output.unlink(missing_ok=True)
    done = cmd.run(
        *argv(
            url=url,
            model=model,
            isl=isl,
            osl=osl,
            concurrency=concurrency,
            requests=requests,
            seed=seed,
            output=output,
        ),
        timeout=timeout_s,
    )
    (work / f"sweep-c{concurrency}.log").write_text(done.stdout + done.stderr)
    lines = output.read_text().splitlines() if output.exists() else []
    if done.returncode != 0 or not lines:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise CommandFailed(
            f"{MODULE} at concurrency {concurrency} exited {done.returncode} with no result: {last[0][:300]}"
        )
    return parse(json.loads(lines[-1]), concurrency=concurrency, requests=requests)
