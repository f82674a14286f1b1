"""A stand-in for `sglang serve` (standard library only) speaking the HTTP API the serve smoke uses:
/health_generate, /server_info, /generate by token ids, streamed as SGLang streams it (what
sglang.benchmark.serving reads). STANDIN names a behaviour: ok, die, hang, wrong-backend, malformed,
slow, short, diverge-none, tie-none, nan-logprob, inf-logprob, bool-id. It forks a child (as SGLang
forks its scheduler; it maps the libnccl STANDIN_NCCL names) and appends both pids as one line to
STANDIN_PIDS (one line per server started), so a test can check that nothing is left running.

die exits before it is healthy with SGLang 0.5.23's own refusal of the DeepEP V2 token budget, the
traceback as a real H200 run printed it (benchmarks/serve/results/serve-budget-fail.console).
diverge-none and tie-none change the greedy output of the --moe-a2a-backend none server: diverge-none
from the first token on, with tokens outside each other's top 5; tie-none parts at token TIE_AT at a
near tie, each run's token the other's second candidate, 0.02 below in each run. nan-logprob, inf-logprob
and bool-id answer a NaN or infinite logprob, or `true` as a token id, at token BAD_AT.

EPSTACK_FAULT (what benchmarks/serve/faults/ injects into DeepEP V2 on a GPU) changes the deepep_v2
server's answers as the fault changes a real model's: zero and permute answer other tokens from the first
on (outside each other's top 5), scale the same tokens with every logprob 0.3 lower (a combine scaled moves
every logit, not always the greedy choice)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODE = os.environ.get("STANDIN", "ok")
VOCAB = 151936
TIE_AT = 3
BAD_AT = 2
FAULT = os.environ.get("EPSTACK_FAULT", "")
SCALE_SHIFT = -0.3  # what EPSTACK_FAULT=scale does to every logprob
# The end of what SGLang 0.5.23 printed on an H200 when --cuda-graph-max-bs-decode=1024 exceeded the
# token budget (its moe_hook.py validate_deepep_v2_dispatch_token_budget), then exited 1.
BUDGET_REFUSAL = """\
Traceback (most recent call last):
  File "/opt/sgl/sglang/launch_server.py", line 29, in run_server
    server_args.resolve_once()
  File "/opt/sgl/sglang/srt/server_args.py", line 277, in resolve_once
    run_resolution_pipeline(self)
  File "/opt/sgl/sglang/srt/arg_groups/pipeline.py", line 375, in run_resolution_pipeline
    run_hook(validate_deepep_v2_dispatch_token_budget, server_args)
  File "/opt/sgl/sglang/srt/arg_groups/resolution_hooks.py", line 139, in run_hook
    step(server_args)
  File "/opt/sgl/sglang/srt/arg_groups/moe_hook.py", line 700, in validate_deepep_v2_dispatch_token_budget
    raise ValueError(
ValueError: DeepEP v2 per-rank decode CUDA graph exceeds SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK: \
required=1024, capacity=512 (requests=1024, tokens/request=1). Raise the environment value or lower \
--cuda-graph-max-bs-decode.
"""


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("serve")
    parser.add_argument("--model-type")
    parser.add_argument("--model-path")
    parser.add_argument("--moe-a2a-backend", default="none")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--host", default="127.0.0.1")
    known, _ = parser.parse_known_args()
    return known


ARGS = _args()
STARTED = time.monotonic()


def _reference() -> bool:
    return str(ARGS.moe_a2a_backend) == "none"


def _faulted() -> bool:
    """EPSTACK_FAULT on the deepep_v2 server (STANDIN_IGNORE_FAULT: a fault that changes nothing)."""
    ignored = bool(os.environ.get("STANDIN_IGNORE_FAULT"))
    return bool(FAULT) and str(ARGS.moe_a2a_backend) == "deepep_v2" and not ignored


def tokens(prompt: list[int], count: int) -> list[int]:
    """Greedy output: a function of the prompt (and, for diverge-none, tie-none and a fault, of the
    backend)."""
    diverged = (MODE == "diverge-none" and _reference()) or (_faulted() and FAULT != "scale")
    salt = 7919 if diverged else 0
    state = (sum(prompt) * 31 + len(prompt) + salt) % VOCAB
    out = []
    for k in range(count):
        state = (state * 1103515245 + 12345) % VOCAB
        if MODE == "tie-none" and _reference() and k == TIE_AT:
            state = (state + 1) % VOCAB  # the other run's second candidate; later tokens follow it
        out.append(state)
    return out


def candidates(ids: list[int]) -> list[list[list[Any]]]:
    """Top logprobs per position: the chosen token, then its neighbour (at a tie, the token it beat, or
    in the other run the token that beats it there)."""
    shift = SCALE_SHIFT if _faulted() and FAULT == "scale" else 0.0
    top = [[[-1.0 + shift, i, None], [-1.5 + shift, (i + 1) % VOCAB, None]] for i in ids]
    if MODE == "tie-none" and len(ids) > TIE_AT:
        chosen = ids[TIE_AT]
        other = (chosen - 1) % VOCAB if _reference() else (chosen + 1) % VOCAB
        top[TIE_AT] = [[-1.0, chosen, None], [-1.02, other, None]]
    return top


def answer(prompt: list[int], params: dict[str, Any]) -> dict[str, Any]:
    count = int(params["max_new_tokens"]) - (1 if MODE == "short" else 0)
    ids: list[Any] = tokens(prompt, count)
    top = candidates(ids)
    chosen = [list(entries[0]) for entries in top]
    if MODE == "nan-logprob":
        chosen[BAD_AT][0] = float("nan")
    elif MODE == "inf-logprob":
        top[BAD_AT][1][0] = float("-inf")
    elif MODE == "bool-id":
        ids = [*ids[:BAD_AT], True, *ids[BAD_AT + 1 :]]
    return {
        "text": " ".join(f"t{i}" for i in ids),
        "output_ids": ids,
        "meta_info": {
            "prompt_tokens": len(prompt),
            "completion_tokens": count,
            "output_token_logprobs": chosen,
            "output_top_logprobs": top,
        },
    }


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        ready = MODE != "hang" and time.monotonic() - STARTED > float(
            os.environ.get("STANDIN_READY_S", "0.3")
        )
        if self.path in ("/health", "/health_generate"):
            if MODE == "hang":  # a test waits for this line in the server's log
                print(f"standin: {self.path} asked", flush=True)
            self._send(200 if ready else 503, b"")
        elif self.path == "/server_info":
            backend = "none" if MODE == "wrong-backend" else ARGS.moe_a2a_backend
            info = {
                "moe_a2a_backend": backend,
                "moe_runner_backend": "auto",
                "version": "0.5.23",
                "model_path": ARGS.model_path,
            }
            self._send(200, json.dumps(info).encode())
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"data": [{"id": ARGS.model_path}]}).encode())
        else:
            self._send(404, b"{}")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if MODE == "malformed":
            self._send(200, b"<html>not json</html>", "text/html")
            return
        if MODE == "slow":
            time.sleep(float(os.environ.get("STANDIN_SLOW_S", "5")))
        prompts = body["input_ids"]
        batch = bool(prompts) and isinstance(prompts[0], list)
        if not body.get("stream"):
            out = (
                [answer(p, body["sampling_params"]) for p in prompts]
                if batch
                else answer(prompts, body["sampling_params"])
            )
            self._send(200, json.dumps(out).encode())
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        full = answer(prompts, body["sampling_params"])
        for n in range(1, len(full["output_ids"]) + 1):
            chunk = {
                "text": " ".join(f"t{i}" for i in full["output_ids"][:n]),
                "output_ids": full["output_ids"][:n],
                "meta_info": {"prompt_tokens": len(prompts), "completion_tokens": n},
            }
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")


# The forked child stands in for SGLang's scheduler: it maps the libnccl.so.2 STANDIN_NCCL names (as
# torch does at import), then says so before the server answers.
CHILD = """
import ctypes, os, time
if os.environ.get("STANDIN_NCCL"):
    ctypes.CDLL(os.environ["STANDIN_NCCL"])
print("ready", flush=True)
time.sleep(600)
"""


def main() -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    if os.environ.get("STANDIN_PIDS"):
        with open(os.environ["STANDIN_PIDS"], "a") as f:
            f.write(f"{os.getpid()} {child.pid}\n")
    print(f"standin {MODE} on {ARGS.port}: {' '.join(sys.argv[1:])}", flush=True)
    if MODE == "die":
        sys.stderr.write(BUDGET_REFUSAL)
        sys.exit(1)
    if _faulted():  # as benchmarks/serve/faults/site/sitecustomize.py says it
        print(f"epstack-fault: {FAULT}: the stand-in's answers changed (pid {os.getpid()})", flush=True)
    if ARGS.moe_a2a_backend == "deepep_v2":
        print(
            "Initialized DeepEP v2 ElasticBuffer: world_size=1 hidden_size=2048 num_topk=8 "
            "max_dispatch_tokens_per_rank=512 use_fp8_dispatch=False allow_hybrid_mode=False num_bytes=1",
            flush=True,
        )
    ThreadingHTTPServer((ARGS.host, ARGS.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
