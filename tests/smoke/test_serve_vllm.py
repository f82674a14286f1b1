"""`epstack smoke serve --engine vllm` end to end on CPU: the real command in a subprocess, the `vllm` it
starts a stand-in (vllm_standin.py) speaking vLLM 0.33.0's API and log lines; the sweep its `vllm bench
serve`. At data parallel 1 the report says no all-to-all ran and compares nothing; above 1 the plan asks
vLLM for --data-parallel-size N and the buffer row reads DeepEP V2's line. vLLM's answers and log lines
read strictly, each malformed one named."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from epstack.errors import BAD_INPUT, CHECK_FAILED, OK
from epstack.smoke.serving import startup, sweep, vllmapi
from epstack.smoke.serving.client import RequestFailed
from epstack.smoke.serving.profiles import serve_plan
from epstack.smoke.serving.vllmchecks import backend, buffer
from tests.smoke.test_serve import Smoke, _reap, free_port

STANDIN = Path(__file__).with_name("vllm_standin.py")


class VllmSmoke(Smoke):
    """`epstack smoke serve --engine vllm` with `vllm` on PATH being the stand-in."""

    def env(self, mode: str, extra: dict[str, str] | None) -> dict[str, str]:
        bin_dir = self.work / "bin"
        if not bin_dir.exists():
            bin_dir.mkdir()
            script = bin_dir / "vllm"
            script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
            script.chmod(0o755)
        return {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "STANDIN": mode,
            "STANDIN_PIDS": str(self.pids),
            **(extra or {}),
        }

    def argv(self, *extra: str) -> list[str]:
        return [
            sys.executable, "-m", "epstack", "smoke", "serve", "--engine", "vllm",
            "--run-dir", str(self.work / "run"),
            "--json", str(self.report),
            "--model-path", str(self.work / "model"),
            f"--vllm-arg=--port={self.port}",
            *extra,
        ]  # fmt: skip


@pytest.fixture
def vsmoke(tmp_path: Path) -> Iterator[VllmSmoke]:
    (tmp_path / "model").mkdir()
    smoke = VllmSmoke(work=tmp_path, port=free_port())
    yield smoke
    _reap(smoke.pids)


def test_one_gpu_passes_says_no_all_to_all_ran_and_compares_nothing(vsmoke: VllmSmoke) -> None:
    served = vsmoke.run("ok", "--concurrency", "1,2")
    assert served.code == OK, served.err
    report = served.report
    assert report["verdict"] == "pass" and report["engine"] == "vllm"
    (run,) = report["runs"]  # no second server: without expert parallel it would run the same kernels
    assert run["argv"][1:3] == ["serve", str(vsmoke.work / "model")]
    assert "--enable-expert-parallel" in run["argv"] and "--data-parallel-size" in run["argv"]
    assert run["argv"][run["argv"].index("--data-parallel-size") + 1] == "1"
    assert run["info"] == {"version": "0.33.0", "model_path": str(vsmoke.work / "model")}
    assert (served.check("all2all-backend")["verdict"], served.check("all2all-backend")["found"]) == (
        "ok",
        "deepep_v2",
    )
    deepep = served.check("deepep-v2-buffer")
    assert deepep["verdict"] == "skipped" and "DeepEP V2 was not exercised" in deepep["detail"]
    compared = served.check("deepep-v2-vs-none")
    assert compared["verdict"] == "skipped" and "data parallel 1" in compared["detail"]
    for component in ("token-counts", "greedy-repeat", "greedy-in-batch-of-32", "sweep"):
        assert served.check(component)["verdict"] == "ok", component
    assert [level["concurrency"] for level in report["sweep"]] == [1, 2]
    assert report["sweep"][0]["e2e_p50_ms"] == 280.0, "vLLM's e2el read as the end-to-end latency"
    assert {"compiled_or_loaded", "cuda_graphs_captured", "http_listening"} <= set(
        run["startup"]["milestones_s"]
    )
    assert served.all_gone()


def test_two_gpus_ask_vllm_for_data_parallel_2_and_read_deepeps_buffer(vsmoke: VllmSmoke) -> None:
    served = vsmoke.run("ok", "--gpus-per-node", "2", "--no-sweep", "--no-compare")
    assert served.code == OK, served.err
    (run,) = served.report["runs"]
    assert run["argv"][run["argv"].index("--data-parallel-size") + 1] == "2"
    assert run["env"] == {"VLLM_DEEPEP_V2_ALLOW_HYBRID_MODE": "0"}, "one node: direct mode"
    deepep = served.check("deepep-v2-buffer")
    assert deepep["verdict"] == "ok" and "num_max_tokens_per_rank" in deepep["found"]


@pytest.mark.parametrize(
    ("mode", "kind", "says"),
    [
        ("no-ep", "wrong-backend", "--all2all-backend none (no expert parallel), not deepep_v2"),
        ("malformed", "request", "/v1/completions: 1 prompts answered"),
        ("short", "request", "asked for 32 tokens (ignore_eos), got 31 tokens"),
    ],
)
def test_each_failure_is_named(vsmoke: VllmSmoke, mode: str, kind: str, says: str) -> None:
    served = vsmoke.run(mode, "--no-sweep")
    assert served.code == CHECK_FAILED or kind == "request", served.err
    failure = served.report["failure"]
    assert failure["kind"] == kind and says in failure["message"], failure
    assert served.all_gone()


def test_flags_for_the_other_engine_are_bad_input(vsmoke: VllmSmoke) -> None:
    served = vsmoke.run("ok", "--sglang-arg=--attention-backend=triton")
    assert served.code == BAD_INPUT and "--vllm-arg=FLAG" in served.err
    served = vsmoke.run("ok", "--a2a", "deepep")
    assert served.code == BAD_INPUT and "vLLM runs deepep_v2 here" in served.err
    assert served.servers == [], "refused before any server started"


def test_a_failing_vllm_bench_fails_the_sweep(vsmoke: VllmSmoke) -> None:
    served = vsmoke.run("ok", "--concurrency", "1", env={"LOADGEN": "fail"})
    assert served.report["failure"]["kind"] == "sweep"
    assert "vllm bench serve at concurrency 1 exited 1" in served.report["failure"]["message"]


def _answer(tokens: object, logprobs: object = -0.5, index: int = 0) -> dict[str, object]:
    top = [{"token_id:5": -0.5, "token_id:9": -2.0}]
    logged = {"tokens": tokens, "token_logprobs": [logprobs], "top_logprobs": top}
    return {"choices": [{"index": index, "logprobs": logged}]}


def test_a_completion_is_read_strictly() -> None:
    (one,) = vllmapi.parse(_answer(["token_id:5"]), 1, 1)
    assert (one.output_ids, one.logprobs, one.top) == ([5], [-0.5], [{5: -0.5, 9: -2.0}])
    for broken, says in (
        (_answer(["hello"]), "'hello' is not token_id:<id>"),
        (_answer(["token_id:5"], index=1), "choices are not indexed 0..0"),
        ({"choices": [{"index": 0}]}, "a choice without logprobs"),
        (
            _answer(["token_id:5"], logprobs=True),
            "/v1/completions: token_logprobs is true, not a finite logprob",
        ),
        (_answer(["token_id:5", "token_id:6"]), "asked for 1 tokens .* got 2 tokens"),
    ):
        with pytest.raises(RequestFailed, match=says):
            vllmapi.parse(broken, 1, 1)


def test_the_backend_and_buffer_rows_read_vllms_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    parsed = "{'model_tag': 'm', 'enable_expert_parallel': True, 'all2all_backend': 'deepep_v2'}"
    log.write_text(f"(APIServer pid=1) INFO 12-07 16:35:23 [startup.py:96] non-default args: {parsed}\n")
    two = serve_plan("tiny", nodes=1, gpus_per_node=2)
    assert backend(log, two).verdict == "ok"
    assert buffer(log, two).verdict == "fail" and "VLLM_LOGGING_LEVEL=DEBUG" in buffer(log, two).fix
    assert backend(tmp_path / "absent.log", two).verdict == "skipped"
    log.write_text("(APIServer pid=1) INFO 12-07 16:35:23 [startup.py:96] starting\n")
    assert backend(log, two).verdict == "fail", "no parsed-args line: not vLLM as it starts"


def test_vllms_start_up_milestones_and_its_years_clock() -> None:
    engine = "(EngineCore_DP0 pid=2) INFO 12-07"
    text = "\n".join(
        [
            "(APIServer pid=1) INFO 12-07 16:35:20 [startup.py:96] non-default args: {}",
            f"{engine} 16:35:30 [default_loader.py:507] Loading weights took 1.00 seconds",
            f"{engine} 16:36:10 [monitor.py:20] torch.compile took 35.00 s in total",
            f"{engine} 16:36:40 [gpu_model_runner.py:6517] Graph capturing finished in 30 secs",
            "Capturing CUDA graphs: 100%|██████████| 8/8",
            "(APIServer pid=1) INFO 12-07 16:36:45 [entry.py:139] Starting vLLM server on http://0.0.0.0:30000",
        ]
    )
    read = startup.read_vllm(text, datetime(2026, 12, 7, 16, 35, 18))
    assert read.milestones_s == {
        "first_log_line": 2.0, "weights_loaded": 12.0, "compiled_or_loaded": 52.0,
        "cuda_graphs_captured": 82.0, "http_listening": 87.0,
    }  # fmt: skip


def test_the_sweep_asks_vllm_bench_for_exact_lengths_and_every_percentile(tmp_path: Path) -> None:
    argv = sweep.vllm_argv(["vllm"], url="http://h:1", model="m", isl=512, osl=128, concurrency=4,
                           requests=16, seed=0, output=tmp_path / "sweep-c4.json")  # fmt: skip
    assert argv[:3] == ["vllm", "bench", "serve"]
    pairs = dict(itertools.pairwise(argv))
    assert pairs["--random-range-ratio"] == "0" and "--ignore-eos" in argv
    assert pairs["--percentile-metrics"] == "ttft,tpot,itl,e2el" and pairs["--metric-percentiles"] == "50,99"
    assert (pairs["--result-dir"], pairs["--result-filename"]) == (str(tmp_path), "sweep-c4.json")
