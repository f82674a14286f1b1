"""A stand-in for `vllm serve` (standard library only) speaking what the serve smoke asks vLLM 0.33.0:
/health, /version, /v1/models and /v1/completions by token ids with top logprobs named token_id:<id>,
and logging, in vLLM's own line format, the lines the smoke reads: "non-default args: {...}" (what it
parsed), "DeepEP v2 all2all args ..." (at DEBUG, only where data parallel is above 1 and the backend is
deepep_v2), and its start-up milestones. STANDIN names a behaviour: ok, no-ep (started as if without
expert parallel), malformed (completions answered with an object that is no completion), short (one
token short). It appends its pid to STANDIN_PIDS. As `vllm bench serve` it sends one completion of
--random-input-len ids to --base-url and writes a result file with vLLM's fields (LOADGEN=fail: exits 1)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODE = os.environ.get("STANDIN", "ok")
VOCAB = 151936
READY_S = float(os.environ.get("STANDIN_READY_S", "0.3"))


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("serve")
    parser.add_argument("model")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--data-parallel-size", type=int, default=1)
    parser.add_argument("--enable-expert-parallel", action="store_true")
    parser.add_argument("--all2all-backend", default="allgather_reducescatter")
    known, _ = parser.parse_known_args()
    return known


ARGS = _args()
STARTED = time.monotonic()


def log(level: str, where: str, message: str) -> None:
    """A line as vLLM's logger writes it (vllm/logger.py _FORMAT, _DATE_FORMAT)."""
    stamp = datetime.now().strftime("%m-%d %H:%M:%S")
    print(f"(APIServer pid={os.getpid()}) {level} {stamp} [{where}] {message}", flush=True)


def tokens(prompt: list[int], count: int) -> list[int]:
    state = (sum(prompt) * 31 + len(prompt)) % VOCAB
    out = []
    for _ in range(count):
        state = (state * 1103515245 + 12345) % VOCAB
        out.append(state)
    return out


def choice(index: int, prompt: list[int], asked: int) -> dict[str, Any]:
    ids = tokens(prompt, asked - (1 if MODE == "short" else 0))
    return {
        "index": index,
        "text": " ".join(f"t{i}" for i in ids),
        "logprobs": {
            "text_offset": list(range(len(ids))),
            "token_logprobs": [-1.0] * len(ids),
            "tokens": [f"token_id:{i}" for i in ids],
            "top_logprobs": [{f"token_id:{i}": -1.0, f"token_id:{(i + 1) % VOCAB}": -1.5} for i in ids],
        },
        "finish_reason": "length",
    }


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200 if time.monotonic() - STARTED > READY_S else 503, {})
        elif self.path == "/version":
            self._send(200, {"version": "0.33.0"})
        elif self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": ARGS.model, "root": ARGS.model}]})
        else:
            self._send(404, {})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/completions":
            self._send(404, {})
            return
        if MODE == "malformed":
            self._send(200, {"object": "text_completion", "choices": "none"})
            return
        prompts = body["prompt"] if isinstance(body["prompt"][0], list) else [body["prompt"]]
        asked = int(body["max_tokens"])
        choices = [choice(i, p, asked) for i, p in enumerate(prompts)]
        self._send(200, {"object": "text_completion", "model": body["model"], "choices": choices})


def bench() -> int:
    """`vllm bench serve`: one request, then the result vLLM's benchmarks/serve.py writes (its keys)."""
    parser = argparse.ArgumentParser()
    for flag in ("--base-url", "--model", "--random-input-len", "--random-output-len", "--num-prompts",
                 "--max-concurrency", "--result-dir", "--result-filename", "--dataset-name"):  # fmt: skip
        parser.add_argument(flag)
    parser.add_argument("--ignore-eos", action="store_true")
    args, _ = parser.parse_known_args(sys.argv[3:])
    if os.environ.get("LOADGEN") == "fail":
        print("Traceback (most recent call last):\nRuntimeError: vllm bench broke", file=sys.stderr)
        return 1
    body = {"model": args.model, "prompt": [1] * int(args.random_input_len),
            "max_tokens": int(args.random_output_len), "ignore_eos": args.ignore_eos}  # fmt: skip
    request = urllib.request.Request(args.base_url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    answer = json.loads(urllib.request.urlopen(request, timeout=10).read())
    assert len(answer["choices"][0]["logprobs"]["tokens"]) == int(args.random_output_len), answer
    n = int(args.num_prompts)
    medians = {"ttft": 12.0, "tpot": 2.0, "itl": 2.1, "e2el": 280.0}
    timings = {f"{kind}_{metric}_ms": value * scale for metric, value in medians.items()
               for kind, scale in (("mean", 1.0), ("median", 1.0), ("p99", 1.5))}  # fmt: skip
    result = {"duration": 1.5, "completed": n, "total_input_tokens": n * int(args.random_input_len),
              "total_output_tokens": n * int(args.random_output_len), "request_throughput": n / 1.5,
              "output_throughput": n * int(args.random_output_len) / 1.5, "errors": [""] * n,
              "max_concurrency": int(args.max_concurrency), **timings}  # fmt: skip
    with open(os.path.join(args.result_dir, args.result_filename), "w") as f:
        json.dump(result, f)
    return 0


def main() -> int:
    if sys.argv[1:3] == ["bench", "serve"]:
        return bench()
    if os.environ.get("STANDIN_PIDS"):
        with open(os.environ["STANDIN_PIDS"], "a") as f:
            f.write(f"{os.getpid()}\n")
    args: dict[str, object] = {"model_tag": ARGS.model, "port": ARGS.port}
    if ARGS.data_parallel_size != 1:
        args["data_parallel_size"] = ARGS.data_parallel_size
    if ARGS.enable_expert_parallel and MODE != "no-ep":
        args |= {"enable_expert_parallel": True, "all2all_backend": ARGS.all2all_backend}
    log("INFO", "startup.py:96", f"non-default args: {args}")
    log("INFO", "default_loader.py:507", "Loading weights took 0.01 seconds")
    log("INFO", "monitor.py:20", "torch.compile took 0.02 s in total")
    log("INFO", "gpu_model_runner.py:6517", "Graph capturing finished in 0 secs, took 0.01 GiB")
    debug = os.environ.get("VLLM_LOGGING_LEVEL") == "DEBUG"
    if debug and ARGS.data_parallel_size > 1 and args.get("all2all_backend") == "deepep_v2":
        log(
            "DEBUG",
            "all2all.py:1110",
            "DeepEP v2 all2all args {'num_max_tokens_per_rank': 256, 'hidden': 2048}",
        )
    log("INFO", "entry.py:139", f"Starting vLLM server on http://{ARGS.host}:{ARGS.port}")
    ThreadingHTTPServer((ARGS.host, ARGS.port), Handler).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
