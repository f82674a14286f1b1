"""`epstack smoke elastic` (also `python -m epstack.smoke elastic`): wired with `register(subparsers)`.

Exit codes as every epstack command: 0 pass; 1 a check failed (wrong tokens, a hang, DeepEP's own suite
failed, bandwidth under --min-bandwidth-ratio); 2 bad input (flags, launcher variables); 3 the
environment is wrong (no torch, a CPU torch, no GPU, no deep_ep: found before any rank starts; a known
failure of the stack, classified in words); 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import socket
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from epstack.commands.common import (
    SubParsers,
    fraction,
    non_negative_int,
    path_arg,
    port,
    positive_int,
    seconds,
)
from epstack.errors import CHECK_FAILED, ENVIRONMENT, OK, BadInput, EpstackError
from epstack.guard.loaded import libstdcxx_interposition
from epstack.output import check_writable, write_file
from epstack.smoke import launch as launch_mod
from epstack.smoke import preflight
from epstack.smoke import report as report_mod
from epstack.smoke import upstream as upstream_mod
from epstack.smoke.classify import classify
from epstack.smoke.config import DEFAULT_NUM_TOKENS, PRESETS, SmokeConfig, resolve_shape
from epstack.smoke.result import RANK_RESULT, RankResult
from epstack.smoke.supervise import RankCommand, Supervised, supervise

# How a rank is started; the CPU tests put a stub rank here (no torch, no GPU).
WORKER: tuple[str, ...] = (sys.executable, "-m", "epstack.smoke.worker")


def register(subparsers: SubParsers) -> None:
    """Add `smoke elastic` to epstack's top-level subparsers."""
    smoke = subparsers.add_parser("smoke", help="prove an image on GPUs").add_subparsers(
        dest="smoke_command", required=True, metavar="SUBCOMMAND"
    )
    p = smoke.add_parser(
        "elastic",
        help="deep_ep.ElasticBuffer: start, dispatch/combine checked against all_to_all, speed",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    shape = p.add_argument_group("model shape (default: DeepEP test_ep's 4096 x 7168, top-6/256)")
    shape.add_argument("--preset", choices=sorted(PRESETS))
    shape.add_argument("--hidden", type=positive_int)
    shape.add_argument("--num-topk", type=positive_int)
    shape.add_argument("--num-experts", type=positive_int)
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
    run.add_argument("--seed", type=non_negative_int, default=0)
    run.add_argument("--masked-ratio", type=fraction, default=0.1, help="share of -1 top-k slots")
    run.add_argument(
        "--hot-rank-ratio",
        type=fraction,
        default=4.0,
        help="unbalanced case: rank 0's experts are this much likelier",
    )
    run.add_argument("--iters", type=positive_int, default=50, help="timed calls per operation")
    run.add_argument("--skip-bench", action="store_true")
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
        default=Path("epstack-smoke-elastic.json"),
        help="report path, written by the process of global rank 0",
    )
    run.add_argument("--run-dir", type=path_arg, help="stage files and rank logs (default: a temp dir)")
    where = p.add_argument_group("launch (flags win over torchrun/Slurm/Kubernetes variables)")
    where.add_argument("--nproc-per-node", type=positive_int, help="ranks to start here (no launcher)")
    where.add_argument("--nnodes", type=positive_int)
    where.add_argument("--node-rank", type=non_negative_int)
    where.add_argument("--master-addr")
    where.add_argument("--master-port", type=port)
    up = p.add_argument_group("DeepEP's own suite")
    up.add_argument(
        "--upstream-tests",
        type=path_arg,
        metavar="DEEPEP_CHECKOUT",
        help="also run DEEPEP_CHECKOUT/tests/elastic/test_ep.py and compare",
    )
    up.add_argument("--upstream-only", action="store_true", help="run only DeepEP's test_ep")
    up.add_argument("--upstream-timeout", type=seconds, default=600.0)
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        port: int = s.getsockname()[1]
        return port


def _deep_ep_interposition() -> list[str] | None:
    """Symbols deep_ep/_C.so interposes on libstdc++; None when it cannot look."""
    spec = importlib.util.find_spec("deep_ep")
    if spec is None or not spec.submodule_search_locations:
        return None
    sos = sorted(Path(next(iter(spec.submodule_search_locations))).glob("_C*.so"))
    if not sos:
        return None
    try:
        return libstdcxx_interposition(sos[0])
    except EpstackError:
        return None


def _diagnose(sup: Supervised, ranks: list[RankResult]) -> tuple[int, list[dict[str, Any]]]:
    """Exit code and findings from how the ranks ended and what they wrote."""
    findings: list[dict[str, Any]] = []
    for r in ranks:
        if r.finding:
            findings.append(r.finding | {"rank": r.rank, "error": r.error or ""})
    for o in sup.outcomes:
        if o.signal_name == "SIGSEGV":
            symbols = _deep_ep_interposition()
            if symbols:
                f = classify("deep_ep/_C.so exports libstdc++ symbols")
                assert f is not None
                findings.append(
                    asdict(f)
                    | {"rank": o.rank, "symbols": symbols[:10], "error": f"rank {o.rank} died of SIGSEGV"}
                )
        elif o.returncode not in (0, None) and not any(f.get("rank") == o.rank for f in findings):
            f = classify(o.log.read_text(errors="replace")[-20000:])
            if f is not None:
                findings.append(asdict(f) | {"rank": o.rank, "error": "from the rank's log"})
    if findings:
        return ENVIRONMENT, findings
    if sup.timed_out or not sup.ok:
        return CHECK_FAILED, findings
    return (OK if all(r.status == "pass" for r in ranks) else CHECK_FAILED), findings


def _ranks_from(run_dir: Path, sup: Supervised) -> list[RankResult]:
    """Every rank's result: gathered by rank 0, else each rank's own file, with how it ended."""
    gathered = run_dir / "all_ranks.json"
    if gathered.is_file():
        return RANK_RESULT.read_list(gathered)
    out = []
    for o in sup.outcomes:
        path = run_dir / f"rank{o.rank}.json"
        result = RANK_RESULT.read(path) if path.is_file() else RankResult(rank=o.rank)
        if result.status is None:
            result.status = "killed" if o.killed else f"exit {o.returncode}"
        result.stage = o.stage
        out.append(result)
    return out


# What a run writes into its run directory (rank logs, stage files, results, the config): a reused
# --run-dir loses these before any rank starts, so a report never shows a previous run's results.
_RUN_FILES = re.compile(r"^(?:all_ranks\.json|config\.json|rank\d+\.(?:json|log|stage|tmp\d+))$")


def fresh_run_dir(run_dir: Path | None) -> Path:
    """The run directory, made if new, without the files of an earlier run (and nothing else removed)."""
    if run_dir is None:
        return Path(tempfile.mkdtemp(prefix="epstack-smoke-"))
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        for directory in (run_dir, run_dir / "upstream"):
            stale = [e for e in directory.iterdir() if _RUN_FILES.match(e.name)] if directory.is_dir() else []
            for entry in stale:
                entry.unlink()
    except OSError as exc:
        raise BadInput(
            f"--run-dir {run_dir}: cannot use it ({exc.strerror}); fix: choose a writable directory"
        ) from None
    return run_dir


def _config(args: argparse.Namespace, world_size: int) -> SmokeConfig:
    shape = resolve_shape(args.preset, args.hidden, args.num_topk, args.num_experts)
    cfg = SmokeConfig(
        hidden=shape.hidden,
        num_topk=shape.num_topk,
        num_experts=shape.num_experts,
        num_tokens=args.num_tokens,
        num_max_tokens_per_rank=args.num_max_tokens_per_rank or args.num_tokens,
        seed=args.seed,
        masked_ratio=args.masked_ratio,
        hot_rank_ratio=args.hot_rank_ratio,
        iters=args.iters,
        mode=args.mode,
        prefer_overlap_with_compute=args.prefer_overlap_with_compute,
        init_timeout=args.init_timeout,
        skip_bench=args.skip_bench,
        report_path=str(args.json),
        buffer_num_topk=args.buffer_num_topk,
    )
    cfg.validate(world_size)
    return cfg


def _run_ranks(
    cfg: SmokeConfig, launch: launch_mod.Launch, run_dir: Path, timeout_s: float, console: Console
) -> tuple[int, list[RankResult], dict[str, Any]]:
    """Start this node's ranks under the supervisor; the exit code, the ranks' results and the
    report's rank sections."""
    cfg_path = run_dir / "config.json"
    cfg.dump(cfg_path)
    base_env = dict(os.environ) | {"PYTHONUNBUFFERED": "1"}
    commands = [
        RankCommand(
            rank=spec.rank,
            argv=[*WORKER, "--config", str(cfg_path), "--run-dir", str(run_dir)],
            env=base_env | launch.rank_env(spec),
        )
        for spec in launch.ranks()
    ]
    sup = supervise(commands, run_dir=run_dir, timeout_s=timeout_s)
    ranks = _ranks_from(run_dir, sup)
    code, findings = _diagnose(sup, ranks)
    for f in findings:
        console.print(
            f"[red]{escape(f['key'])}[/] (rank {f.get('rank')}): {escape(f['summary'])}. "
            f"Fix: {escape(f['fix'])}"
        )
    if not sup.ok:
        console.print(f"[red]{escape(sup.reason)}[/]")
    return code, ranks, {
        "supervisor": {
            "reason": sup.reason,
            "timed_out": sup.timed_out,
            "elapsed_s": sup.elapsed_s,
            "ranks": [
                {
                    "rank": o.rank,
                    "returncode": o.returncode,
                    "stage": o.stage,
                    "killed": o.killed,
                    "signal": o.signal_name,
                }
                for o in sup.outcomes
            ],
        },
        "ranks": [rank.to_json() for rank in ranks],
        "summary": report_mod.aggregate(ranks),
        "findings": findings,
    }


def _run_upstream(
    args: argparse.Namespace,
    launch: launch_mod.Launch,
    run_dir: Path,
    summary: dict[str, Any],
    console: Console,
) -> tuple[int, dict[str, Any]]:
    """DeepEP's own test_ep.py: its verdict, and the bandwidth ratio against the smoke's."""
    console.print(f"running DeepEP's test_ep.py from {escape(str(args.upstream_tests))}")
    up = upstream_mod.run(
        args.upstream_tests,
        nproc=launch.nproc,
        timeout_s=args.upstream_timeout,
        run_dir=run_dir / "upstream",
        extra=tuple(args.upstream_args.split()),
    )
    ratio = report_mod.ratios(summary, up)
    console.print(
        f"test_ep: {up.modes}/{up.expected_modes} modes, exit {up.returncode}, {up.elapsed_s:.0f} s"
        + (f"; {escape(up.error)}" if up.error else "")
    )
    code = OK if up.passed else CHECK_FAILED
    for op, r in ratio.items():
        console.print(
            f"{op}: smoke {r['smoke_gbps']:.0f} GB/s vs test_ep {r['test_ep_gbps']:.0f} GB/s "
            f"= {r['ratio']:.3f}x"
        )
        if r["ratio"] < args.min_bandwidth_ratio:
            code = CHECK_FAILED
    return code, {"upstream": up.to_json(), "ratios": ratio}


VERDICTS = {OK: "pass", CHECK_FAILED: "fail", ENVIRONMENT: "environment"}


def cmd_elastic(args: argparse.Namespace, console: Console) -> int:
    launch = launch_mod.detect(
        os.environ,
        nproc_per_node=args.nproc_per_node,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        master_addr=args.master_addr,
        master_port=args.master_port,
        free_port=_free_port,
    )
    cfg = _config(args, launch.world_size)
    if args.upstream_tests and launch.launcher != "none":
        raise BadInput("--upstream-tests starts its own ranks: run it without a launcher")
    if launch.rank == 0:
        check_writable(args.json, what="the smoke's --json report")
    preflight.require(
        preflight.probe(), local_ranks=launch.nproc, first_local_rank=launch.local_rank, need_deep_ep=True
    )
    run_dir = fresh_run_dir(args.run_dir)
    console.print(
        f"smoke elastic: {launch.launcher} launch, ranks {launch.rank}.."
        f"{launch.rank + launch.nproc - 1} of {launch.world_size} (node {launch.node_rank}/"
        f"{launch.nnodes}, master {escape(launch.master_addr)}:{launch.master_port}); "
        f"hidden {cfg.hidden}, top-{cfg.num_topk} of {cfg.num_experts}, {cfg.num_tokens} tokens; "
        f"logs in {escape(str(run_dir))}"
    )
    report: dict[str, Any] = {
        "command": sys.argv,
        "launch": asdict(launch),
        "config": asdict(cfg),
        "run_dir": str(run_dir),
    }
    code = OK
    ranks: list[RankResult] = []
    if not args.upstream_only:
        code, ranks, sections = _run_ranks(cfg, launch, run_dir, args.timeout, console)
        report |= sections
    if args.upstream_tests:
        upstream_code, sections = _run_upstream(args, launch, run_dir, report.get("summary", {}), console)
        code, report = max(code, upstream_code), report | sections
    report["verdict"], report["exit_code"] = VERDICTS.get(code, "fail"), code
    if launch.rank == 0:
        write_file(args.json, json.dumps(report, indent=2, sort_keys=True, default=str) + "\n", what="--json")
        if ranks:
            console.print(report_mod.table(report["verdict"], ranks))
        console.print(f"report: {escape(str(args.json))}")
    return code
