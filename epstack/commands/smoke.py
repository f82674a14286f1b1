"""`epstack smoke elastic` and `epstack smoke serve` (also `python -m epstack.smoke ...`): wired with
`register(subparsers)`.

Exit codes as every epstack command: 0 pass; 1 a check failed (wrong tokens, a hang, DeepEP's own suite
failed, bandwidth under --min-bandwidth-ratio); 2 bad input (flags, launcher variables); 3 the
environment is wrong (no torch, a CPU torch, no GPU, no deep_ep: found before any rank starts; a known
failure of the stack, classified in words); 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from epstack import httpclient
from epstack.commands.common import (
    SubParsers,
    fraction,
    from_args,
    non_negative_int,
    path_arg,
    port,
    positive_int,
    rename,
    results_console,
    seconds,
)
from epstack.errors import OK, BadInput, shown
from epstack.output import STDOUT, check_writable
from epstack.smoke import elastic
from epstack.smoke.config import DEFAULT_NUM_TOKENS, PRESETS, SmokeConfig, resolve_shape
from epstack.smoke.elastic import Settings, Upstream
from epstack.smoke.launch import Launch
from epstack.smoke.report import OPS
from epstack.smoke.result import RankResult
from epstack.smoke.serving import plot as serving_plot
from epstack.smoke.serving import run as serving_run
from epstack.smoke.serving import tinymodel
from epstack.smoke.serving.checks import Asked
from epstack.smoke.serving.engines import DEFAULT as DEFAULT_ENGINE
from epstack.smoke.serving.engines import ENGINES, check_backend, engine_named
from epstack.smoke.serving.profiles import A2A_BACKENDS, PROFILES, serve_plan
from epstack.smoke.serving.sweep import CONCURRENCIES
from epstack.smoke.supervise import Supervised
from epstack.smoke.upstream import UpstreamResult

ELASTIC = """\
Start one rank per GPU here (--gpus-per-node) or under torchrun, Slurm or Kubernetes; each builds
DeepEP V2's ElasticBuffer, checks dispatch and combine against torch's all_to_all at the model's shape,
then times them. One JSON report (--json) from rank 0.

Exit 0 pass; 1 a check failed (wrong tokens, a hang, DeepEP's own suite failed, bandwidth under
--min-bandwidth-ratio); 2 bad input; 3 the environment (no torch, no GPU, no deep_ep); 130 interrupted.
"""


def register(subparsers: SubParsers) -> None:
    """Add `smoke elastic` to epstack's top-level subparsers."""
    smoke = subparsers.add_parser("smoke", help="prove an image on GPUs").add_subparsers(
        dest="smoke_command", required=True, metavar="SUBCOMMAND"
    )
    p = smoke.add_parser(
        "elastic",
        help="deep_ep.ElasticBuffer: start, dispatch/combine checked against all_to_all, speed",
        description=ELASTIC,
    )
    shape = p.add_argument_group("model shape (default: DeepEP test_ep's 4096 x 7168, top-6/256)")
    shape.add_argument(
        "--profile", dest="preset", choices=sorted(PRESETS), help="a model's MoE shape (default: test_ep's)"
    )
    rename(shape, "--profile", "--preset")
    shape.add_argument("--hidden", type=positive_int, help="hidden size (default: the profile's)")
    shape.add_argument("--num-topk", type=positive_int, help="experts per token (default: the profile's)")
    shape.add_argument("--num-experts", type=positive_int, help="routed experts (default: the profile's)")
    shape.add_argument(
        "--num-tokens",
        type=positive_int,
        default=DEFAULT_NUM_TOKENS,
        help="tokens per rank (rank r sends num_tokens - r, as test_ep does)",
    )
    shape.add_argument(
        "--num-max-tokens-per-rank",
        type=positive_int,
        help="ElasticBuffer's num_max_tokens_per_rank (default --num-tokens)",
    )
    shape.add_argument(
        "--buffer-num-topk",
        type=non_negative_int,
        help="num_topk given to ElasticBuffer (default --num-topk; 0 as test_ep)",
    )
    run = p.add_argument_group("run")
    run.add_argument(
        "--mode",
        choices=("auto", "direct", "hybrid"),
        default="auto",
        help="auto: hybrid when an RDMA NIC (GIN) is present, else direct",
    )
    run.add_argument("--seed", type=non_negative_int, default=0, help="the random seed of the top-k choices")
    run.add_argument("--masked-ratio", type=fraction, default=0.1, help="share of -1 top-k slots")
    run.add_argument(
        "--hot-rank-ratio",
        type=fraction,
        default=4.0,
        help="unbalanced case: rank 0's experts are this much likelier",
    )
    run.add_argument("--iters", type=positive_int, default=50, help="timed calls per operation")
    run.add_argument("--skip-bench", action="store_true", help="check only; no timed calls")
    run.add_argument(
        "--prefer-overlap-with-compute",
        action="store_true",
        help="ElasticBuffer's prefer_overlap_with_compute (test_ep uses off)",
    )
    run.add_argument(
        "--timeout",
        type=seconds,
        default=600.0,
        help="seconds before every rank is killed, the stage named (default 600)",
    )
    run.add_argument(
        "--init-timeout", type=seconds, default=120.0, help="rendezvous/NCCL init timeout in seconds"
    )
    run.add_argument(
        "--json",
        type=path_arg,
        metavar="FILE",
        default=Path("epstack-smoke-elastic.json"),
        help="report path, written by the process of global rank 0",
    )
    run.add_argument("--run-dir", type=path_arg, help="stage files and rank logs (default: a temp dir)")
    run.add_argument(
        "--export-jit-cache",
        type=path_arg,
        metavar="FILE",
        help="after a pass, pack the DeepEP kernels compiled into $EP_JIT_CACHE_DIR (tar.gz, and "
        "FILE.sha256) for `epstack jit layer`",
    )
    where = p.add_argument_group("launch (flags win over torchrun/Slurm/Kubernetes variables)")
    where.add_argument(
        "--gpus-per-node",
        dest="nproc_per_node",
        type=positive_int,
        help="ranks (one per GPU) to start here (no launcher)",
    )
    rename(where, "--gpus-per-node", "--nproc-per-node")
    where.add_argument(
        "--nodes", dest="nnodes", type=positive_int, help="nodes of the run (default: the launcher's, else 1)"
    )
    rename(where, "--nodes", "--nnodes")
    where.add_argument(
        "--node-rank", type=non_negative_int, help="this node's rank (default: the launcher's, else 0)"
    )
    where.add_argument("--master-addr", help="rank 0's host (default: $MASTER_ADDR or the launcher's)")
    where.add_argument(
        "--master-port", type=port, help="rank 0's rendezvous port (default: $MASTER_PORT, else 29500)"
    )
    up = p.add_argument_group("DeepEP's own suite")
    up.add_argument(
        "--upstream-tests",
        type=path_arg,
        metavar="DEEPEP_CHECKOUT",
        help="also run DEEPEP_CHECKOUT/tests/elastic/test_ep.py and compare",
    )
    up.add_argument("--upstream-only", action="store_true", help="run only DeepEP's test_ep")
    up.add_argument(
        "--upstream-timeout", type=seconds, default=600.0, help="seconds before test_ep is stopped"
    )
    up.add_argument(
        "--upstream-args", default="", help="extra test_ep.py arguments, e.g. '--test-first-only'"
    )
    up.add_argument(
        "--min-bandwidth-ratio",
        type=fraction,
        default=0.0,
        help="fail when smoke GB/s / test_ep GB/s is below this (e.g. 0.97)",
    )
    p.set_defaults(func=cmd_elastic)
    _register_serve(smoke)
    _register_tiny_model(smoke)
    _register_plot(smoke)


def concurrency_list(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.split(","))
    except ValueError:
        levels = ()
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: fix: positive integers separated by commas, e.g. 1,8,64")
    return levels


def sglang_flag(text: str) -> str:
    if not text.startswith("--"):
        raise argparse.ArgumentTypeError(
            f"{text!r}: fix: an SGLang flag, e.g. --sglang-arg=--attention-backend=triton"
        )
    return text


def vllm_flag(text: str) -> str:
    if not text.startswith("--"):
        raise argparse.ArgumentTypeError(f"{text!r}: fix: a vLLM flag, e.g. --vllm-arg=--enforce-eager")
    return text


def http_url(text: str) -> str:
    """--url: a server's base URL, no user, password, path or query (the report keeps it)."""
    fix = "fix: the server's base URL, e.g. http://10.0.0.5:30000"
    try:
        url = httpclient.check_url(text, what="", fix=fix, plain_http=True)
    except BadInput as exc:
        raise argparse.ArgumentTypeError(str(exc).strip()) from None
    if url.userinfo or url.rest not in ("", "/") or "?" in text or "#" in text:
        raise argparse.ArgumentTypeError(f"{shown(url.shown)}: no user, password, path or query; {fix}")
    return f"{url.scheme}://{url.netloc}"


def _register_serve(smoke: Any) -> None:
    p = smoke.add_parser(
        "serve",
        help="SGLang through DeepEP V2: health, backend, greedy checks, against no DeepEP, a load sweep",
        description=serving_run.__doc__,
    )
    what = p.add_argument_group("what to serve (the flags and environment `epstack cluster` emits)")
    what.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="tiny",
        help="tiny: 2 layers of Qwen3-30B-A3B, weights epstack draws from a seed, nothing downloaded "
        "(default)",
    )
    what.add_argument("--model-path", help="weights for the profile (default: the profile's)")
    what.add_argument(
        "--engine",
        choices=tuple(ENGINES),
        default=DEFAULT_ENGINE,
        help=f"SGLang, or vLLM (--gpus-per-node N is --data-parallel-size N) (default {DEFAULT_ENGINE})",
    )
    what.add_argument(
        "--gpus-per-node", dest="gpus", type=positive_int, default=1, help="GPUs of this node: TP = EP = GPUs"
    )
    rename(what, "--gpus-per-node", "--gpus")
    what.add_argument("--a2a", choices=A2A_BACKENDS, default="deepep_v2", help="MoE all-to-all backend")
    what.add_argument(
        "--sglang-arg",
        dest="sglang_args",
        action="append",
        type=sglang_flag,
        default=[],
        metavar="FLAG",
        help="an SGLang flag added after the plan's, e.g. --sglang-arg=--attention-backend=triton (repeat)",
    )
    what.add_argument(
        "--vllm-arg",
        dest="vllm_args",
        action="append",
        type=vllm_flag,
        default=[],
        metavar="FLAG",
        help="with --engine vllm: a vLLM flag after the plan's, e.g. --vllm-arg=--enforce-eager (repeat)",
    )
    what.add_argument(
        "--url",
        type=http_url,
        help="attach to this running server instead of starting one "
        "(a cluster's endpoint); no comparison without DeepEP",
    )
    what.add_argument(
        "--server-log", type=path_arg, help="with --url: the server's log, to find DeepEP V2's buffer"
    )
    what.add_argument(
        "--no-compare",
        dest="compare",
        action="store_false",
        help="skip the second server with --moe-a2a-backend none",
    )
    what.add_argument(
        "--reference",
        type=path_arg,
        metavar="REPORT",
        help="compare with the answers without DeepEP a passing report of this smoke holds (same engine, "
        "profile, model, --seed, --tokens) instead of starting that second server",
    )
    checks = p.add_argument_group("checks and sweep")
    checks.add_argument("--tokens", type=positive_int, default=32, help="new tokens per check request")
    checks.add_argument("--seed", type=non_negative_int, default=0, help="prompts' and the sweep's seed")
    checks.add_argument("--isl", type=positive_int, default=512, help="sweep input tokens per request")
    checks.add_argument("--osl", type=positive_int, default=128, help="sweep output tokens per request")
    checks.add_argument(
        "--concurrency",
        type=concurrency_list,
        default=CONCURRENCIES,
        help="sweep levels (default 1,2,4,8,16,32,64)",
    )
    checks.add_argument(
        "--no-sweep",
        dest="sweep",
        action="store_false",
        help="the checks only (a quick proof of a cluster's endpoint)",
    )
    checks.add_argument(
        "--requests-per-level",
        type=positive_int,
        default=4,
        help="requests per level = this x concurrency (at least 8)",
    )
    limits = p.add_argument_group("limits and output")
    limits.add_argument(
        "--health-timeout",
        type=seconds,
        default=900.0,
        help="seconds from launch to /health_generate answering (default 900)",
    )
    limits.add_argument("--request-timeout", type=seconds, default=300.0, help="seconds per check request")
    limits.add_argument("--level-timeout", type=seconds, default=600.0, help="seconds per sweep level")
    limits.add_argument("--run-dir", type=path_arg, help="server logs and sweep files (default: temp)")
    limits.add_argument(
        "--model-cache",
        type=path_arg,
        help="where the tiny profile's model (3.5 GiB) is written once and reused "
        "(default $XDG_CACHE_HOME/epstack, else ~/.cache/epstack)",
    )
    limits.add_argument(
        "--json", type=path_arg, metavar="FILE", default=Path("epstack-smoke-serve.json"), help="report path"
    )
    p.set_defaults(func=cmd_serve)


def default_model_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "epstack"


def _register_tiny_model(smoke: Any) -> None:
    p = smoke.add_parser(
        "tiny-model",
        help="write the tiny profile's model folder (config, tokenizer, seeded weights), or find it written",
        description=tinymodel.__doc__,
    )
    p.add_argument(
        "--out-dir",
        dest="out",
        metavar="DIR",
        type=path_arg,
        required=True,
        help="the model folder, e.g. /models/tiny-qwen3-moe",
    )
    rename(p, "--out-dir", "--out")
    p.add_argument(
        "--seed", type=non_negative_int, default=tinymodel.SEED, help="the weights' seed (default 0)"
    )
    p.set_defaults(func=cmd_tiny_model)


def cmd_tiny_model(args: argparse.Namespace, console: Console) -> int:
    prepared = tinymodel.ensure(args.out, seed=args.seed)
    how = "found written" if prepared.reused else f"written in {prepared.seconds:.1f} s"
    console.print(
        f"tiny model {escape(str(prepared.path))}: {prepared.bytes:,} bytes in {len(prepared.files)} files, "
        f"key {prepared.key}, {how}",
        highlight=False,
    )
    return OK


class _Printer:
    """A run's progress on the console."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def started(self, launch: Launch, config: SmokeConfig, run_dir: Path) -> None:
        self.console.print(
            f"smoke elastic: {launch.launcher} launch, ranks {launch.rank}.."
            f"{launch.rank + launch.nproc - 1} of {launch.world_size} (node {launch.node_rank}/"
            f"{launch.nnodes}, master {escape(launch.master_addr)}:{launch.master_port}); "
            f"hidden {config.hidden}, top-{config.num_topk} of {config.num_experts}, "
            f"{config.num_tokens} tokens; logs in {escape(str(run_dir))}"
        )

    def ranks_ended(self, supervised: Supervised, findings: list[dict[str, Any]]) -> None:
        for f in findings:
            self.console.print(
                f"[red]{escape(f['key'])}[/] (rank {f.get('rank')}): {escape(f['summary'])}. "
                f"Fix: {escape(f['fix'])}"
            )
        if not supervised.ok:
            self.console.print(f"[red]{escape(supervised.reason)}[/]")

    def exported(self, export: dict[str, Any]) -> None:
        self.console.print(
            f"exported {export['kernels']} DeepEP kernels ({export['bytes']:,} bytes) to "
            f"{escape(export['path'])}, sha256 {export['sha256']}"
        )

    def upstream_started(self, checkout: Path) -> None:
        self.console.print(f"running DeepEP's test_ep.py from {escape(str(checkout))}")

    def upstream_ended(self, result: UpstreamResult, ratios: dict[str, Any]) -> None:
        self.console.print(
            f"test_ep: {result.modes}/{result.expected_modes} modes, exit {result.returncode}, "
            f"{result.elapsed_s:.0f} s" + (f"; {escape(result.error)}" if result.error else "")
        )
        for op, r in ratios.items():
            self.console.print(
                f"{op}: smoke {r['smoke_gbps']:.0f} GB/s vs test_ep {r['test_ep_gbps']:.0f} GB/s "
                f"= {r['ratio']:.3f}x"
            )


def _table(verdict: str, ranks: list[RankResult]) -> Table:
    t = Table(
        "rank",
        "status",
        "checks",
        "dispatch fp8",
        "dispatch bf16",
        "combine",
        title=f"epstack smoke elastic: {verdict}",
    )
    for r in ranks:
        checks = r.checks or []
        figures = r.bench.ops if r.bench is not None else {}
        cells = [
            f"{f.kernel_gbps:.0f} GB/s {f.kernel_us.median:.1f} µs" if (f := figures.get(op)) else "-"
            for op in OPS
        ]
        t.add_row(
            str(r.rank),
            r.status or r.stage or "?",
            f"{sum(c.ok for c in checks)}/{len(checks)}",
            *cells,
        )
    return t


def _settings(args: argparse.Namespace) -> Settings:
    shape = resolve_shape(args.preset, args.hidden, args.num_topk, args.num_experts)
    config = from_args(
        SmokeConfig,
        args,
        hidden=shape.hidden,
        num_topk=shape.num_topk,
        num_experts=shape.num_experts,
        num_max_tokens_per_rank=args.num_max_tokens_per_rank or args.num_tokens,
        report_path=str(args.json),
    )
    upstream = (
        Upstream(
            checkout=args.upstream_tests,
            timeout_s=args.upstream_timeout,
            extra=tuple(args.upstream_args.split()),
            min_bandwidth_ratio=args.min_bandwidth_ratio,
        )
        if args.upstream_tests
        else None
    )
    return from_args(
        Settings, args, config=config, timeout_s=args.timeout, upstream=upstream, argv=tuple(sys.argv)
    )


class _ServePrinter(serving_run.Printer):
    def __init__(self, console: Console) -> None:
        self.console = console

    def say(self, text: str) -> None:
        self.console.print(escape(text), highlight=False)


def _register_plot(smoke: Any) -> None:
    p = smoke.add_parser(
        "plot",
        help="a serve report's sweep, or reports' start-ups, as a PNG (needs the plot extra: matplotlib)",
        description=serving_plot.__doc__,
    )
    p.add_argument(
        "report",
        type=path_arg,
        nargs="+",
        help="the report `epstack smoke serve --json` wrote (--startup: several)",
    )
    p.add_argument("--startup", action="store_true", help="each report's server start-up, one timeline each")
    p.add_argument("--out", type=path_arg, metavar="FILE", required=True, help="the PNG to write")
    p.set_defaults(func=cmd_plot)


def cmd_plot(args: argparse.Namespace, console: Console) -> int:
    what = "the start-up plot" if args.startup else "the sweep's plot"
    check_writable(args.out, what=what, inputs=args.report)
    reports = [(serving_run.SERVE_REPORT.read(path), path) for path in args.report]
    if args.startup:
        serving_plot.plot_startup(reports, args.out)
    elif len(reports) > 1:
        raise BadInput(f"{len(reports)} reports for one sweep's plot; fix: name one, or plot --startup")
    else:
        serving_plot.plot(*reports[0], args.out)
    console.print(f"plot: {escape(str(args.out))}", highlight=False)
    return OK


def cmd_serve(args: argparse.Namespace, console: Console) -> int:
    if args.reference and (args.url or not args.compare):
        other = "--url" if args.url else "--no-compare"
        raise BadInput(f"--reference: only where this command compares, not with {other}; fix: drop one")
    if args.server_log and not args.url:
        raise BadInput(
            "--server-log: only with --url (a server this command starts logs into --run-dir); "
            "fix: drop it or add --url"
        )
    if args.server_log and args.server_log.exists() and not args.server_log.is_file():
        raise BadInput(
            f"--server-log {args.server_log}: not a regular file (a device, FIFO or folder); fix: pass the "
            "file the server logs to (it may not exist yet)"
        )
    other = args.sglang_args if args.engine == "vllm" else args.vllm_args
    if other:
        raise BadInput(
            f"{other[0]}: a flag for the other engine than --engine {args.engine}; "
            f"fix: --{args.engine}-arg=FLAG, or drop it"
        )
    check_backend(engine_named(args.engine), args.a2a)
    plan = serve_plan(
        args.profile, nodes=1, gpus_per_node=args.gpus, a2a=args.a2a, model_path=args.model_path
    )
    settings = from_args(
        serving_run.Settings,
        args,
        plan=plan,
        extra_args=args.vllm_args if args.engine == "vllm" else args.sglang_args,
        compare=args.compare and not args.url,
        asked=from_args(Asked, args, timeout_s=args.request_timeout),
        concurrencies=args.concurrency if args.sweep else (),
        health_timeout_s=args.health_timeout,
        level_timeout_s=args.level_timeout,
        model_cache=args.model_cache or default_model_cache(),
        report=args.json,
    )
    code = serving_run.run(settings, _ServePrinter(console))
    if args.json != STDOUT:
        console.print(f"report: {escape(str(args.json))}")
    return code


def cmd_elastic(args: argparse.Namespace, console: Console) -> int:
    outcome = elastic.run(_settings(args), _Printer(console))
    if outcome.reported:
        if outcome.ranks:
            results_console(console, document=args.json).print(_table(outcome.verdict, outcome.ranks))
        if args.json != STDOUT:
            console.print(f"report: {escape(str(args.json))}")
    return outcome.code
