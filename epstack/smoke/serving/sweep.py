"""The load sweep: the engine's own load generator, once per concurrency, its result read into one row
each: SGLang's `python -m sglang.benchmark.serving`, or vLLM's `vllm bench serve` (vLLM 0.33.0's
benchmarks/serve.py, which writes the same fields but for end-to-end latency, `e2el`).

Why SGLang's and not AIPerf: it ships in the pinned sglang wheel (the server's own version, nothing
added to the image), speaks SGLang's native /generate with token ids (--dataset-name random-ids
--tokenize-prompt: exact input lengths, no dataset download), and reports TTFT, ITL and end-to-end
latency percentiles and output tokens/s, the figures of the seeds' AIPerf table.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from epstack import cmd
from epstack.errors import CommandFailed

CONCURRENCIES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
MODULE = "sglang.benchmark.serving"
VLLM_BENCH = ("bench", "serve")  # after vLLM's program (epstack.smoke.serving.server.entry)


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


def vllm_argv(
    program: list[str],
    *,
    url: str,
    model: str,
    isl: int,
    osl: int,
    concurrency: int,
    requests: int,
    seed: int,
    output: Path,
) -> list[str]:
    """`vllm bench serve` on its random dataset (the model's tokenizer; exact lengths: range ratio 0 and
    EOS ignored) against /v1/completions, its result as one JSON file."""
    return [
        *program, *VLLM_BENCH,
        "--backend", "vllm",
        "--base-url", url,
        "--model", model,
        "--tokenizer", model,
        "--dataset-name", "random",
        "--random-input-len", str(isl),
        "--random-output-len", str(osl),
        "--random-range-ratio", "0",
        "--ignore-eos",
        "--num-prompts", str(requests),
        "--max-concurrency", str(concurrency),
        "--num-warmups", "1",
        "--ready-check-timeout-sec", "0",
        "--seed", str(seed),
        "--disable-tqdm",
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,99",
        "--save-result",
        "--result-dir", str(output.parent),
        "--result-filename", output.name,
    ]  # fmt: skip


def parse(result: dict[str, Any], *, concurrency: int, requests: int, e2e: str = "e2e_latency") -> Level:
    """A Level from one line of the JSONL (`e2e`: the end-to-end latency's name, vLLM's `e2el`);
    CommandFailed names a field the tool did not write."""
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
            e2e_p50_ms=round(float(result[f"median_{e2e}_ms"]), 2),
            e2e_p99_ms=round(float(result[f"p99_{e2e}_ms"]), 2),
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
    vllm: list[str] | None = None,
) -> Level:
    """One concurrency (`vllm`: vLLM's program, for `vllm bench serve`; else SGLang's generator);
    CommandFailed when the tool fails, hangs past timeout_s or writes no result."""
    output = work / f"sweep-c{concurrency}.{'json' if vllm else 'jsonl'}"
    output.unlink(missing_ok=True)
    generator = partial(vllm_argv, vllm) if vllm else argv
    load = generator(url=url, model=model, isl=isl, osl=osl, concurrency=concurrency, requests=requests,
                     seed=seed, output=output)  # fmt: skip
    done = cmd.run(*load, timeout=timeout_s)
    (work / f"sweep-c{concurrency}.log").write_text(done.stdout + done.stderr)
    lines = output.read_text().splitlines() if output.exists() else []
    if done.returncode != 0 or not lines:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        tool = "vllm bench serve" if vllm else MODULE
        raise CommandFailed(
            f"{tool} at concurrency {concurrency} exited {done.returncode} with no result: {last[0][:300]}"
        )
    if vllm:
        return parse(json.loads("".join(lines)), concurrency=concurrency, requests=requests, e2e="e2el")
    return parse(json.loads(lines[-1]), concurrency=concurrency, requests=requests)
