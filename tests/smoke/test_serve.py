"""`epstack smoke serve` end to end on CPU: the real command in a subprocess, the `sglang` it starts a
stand-in HTTP server (sglang_standin.py, standard library only) that behaves well or fails one way.
Each failure is named in the JSON report and by the exit code, and nothing the smoke started is left
running, Ctrl-C and SIGTERM included. The load sweep runs a stand-in of sglang.benchmark.serving (SGLang
itself cannot import in this CPU venv)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from epstack.commands.main import main as epstack_main
from epstack.errors import BAD_INPUT, CHECK_FAILED, ENVIRONMENT, INTERRUPTED, OK
from epstack.pins.load import load_pins
from epstack.smoke.serving import tinymodel
from tests.conftest import PINS
from tests.fakeserver import Reply, fake_server
from tests.guard.test_guard import fake_nccl  # noqa: F401 (fixture: gcc-built libnccl 2.28.9, 2.30.7, the pin)
from tests.smoke.processes import dead, gone

REPO = Path(__file__).resolve().parents[2]
STANDIN = Path(__file__).with_name("sglang_standin.py")
H200_LEVEL = Path(__file__).parent / "data" / "sweep-c1-h200.json"
BUDGET_LINE = (
    "ValueError: DeepEP v2 per-rank decode CUDA graph exceeds "
    "SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK: "
    "required=1024, capacity=512 (requests=1024, tokens/request=1). Raise the environment value or lower "
    "--cuda-graph-max-bs-decode."
)

# sglang.benchmark.serving as the sweep runs it: one request of --random-input-len ids to the server's
# /generate, then the real H200 result line with this level's counts; LOADGEN=fail exits 1 instead.
LOADGEN = """
import argparse, json, os, sys, urllib.request
p = argparse.ArgumentParser()
for flag in ("--base-url", "--output-file", "--random-input-len", "--random-output-len", "--num-prompts",
             "--max-concurrency", "--model", "--dataset-name"):
    p.add_argument(flag)
args, _ = p.parse_known_args()
if os.environ.get("LOADGEN") == "fail":
    sys.exit("Traceback (most recent call last):\\nRuntimeError: loadgen broke")
body = {{"input_ids": [1] * int(args.random_input_len), "sampling_params": {{"temperature": 0,
        "max_new_tokens": int(args.random_output_len), "ignore_eos": True}}}}
req = urllib.request.Request(args.base_url + "/generate", data=json.dumps(body).encode(),
                             headers={{"Content-Type": "application/json"}})
out = json.loads(urllib.request.urlopen(req, timeout=10).read())
assert len(out["output_ids"]) == int(args.random_output_len), out
result = json.load(open({level!r}))
n = int(args.num_prompts)
result.update(completed=n, max_concurrency=int(args.max_concurrency), errors=[""] * n,
              dataset_name=args.dataset_name, model=args.model)
with open(args.output_file, "a") as f:
    f.write(json.dumps(result) + "\\n")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def started_pids(path: Path) -> list[list[int]]:
    """[server, its child] per server the stand-in started (complete lines only)."""
    if not path.exists():
        return []
    text = path.read_text()
    return [[int(p) for p in line.split()] for line in text.splitlines(keepends=True) if line.endswith("\n")]


@dataclass
class Served:
    code: int
    report: dict[str, Any]
    err: str
    servers: list[list[int]]  # [server pid, its child's pid] per server started
    elapsed_s: float

    def check(self, component: str, nth: int = 0) -> dict[str, Any]:
        rows = [c for c in self.report["checks"] if c["component"] == component]
        return dict(rows[nth])

    def all_gone(self) -> bool:
        return all(gone(pid) for pair in self.servers for pid in pair)


@dataclass
class Smoke:
    """`epstack smoke serve` with `sglang` on PATH being the stand-in, on a port of its own."""

    work: Path
    port: int

    def env(self, mode: str, extra: dict[str, str] | None) -> dict[str, str]:
        bin_dir = self.work / "bin"
        if not bin_dir.exists():
            bin_dir.mkdir()
            script = bin_dir / "sglang"
            script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
            script.chmod(0o755)
        return {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "STANDIN": mode,
            "STANDIN_PIDS": str(self.pids),
            **(extra or {}),
        }

    @property
    def pids(self) -> Path:
        return self.work / "standin.pids"

    @property
    def report(self) -> Path:
        return self.work / "report.json"

    def argv(self, *extra: str) -> list[str]:
        return [
            sys.executable, "-m", "epstack", "smoke", "serve",
            "--run-dir", str(self.work / "run"),
            "--json", str(self.report),
            "--model-path", str(self.work / "model"),  # not the tiny profile's: no tokenizer written
            f"--sglang-arg=--port={self.port}",
            *extra,
        ]  # fmt: skip

    def start(self, mode: str, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(*extra),
            cwd=REPO,
            env=self.env(mode, env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # Ctrl-C as at a terminal, also where pytest runs in a background job (SIGINT ignored there,
            # and an ignored SIGINT is inherited: Python then installs no KeyboardInterrupt for it)
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
        )

    def run(self, mode: str, *extra: str, env: dict[str, str] | None = None, timeout_s: float = 60) -> Served:
        start = time.monotonic()
        with self.start(mode, *extra, env=env) as proc:
            try:
                _, err = proc.communicate(timeout=timeout_s)
            finally:
                if proc.poll() is None:  # the test failed: the smoke hangs
                    proc.kill()
        report = json.loads(self.report.read_text()) if self.report.exists() else {}
        return Served(
            code=proc.returncode,
            report=report,
            err=err,
            servers=started_pids(self.pids),
            elapsed_s=time.monotonic() - start,
        )


def _reap(pids: Path) -> None:
    """After a failed test, what the stand-ins left running (still theirs: the command line says so)."""
    for pid in (pid for pair in started_pids(pids) for pid in pair):
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if not dead(pid) and (STANDIN.name.encode() in cmdline or b"sleep(600)" in cmdline):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def smoke(tmp_path: Path) -> Iterator[Smoke]:
    (tmp_path / "model").mkdir()
    smoke = Smoke(work=tmp_path, port=free_port())
    yield smoke
    _reap(smoke.pids)


def test_a_good_server_passes_and_matches_the_one_without_deepep(smoke: Smoke) -> None:
    served = smoke.run("ok", "--no-sweep", "--sglang-arg=--api-key=s3cret-key")
    assert served.code == OK, served.err
    report = served.report
    assert report["verdict"] == "pass" and report["failure"] is None
    assert [r["a2a"] for r in report["runs"]] == ["deepep_v2", "none"]
    for run in report["runs"]:
        assert run["launch_to_healthy_s"] is not None and 0 < run["launch_to_healthy_s"] < 30
        assert f"--port={smoke.port}" in run["argv"] and run["argv"][1] == "serve"
        assert run["info"]["moe_a2a_backend"] == run["a2a"]
        assert run["argv"][-1] == "--api-key=***", "the server got the key; the report does not keep it"
    assert "s3cret-key" not in served.err + json.dumps(report)
    # the serve plan's environment (the token budget) is what the server got
    assert "SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK" in report["runs"][0]["env"]
    backend = served.check("moe-a2a-backend")
    assert (backend["verdict"], backend["found"]) == ("ok", "deepep_v2")
    buffer = served.check("deepep-v2-buffer")
    assert buffer["verdict"] == "ok" and "max_dispatch_tokens_per_rank=512" in buffer["found"]
    assert served.check("deepep-v2-buffer", 1)["verdict"] == "skipped"  # the none server has no buffer
    for name in ("token-counts", "greedy-repeat", "greedy-in-batch-of-32", "answer-values"):
        assert served.check(name)["verdict"] == "ok" and served.check(name, 1)["verdict"] == "ok"
    assert served.check("answer-values")["found"] == "41 answers"
    versus = served.check("deepep-v2-vs-none")
    assert (versus["verdict"], versus["found"]) == ("ok", "8/8 identical")
    assert versus["detail"] == (
        "max |logprob difference| up to the parting 0 (tolerance 0.15); per prompt 0 0 0 0 0 0 0 0"
    )
    comparison = report["comparison"]
    assert comparison["prompts"] == comparison["identical"] == comparison["close"] == 8
    assert comparison["max_logprob_diff"] == [0.0] * 8 and comparison["tolerance"] == 0.15
    # the control (each prompt against another's reference): the rule refuses every pair, in the report
    control = served.check("deepep-v2-vs-none-control")
    assert (control["verdict"], control["found"]) == ("ok", "8/8 refused")
    assert comparison["control"]["close"] == 0 and comparison["control"]["first_divergence"] == [0] * 8
    # both runs' generations are kept: the rule can be applied to the report again
    assert len(comparison["through"]) == len(comparison["reference"]) == 8
    assert len(comparison["through"][0]["output_ids"]) == 32
    assert len(served.servers) == 2 and served.all_gone()
    assert "deepep-v2-vs-none: ok" in served.err


@pytest.mark.parametrize(
    ("version", "verdict"), [(load_pins(PINS).nccl_version, "ok"), ("2.28.9", "mismatch")]
)
def test_the_report_names_the_nccl_each_server_process_loaded(
    smoke: Smoke,
    fake_nccl: dict[str, Path],  # noqa: F811
    version: str,
    verdict: str,
) -> None:
    """The stand-in's scheduler maps a gcc-built libnccl.so.2: each server's report names that library's
    own ncclGetVersion and the process; one below DeepEP V2's floor fails the smoke."""
    served = smoke.run("ok", "--no-sweep", env={"STANDIN_NCCL": str(fake_nccl[version])})
    for n, run in enumerate(served.report["runs"]):
        scheduler = served.servers[n][1]
        assert [(p["pid"], p["version"], p["path"]) for p in run["nccl"]] == [
            (scheduler, version, str(fake_nccl[version]))
        ]
        row = served.check(f"NCCL ({run['a2a']} server)")
        assert (row["found"], row["verdict"]) == (f"{version} in 1 process", verdict)
    if verdict == "ok":
        assert served.code == OK, served.err
    else:
        assert served.code == CHECK_FAILED
        assert served.report["failure"]["message"].startswith("NCCL (deepep_v2 server)")
    assert served.all_gone()


def test_a_near_tie_without_deepep_still_passes(smoke: Smoke) -> None:
    """The none server parts at token 3, where each run's token is the other's second candidate."""
    served = smoke.run("tie-none", "--no-sweep")
    assert served.code == OK, served.err
    versus = served.check("deepep-v2-vs-none")
    assert versus["verdict"] == "ok"
    assert versus["found"] == "0/8 identical; parted: " + ", ".join(
        f"prompt {i} at token 3" for i in range(8)
    )
    comparison = served.report["comparison"]
    assert (comparison["identical"], comparison["close"]) == (0, 8)
    assert comparison["first_divergence"] == [3] * 8
    assert all(diff == pytest.approx(0.02) for diff in comparison["max_logprob_diff"])
    assert served.check("deepep-v2-vs-none-control")["verdict"] == "ok"
    assert served.all_gone()


def test_a_different_answer_without_deepep_fails_the_comparison(smoke: Smoke) -> None:
    served = smoke.run("diverge-none", "--no-sweep")
    assert served.code == CHECK_FAILED
    report = served.report
    assert report["verdict"] == "fail"
    assert report["failure"]["kind"] == "check" and report["failure"]["message"] == "deepep-v2-vs-none failed"
    versus = served.check("deepep-v2-vs-none")
    assert versus["verdict"] == "fail" and versus["found"].startswith(
        "0/8 identical; parted: prompt 0 at token 0"
    )
    assert "prompt 0 (token 0: a token outside the other's top-5)" in versus["detail"] and versus["fix"]
    comparison = report["comparison"]
    assert (comparison["prompts"], comparison["identical"], comparison["close"]) == (8, 0, 0)
    assert comparison["first_divergence"] == [0] * 8
    # each server on its own was consistent
    assert all(served.check("greedy-repeat", n)["verdict"] == "ok" for n in (0, 1))
    assert served.all_gone()


# ---- the fault harness's idea on CPU: EPSTACK_FAULT reaches the servers the smoke starts ----
# (benchmarks/serve/faults/ patches DeepEP V2 itself on a GPU; the stand-in answers as each fault makes a
# real model answer: other tokens from the first on, or the same tokens with every logprob moved)


@pytest.mark.parametrize("fault", ["zero", "permute"])
def test_a_fault_that_changes_the_tokens_fails_the_comparison(smoke: Smoke, fault: str) -> None:
    served = smoke.run("ok", "--no-sweep", env={"EPSTACK_FAULT": fault})
    assert served.code == CHECK_FAILED, served.err
    assert served.report["failure"]["message"] == "deepep-v2-vs-none failed"
    versus = served.check("deepep-v2-vs-none")
    assert versus["verdict"] == "fail" and versus["found"].startswith(
        "0/8 identical; parted: prompt 0 at token 0"
    )
    # each server on its own passed every check; only the comparison tells
    assert all(
        c["verdict"] != "fail" for c in served.report["checks"] if c["component"] != versus["component"]
    )
    assert served.all_gone()


def test_a_fault_that_keeps_the_tokens_fails_on_the_logprobs(smoke: Smoke) -> None:
    """Combine scaled: the same greedy tokens, every logprob 0.3 lower. Tokens alone (8/8 identical)
    would pass; the logprobs of the same tokens are held to the tolerance."""
    served = smoke.run("ok", "--no-sweep", env={"EPSTACK_FAULT": "scale"})
    assert served.code == CHECK_FAILED, served.err
    versus = served.check("deepep-v2-vs-none")
    assert (versus["verdict"], versus["found"]) == ("fail", "8/8 identical")
    assert versus["detail"].startswith("max |logprob difference| up to the parting 0.3 (tolerance 0.15)")
    assert "prompt 7 (logprobs 0.3 apart)" in versus["detail"]
    assert served.report["comparison"]["max_logprob_diff"] == [pytest.approx(0.3)] * 8
    assert served.check("deepep-v2-vs-none-control")["verdict"] == "ok"
    assert served.all_gone()


# ---- --reference: a passing report's answers without DeepEP stand in for the second server ----


def _passing_reference(smoke: Smoke) -> Path:
    served = smoke.run("ok", "--no-sweep")
    assert served.code == OK, served.err
    return Path(shutil.copy(smoke.report, smoke.work / "reference.json"))


def test_a_passing_report_stands_in_for_the_server_without_deepep(smoke: Smoke) -> None:
    """One server each run: a healthy one passes against the report, a faulted one fails as it fails
    against a live server without DeepEP."""
    reference = _passing_reference(smoke)
    smoke.pids.unlink()
    healthy = smoke.run("ok", "--no-sweep", "--reference", str(reference))
    assert healthy.code == OK, healthy.err
    assert [r["a2a"] for r in healthy.report["runs"]] == ["deepep_v2"] and len(healthy.servers) == 1
    assert healthy.check("deepep-v2-vs-none")["found"] == "8/8 identical"
    assert healthy.report["comparison"]["reference_from"] == str(reference)
    smoke.pids.unlink()
    faulted = smoke.run("ok", "--no-sweep", "--reference", str(reference), env={"EPSTACK_FAULT": "zero"})
    assert faulted.code == CHECK_FAILED and len(faulted.servers) == 1, faulted.err
    assert faulted.report["failure"]["message"] == "deepep-v2-vs-none failed"
    assert faulted.check("deepep-v2-vs-none")["found"].startswith(
        "0/8 identical; parted: prompt 0 at token 0"
    )


def test_an_unreadable_reference_is_bad_input_before_the_model_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache, report = tmp_path / "cache", tmp_path / "report.json"
    argv = ["smoke", "serve", "--reference", str(tmp_path / "none.json"), "--model-cache", str(cache)]
    assert epstack_main([*argv, "--json", str(report), "--run-dir", str(tmp_path / "run")]) == BAD_INPUT
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"{tmp_path / 'none.json'}: no such file; fix: " in line
    assert not report.exists() and not cache.exists()


@pytest.mark.parametrize(
    ("case", "flags", "named"),
    [
        ("failed", ["--seed", "0"], "no passing comparison without DeepEP"),
        ("other engine", [], "engine vllm (this run: sglang)"),
        ("other seed", ["--seed", "3"], "seed 0 (this run: 3)"),
        ("other tokens", ["--tokens", "16"], "tokens 32 (this run: 16)"),
        (
            "no compare",
            ["--no-compare"],
            "--reference: only where this command compares, not with --no-compare",
        ),
        (
            "url",
            ["--url", "http://127.0.0.1:1"],
            "--reference: only where this command compares, not with --url",
        ),
    ],
)
def test_a_reference_that_cannot_stand_in_is_bad_input(
    smoke: Smoke, case: str, flags: list[str], named: str
) -> None:
    if case == "failed":
        served = smoke.run("ok", "--no-sweep", env={"EPSTACK_FAULT": "zero"})
        assert served.code == CHECK_FAILED
        reference = Path(shutil.copy(smoke.report, smoke.work / "reference.json"))
    else:
        reference = _passing_reference(smoke)
    if case == "other engine":
        reference.write_text(json.dumps(json.loads(reference.read_text()) | {"engine": "vllm"}))
    smoke.pids.unlink()
    smoke.report.unlink()
    served = smoke.run("ok", "--no-sweep", "--reference", str(reference), *flags)
    (line,) = served.err.strip().splitlines()
    assert served.code == BAD_INPUT and named in line and "fix: " in line, served.err
    assert served.servers == [] and not smoke.report.exists()


@pytest.mark.parametrize(
    ("mode", "found"),
    [
        ("nan-logprob", "output_token_logprobs[2] is NaN, not a finite logprob"),
        ("inf-logprob", "output_top_logprobs[2][1][0] is -Infinity, not a finite logprob"),
        ("bool-id", "output_ids[2] is true, not a token id"),
    ],
)
def test_an_answer_with_a_value_no_model_gives_fails_a_named_row(smoke: Smoke, mode: str, found: str) -> None:
    served = smoke.run(mode, "--no-sweep")
    assert served.code == CHECK_FAILED, served.err
    row = served.check("answer-values")
    assert (row["verdict"], row["found"]) == ("fail", found) and row["fix"]
    assert served.report["failure"] == {
        "kind": "check",
        "message": "answer-values failed",
        "finding": None,
        "log_tail": [],
    }
    # nothing to compare: the server without DeepEP is not started
    assert [r["a2a"] for r in served.report["runs"]] == ["deepep_v2"] and served.report["comparison"] is None
    assert served.all_gone()


def test_a_server_never_healthy_is_a_health_timeout(smoke: Smoke) -> None:
    served = smoke.run("hang", "--no-sweep", "--health-timeout", "2")
    assert served.code == CHECK_FAILED  # a hang: exit 1 (no known failure in its log)
    failure = served.report["failure"]
    assert failure["kind"] == "health-timeout" and failure["finding"] is None
    assert failure["message"].startswith("the server was not healthy within 2 s (not a known failure)")
    assert any("standin hang" in line for line in failure["log_tail"])
    assert 2 <= served.elapsed_s < 15
    assert [r["launch_to_healthy_s"] for r in served.report["runs"]] == [None]
    assert served.report["checks"] == [] and served.report["comparison"] is None
    assert len(served.servers) == 1 and served.all_gone()


def test_a_server_that_exits_is_named_with_its_known_failure(smoke: Smoke) -> None:
    """SGLang's refusal of the DeepEP V2 token budget: an environment problem (exit 3), named, fixed."""
    served = smoke.run("die", "--no-sweep")
    assert served.code == ENVIRONMENT
    failure = served.report["failure"]
    assert failure["kind"] == "server-exited" and failure["finding"] == "deepep-v2-token-budget"
    assert failure["message"].startswith(
        "the server exited with 1 before it was healthy (deepep-v2-token-budget"
    )
    assert "fix: " in failure["message"]
    assert failure["log_tail"] and failure["log_tail"][-1] == BUDGET_LINE
    assert "deepep-v2-token-budget" in served.err and f"  | {BUDGET_LINE}" in served.err
    # the server exited on its own; the child it left behind was stopped with its group
    assert len(served.servers) == 1 and served.all_gone()
    assert len(served.report["runs"]) == 1  # no second server after the first failed


def test_a_wrong_backend_stops_before_the_checks(smoke: Smoke) -> None:
    served = smoke.run("wrong-backend", "--no-sweep")
    assert served.code == CHECK_FAILED
    failure = served.report["failure"]
    assert failure["kind"] == "wrong-backend"
    assert failure["message"] == "the server reports --moe-a2a-backend none, not deepep_v2"
    assert [c["component"] for c in served.report["checks"]] == ["moe-a2a-backend"]
    assert served.check("moe-a2a-backend")["verdict"] == "mismatch"
    assert len(served.report["runs"]) == 1 and served.all_gone()


def test_a_malformed_answer_is_a_request_failure(smoke: Smoke) -> None:
    served = smoke.run("malformed", "--no-sweep")
    assert served.code == CHECK_FAILED
    failure = served.report["failure"]
    assert failure["kind"] == "request"
    assert failure["message"].startswith("/generate: malformed answer, not JSON")
    assert "<html>not json</html>" in failure["message"]
    assert "Traceback" not in served.err and served.all_gone()


def test_a_slow_answer_times_out_without_waiting_for_it(smoke: Smoke) -> None:
    served = smoke.run("slow", "--no-sweep", "--request-timeout", "1", env={"STANDIN_SLOW_S": "60"})
    assert served.code == CHECK_FAILED
    failure = served.report["failure"]
    assert failure["kind"] == "request"
    assert failure["message"] == f"POST http://127.0.0.1:{smoke.port}/generate: no answer within 1 s"
    assert served.elapsed_s < 20  # the stand-in would answer after 60 s
    assert served.all_gone()


def test_fewer_tokens_than_asked_is_a_request_failure(smoke: Smoke) -> None:
    served = smoke.run("short", "--no-sweep", "--tokens", "8")
    assert served.code == CHECK_FAILED
    failure = served.report["failure"]
    assert failure["kind"] == "request"
    assert failure["message"] == (
        "/generate: asked for 8 tokens (ignore_eos), got 7 output ids, completion_tokens 7"
    )
    assert served.all_gone()


@pytest.fixture
def loadgen(tmp_path: Path) -> dict[str, str]:
    """PYTHONPATH with a stand-in `sglang.benchmark.serving` (see LOADGEN)."""
    package = tmp_path / "loadgen" / "sglang" / "benchmark"
    package.mkdir(parents=True)
    for folder in (package, package.parent):
        (folder / "__init__.py").write_text("")
    (package / "serving.py").write_text(LOADGEN.format(level=str(H200_LEVEL)))
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path / "loadgen"), str(REPO)])}


def test_the_sweep_runs_the_load_generator_per_concurrency(smoke: Smoke, loadgen: dict[str, str]) -> None:
    served = smoke.run("ok", "--no-compare", "--concurrency", "1,4", "--isl", "16", "--osl", "8", env=loadgen)
    assert served.code == OK, served.err
    levels = served.report["sweep"]
    assert [(lv["concurrency"], lv["requests"], lv["completed"]) for lv in levels] == [(1, 8, 8), (4, 16, 16)]
    assert levels[0]["ttft_p50_ms"] == 17.71 and levels[1]["errors"] == 0
    sweep = served.check("sweep")
    assert (sweep["verdict"], sweep["found"]) == ("ok", "0 errors in 2 levels")
    line = json.loads((smoke.work / "run" / "sweep-c4.jsonl").read_text())
    assert (line["dataset_name"], line["model"]) == ("random-ids", str(smoke.work / "model"))
    assert [r["a2a"] for r in served.report["runs"]] == ["deepep_v2"]  # --no-compare: one server
    assert served.report["comparison"] is None and served.all_gone()


def test_a_failed_load_generator_is_a_sweep_failure(smoke: Smoke, loadgen: dict[str, str]) -> None:
    served = smoke.run("ok", "--no-compare", "--concurrency", "2", env={**loadgen, "LOADGEN": "fail"})
    assert served.code == CHECK_FAILED
    failure = served.report["failure"]
    assert failure["kind"] == "sweep"
    assert failure["message"] == (
        "sglang.benchmark.serving at concurrency 2 exited 1 with no result: RuntimeError: loadgen broke"
    )
    # the checks before the sweep are kept
    assert served.check("greedy-in-batch-of-32")["verdict"] == "ok" and served.all_gone()


def _wait_for_server(pids: Path, within_s: float = 30) -> list[int]:
    deadline = time.monotonic() + within_s
    while not (started := started_pids(pids)):
        assert time.monotonic() < deadline, "the stand-in never started"
        time.sleep(0.05)
    return started[0]


def _wait_for_line(log: Path, line: str, within_s: float = 30) -> None:
    deadline = time.monotonic() + within_s
    while not (log.is_file() and line in log.read_text(errors="replace")):
        assert time.monotonic() < deadline, f"{log}: no {line!r}"
        time.sleep(0.05)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupt_stops_the_server_and_exits_130(smoke: Smoke, signum: int) -> None:
    with smoke.start("hang", "--no-sweep", "--health-timeout", "300") as proc:
        try:
            pair = _wait_for_server(smoke.pids)
            _wait_for_line(smoke.work / "run" / "server-deepep_v2.log", "standin: /health_generate asked")
            sent = time.monotonic()  # the smoke is waiting for the server's health
            proc.send_signal(signum)
            _, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:  # the test failed: the smoke ignored the signal
                proc.kill()
    assert proc.returncode == INTERRUPTED
    assert time.monotonic() - sent < 5  # SIGTERM, not the 10 s grace, ended the stand-in
    assert "interrupted: stopped" in err
    assert all(gone(pid) for pid in pair), f"left running: {pair}"
    # no half-written report: none, or a whole one
    assert not smoke.report.exists() or json.loads(smoke.report.read_text())


# ---- attached to a running server (--url) ----


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[str, Path, list[int]]]:
    """A stand-in server the test starts itself: its URL, its log and [its pid, its child's]."""
    port = free_port()
    log = tmp_path / "server.log"
    pids = tmp_path / "running.pids"
    env = {**os.environ, "STANDIN": "ok", "STANDIN_PIDS": str(pids)}
    argv = [sys.executable, str(STANDIN), "serve", "--moe-a2a-backend", "deepep_v2"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*argv, "--host", "127.0.0.1", "--port", str(port), "--model-path", "/models/tiny"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield f"http://127.0.0.1:{port}", log, _wait_for_server(pids)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_attached_checks_without_a_comparison(smoke: Smoke, running: tuple[str, Path, list[int]]) -> None:
    url, log, pair = running
    served = smoke.run("ok", "--no-sweep", "--url", url + "/")
    assert served.code == OK, served.err
    report = served.report
    assert len(report["runs"]) == 1 and report["comparison"] is None
    run = report["runs"][0]
    assert (run["argv"], run["launch_to_healthy_s"], run["log"]) == ([], None, None)
    assert run["info"]["model_path"] == "/models/tiny"
    buffer = served.check("deepep-v2-buffer")
    assert buffer["verdict"] == "skipped" and "--server-log" in buffer["detail"]
    assert [c["component"] for c in report["checks"]] == [
        "moe-a2a-backend",
        "deepep-v2-buffer",
        "token-counts",
        "greedy-repeat",
        "greedy-in-batch-of-32",
        "answer-values",
    ]
    assert served.servers == []  # the smoke started no server
    assert not any(gone(pid, within_s=0) for pid in pair)  # and left the one it found running

    with_log = smoke.run("ok", "--no-sweep", "--url", url, "--server-log", str(log))
    assert with_log.code == OK, with_log.err
    buffer = with_log.check("deepep-v2-buffer")
    assert buffer["verdict"] == "ok" and buffer["found"].startswith("world_size=1 hidden_size=2048")
    assert with_log.report["runs"][0]["log"] == str(log)


def test_attached_to_nothing_is_a_health_timeout(smoke: Smoke) -> None:
    served = smoke.run("ok", "--no-sweep", "--url", f"http://127.0.0.1:{smoke.port}", "--health-timeout", "1")
    assert served.code == CHECK_FAILED
    failure = served.report["failure"]
    assert failure["kind"] == "health-timeout"
    assert (
        failure["message"] == f"http://127.0.0.1:{smoke.port}/health_generate did not answer 200 within 1 s"
    )
    assert served.servers == [] and served.elapsed_s < 15


# ---- bad flags: exit 2, one line naming the flag and the fix, nothing started ----

BAD_FLAGS: dict[str, tuple[list[str], str]] = {
    "server-log without url": (["--server-log", "server.log"], "--server-log: only with --url"),
    "sglang-arg without --": (["--sglang-arg=attention-backend=triton"], "argument --sglang-arg"),
    "concurrency 0": (["--concurrency", "0"], "argument --concurrency"),
    "concurrency a,b": (["--concurrency", "a,b"], "argument --concurrency"),
    "url not http": (["--url", "ftp://10.0.0.5:30000"], "argument --url"),
    "url with a path": (["--url", "http://10.0.0.5:30000/v1"], "argument --url"),
    "url with a space": (["--url", "http://127.0.0.1 :1"], "argument --url"),
    "url with a user": (["--url", "http://user:pass@10.0.0.5:30000"], "argument --url"),
    "request timeout 1e300": (["--request-timeout", "1e300"], "argument --request-timeout"),
    "server log a device": (
        ["--url", "http://127.0.0.1:1", "--server-log", "/dev/zero", "--health-timeout", "1"],
        "--server-log /dev/zero: not a regular file",
    ),
    "port not a number": (["--sglang-arg=--port=3x1235"], "--port '3x1235' is not a TCP port"),
    "port out of range": (["--sglang-arg=--port=70000"], "--port '70000' is not a TCP port"),
}


@pytest.mark.parametrize("case", sorted(BAD_FLAGS))
def test_bad_flags_exit_2_with_one_line(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags, named = BAD_FLAGS[case]
    report = tmp_path / "report.json"
    code = epstack_main(["smoke", "serve", "--json", str(report), *flags])
    err = capsys.readouterr().err
    # argparse's usage lines aside, one line: the flag, then the fix
    lines = [line for line in err.splitlines() if line and not line.startswith(("usage:", " "))]
    assert code == BAD_INPUT and len(lines) == 1, err
    assert named in lines[0] and "fix: " in lines[0]
    assert not report.exists()


# `epstack smoke serve` with the tiny profile's config replaced by a reduced one (the real model is 3.48 GiB)
WITH_SMALL_CONFIG = (
    "import sys; from pathlib import Path; from epstack.smoke.serving import tinymodel; "
    "tinymodel.CONFIG = Path(sys.argv[1]); from epstack.commands.main import main; "
    "sys.exit(main(sys.argv[2:]))"
)


def test_the_tiny_profile_serves_its_generated_model_from_the_cache(smoke: Smoke) -> None:
    """No --model-path: the tiny model is written into --model-cache once, the server is pointed at it,
    the report says so; a second run finds it written."""
    from tests.smoke.test_tinymodel import small_config  # noqa: PLC0415 (one reduced config)

    config = smoke.work / "small.json"
    config.write_text(small_config())
    cache = smoke.work / "cache"
    argv = [sys.executable, "-c", WITH_SMALL_CONFIG, str(config), "smoke", "serve", "--no-sweep",
            "--no-compare", "--model-cache", str(cache), "--json", str(smoke.report),
            "--run-dir", str(smoke.work / "run"), f"--sglang-arg=--port={smoke.port}"]  # fmt: skip

    def served() -> tuple[dict[str, Any], str]:
        done = subprocess.run(
            argv,
            cwd=REPO,
            env=smoke.env("ok", None),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == OK, done.stderr
        return json.loads(smoke.report.read_text()), done.stderr

    report, _ = served()
    folder = cache / tinymodel.NAME
    assert report["model_path"] == str(folder) and report["runs"][0]["info"]["model_path"] == str(folder)
    assert report["generated_model"]["reused"] is False
    assert report["generated_model"]["key"] == tinymodel.key(small_config(), tinymodel.SEED)
    assert "--load-format" not in report["runs"][0]["argv"]
    again, err = served()
    assert again["generated_model"]["reused"] is True and "the tiny model: 0.00 GiB, key" in err


def test_a_run_dir_naming_a_file_is_bad_input(smoke: Smoke) -> None:
    (smoke.work / "run").write_text("not a folder")
    served = smoke.run("ok", "--no-sweep")
    assert served.code == BAD_INPUT and served.servers == [] and not smoke.report.exists()
    (line,) = served.err.strip().splitlines()
    assert line.endswith(
        f"{smoke.work / 'run'}: cannot use it (a file, not a folder); fix: choose a writable directory"
    )
    assert line.startswith("error: --run-dir ")


def info(**fields: object) -> bytes:
    return json.dumps({"moe_a2a_backend": "deepep_v2", "model_path": "/m", **fields}).encode()


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        (Reply(body=info(), length=10_000), "ended its body after"),
        (Reply(body=b"[" * 200_000 + b"]" * 200_000), "malformed answer, JSON nested deeper than 64"),
        (Reply(body=info(version=float("inf"))), "malformed answer, JSON with Infinity"),
        (Reply(body=info().replace(b"{", b'{"n": ' + b"1" * 5000 + b", ")), "a number of 5,000 characters"),
        (Reply(body=b"x" * 1000, repeat=100_000), "answered 100,000,000 bytes (Content-Length), over"),
    ],
)
def test_an_attached_server_out_of_bounds_is_a_named_request_failure(
    smoke: Smoke, reply: Reply, problem: str
) -> None:
    with fake_server() as server:
        server.replies["/health_generate"] = Reply(200, b"ok")
        server.replies["/server_info"] = reply
        served = smoke.run("ok", "--no-sweep", "--url", server.url)
    assert served.code == CHECK_FAILED and "Traceback" not in served.err, served.err
    failure = served.report["failure"]
    assert failure["kind"] == "request" and problem in failure["message"] and "\n" not in failure["message"]


def test_server_text_is_printed_and_kept_literally(smoke: Smoke) -> None:
    with fake_server() as server:
        server.replies["/health_generate"] = Reply(200, b"ok")
        server.replies["/server_info"] = Reply(body=info(moe_a2a_backend="\x1b]0;owned\x07deepep_v2"))
        served = smoke.run("ok", "--no-sweep", "--url", server.url)
    assert served.code == CHECK_FAILED and served.report["failure"]["kind"] == "wrong-backend"
    assert "\x1b" not in served.err and "\\x1b]0;owned\\x07deepep_v2" in served.err
    assert served.report["runs"][0]["info"]["moe_a2a_backend"] == "\\x1b]0;owned\\x07deepep_v2"
