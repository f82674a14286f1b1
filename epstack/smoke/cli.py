"""`epstack smoke elastic`: wire with `register(subparsers)`; the handler returns the exit code.

Exit 0 pass, 1 a check failed (wrong tokens, a hang, DeepEP's own suite failed, bandwidth under
--min-bandwidth-ratio), 2 bad input or a wrong environment (classified in words).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console

from epstack.errors import BadInput, EpstackError
from epstack.loaded import libstdcxx_interposition
from epstack.smoke import launch as launch_mod
from epstack.smoke import report as report_mod
from epstack.smoke import upstream as upstream_mod
from epstack.smoke.classify import classify
from epstack.smoke.config import DEFAULT_NUM_TOKENS, PRESETS, SmokeConfig, resolve_shape
from epstack.smoke.supervise import RankCommand, Supervised, supervise

# How a rank is started; the CPU tests put a stub rank here (no torch, no GPU).
WORKER: tuple[str, ...] = (sys.executable, "-m", "epstack.smoke.worker")


def register(subparsers: Any) -> None:
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
    shape.add_argument("--hidden", type=int)
    shape.add_argument("--num-topk", type=int)
    shape.add_argument("--num-experts", type=int)
    shape.add_argument(
        "--num-tokens",
        type=int,
        default=DEFAULT_NUM_TOKENS,
        help="tokens per rank (rank r sends num_tokens - r, as test_ep does)",
    )
    shape.add_argument(
        "--num-max-tokens-per-rank",
        type=int,
        help="ElasticBuffer's num_max_tokens_per_rank (default --num-tokens)",
    )
    shape.add_argument(
        "--buffer-num-topk",
        type=int,
        help="num_topk given to ElasticBuffer (default --num-topk; 0 as test_ep)",
    )
    run = p.add_argument_group("run")
    run.add_argument(
        "--mode",
        choices=("auto", "direct", "hybrid"),
        default="auto",
        help="auto: hybrid when an RDMA NIC (GIN) is present, else direct",
    )
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--masked-ratio", type=float, default=0.1, help="share of -1 top-k slots")
    run.add_argument(
        "--hot-rank-ratio",
        type=float,
        default=4.0,
        help="unbalanced case: rank 0's experts are this much likelier",
    )
    run.add_argument("--iters", type=int, default=50, help="timed calls per operation")
    run.add_argument("--skip-bench", action="store_true")
    run.add_argument(
        "--prefer-overlap-with-compute",
        action="store_true",
        help="ElasticBuffer's prefer_overlap_with_compute (test_ep uses off)",
    )
    run.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds before every rank is killed, the stage named (default 600)",
    )
    run.add_argument(
        "--init-timeout", type=float, default=120.0, help="rendezvous/NCCL init timeout in seconds"
    )
    run.add_argument(
        "--json",
        type=Path,
        default=Path("epstack-smoke-elastic.json"),
        help="report path, written by the process of global rank 0",
    )
    run.add_argument("--run-dir", type=Path, help="stage files and rank logs (default: a temp dir)")
    where = p.add_argument_group("launch (flags win over torchrun/Slurm/Kubernetes variables)")
    where.add_argument("--nproc-per-node", type=int, help="ranks to start here (no launcher)")
    where.add_argument("--nnodes", type=int)
    where.add_argument("--node-rank", type=int)
    where.add_argument("--master-addr")
    where.add_argument("--master-port", type=int)
    up = p.add_argument_group("DeepEP's own suite")
    up.add_argument(
        "--upstream-tests",
        type=Path,
        metavar="DEEPEP_CHECKOUT",
        help="also run DEEPEP_CHECKOUT/tests/elastic/test_ep.py and compare",
    )
    up.add_argument("--upstream-only", action="store_true", help="run only DeepEP's test_ep")
    up.add_argument("--upstream-timeout", type=float, default=600.0)
    up.add_argument(
        "--upstream-args", default="", help="extra test_ep.py arguments, e.g. '--test-first-only'"
    )
    up.add_argument(
        "--min-bandwidth-ratio",
        type=float,
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


def _diagnose(sup: Supervised, ranks: list[dict[str, Any]]) -> tuple[int, list[dict[str, Any]]]:
    """Exit code and findings from how the ranks ended and what they wrote."""
    findings: list[dict[str, Any]] = []
    for r in ranks:
        if r.get("finding"):
            findings.append(r["finding"] | {"rank": r.get("rank"), "error": r.get("error", "")})
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
        return 2, findings
    if sup.timed_out or not sup.ok:
        return 1, findings
    return (0 if all(r.get("status") == "pass" for r in ranks) else 1), findings


def _ranks_from(run_dir: Path, sup: Supervised) -> list[dict[str, Any]]:
    gathered = run_dir / "all_ranks.json"
    if gathered.is_file():
        ranks: list[dict[str, Any]] = json.loads(gathered.read_text())
        return ranks
    out = []
    for o in sup.outcomes:
        path = run_dir / f"rank{o.rank}.json"
        data = json.loads(path.read_text()) if path.is_file() else {"rank": o.rank}
        data.setdefault("status", "killed" if o.killed else f"exit {o.returncode}")
        data["stage"] = o.stage
        out.append(data)
    return out


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
    cfg.validate(launch.world_size)
    if args.upstream_tests and launch.launcher != "none":
        raise BadInput("--upstream-tests starts its own ranks: run it without a launcher")
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="epstack-smoke-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    console.print(
        f"smoke elastic: {launch.launcher} launch, ranks {launch.rank}.."
        f"{launch.rank + launch.nproc - 1} of {launch.world_size} (node {launch.node_rank}/"
        f"{launch.nnodes}, master {launch.master_addr}:{launch.master_port}); "
        f"hidden {cfg.hidden}, top-{cfg.num_topk} of {cfg.num_experts}, {cfg.num_tokens} tokens; "
        f"logs in {run_dir}"
    )
    report: dict[str, Any] = {
        "command": sys.argv,
        "launch": asdict(launch),
        "config": asdict(cfg),
        "run_dir": str(run_dir),
    }
    code = 0
    if not args.upstream_only:
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
        sup = supervise(commands, run_dir=run_dir, timeout_s=args.timeout)
        ranks = _ranks_from(run_dir, sup)
        code, findings = _diagnose(sup, ranks)
        summary = report_mod.aggregate(ranks)
        report |= {
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
            "ranks": ranks,
            "summary": summary,
            "findings": findings,
        }
        for f in findings:
            console.print(
                f"[red]{f['key']}[/] (rank {f.get('rank')}): {f['summary']}. Fix: {f['fix']}", soft_wrap=True
            )
        if not sup.ok:
            console.print(f"[red]{sup.reason}[/]", soft_wrap=True)
    if args.upstream_tests:
        console.print(f"running DeepEP's test_ep.py from {args.upstream_tests}")
        up = upstream_mod.run(
            args.upstream_tests,
            nproc=launch.nproc,
            timeout_s=args.upstream_timeout,
            run_dir=run_dir / "upstream",
            extra=tuple(args.upstream_args.split()),
        )
        report["upstream"] = up.to_json()
        ratio = report_mod.ratios(report.get("summary", {}), up)
        report["ratios"] = ratio
        console.print(
            f"test_ep: {up.modes}/{up.expected_modes} modes, "
            f"exit {up.returncode}, {up.elapsed_s:.0f} s" + (f"; {up.error}" if up.error else ""),
            soft_wrap=True,
        )
        if not up.passed:
            code = max(code, 1)
        for op, r in ratio.items():
            console.print(
                f"{op}: smoke {r['smoke_gbps']:.0f} GB/s vs test_ep "
                f"{r['test_ep_gbps']:.0f} GB/s = {r['ratio']:.3f}x"
            )
            if r["ratio"] < args.min_bandwidth_ratio:
                code = max(code, 1)
    verdict = {0: "pass", 1: "fail", 2: "environment"}.get(code, "fail")
    report["verdict"], report["exit_code"] = verdict, code
    if launch.rank == 0:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")
        if report.get("ranks"):
            console.print(report_mod.table(report))
        console.print(f"report: {args.json}")
    return code
