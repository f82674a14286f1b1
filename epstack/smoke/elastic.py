"""One `smoke elastic` run on this node: the launch, the preflight, the supervised ranks, DeepEP's own
test_ep.py and the JSON report. Knows no CLI: its caller passes Settings and a Progress that prints."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from epstack.errors import CHECK_FAILED, ENVIRONMENT, OK, BadInput, EpstackError
from epstack.guard.loaded import libstdcxx_interposition
from epstack.jit import gpuexport
from epstack.output import check_writable, write_file
from epstack.smoke import launch as launch_mod
from epstack.smoke import preflight
from epstack.smoke import report as report_mod
from epstack.smoke import upstream as upstream_mod
from epstack.smoke.classify import classify
from epstack.smoke.config import SmokeConfig
from epstack.smoke.launch import Launch
from epstack.smoke.result import RANK_RESULT, RankResult
from epstack.smoke.rundir import UPSTREAM, fresh_run_dir, run_files
from epstack.smoke.supervise import RankCommand, Supervised, supervise
from epstack.smoke.upstream import UpstreamResult

# How a rank is started; the CPU tests put a stub rank here (no torch, no GPU).
WORKER: tuple[str, ...] = (sys.executable, "-m", "epstack.smoke.worker")

VERDICTS = {OK: "pass", CHECK_FAILED: "fail", ENVIRONMENT: "environment"}


@dataclass(frozen=True, kw_only=True)
class Upstream:
    """DeepEP's own tests/elastic/test_ep.py, run from a checkout and compared with the smoke."""

    checkout: Path
    timeout_s: float
    extra: tuple[str, ...] = ()
    min_bandwidth_ratio: float = 0.0  # fail when smoke GB/s / test_ep GB/s is below this


@dataclass(frozen=True, kw_only=True)
class Settings:
    """A run's settings; the launch fields win over the launcher's variables where both exist."""

    config: SmokeConfig  # its report_path is where rank 0 writes the JSON report
    timeout_s: float
    run_dir: Path | None = None  # None: a new temporary directory
    upstream: Upstream | None = None
    upstream_only: bool = False
    nproc_per_node: int | None = None
    nnodes: int | None = None
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    argv: tuple[str, ...] = ()  # the command line, recorded in the report
    export_jit_cache: Path | None = None  # after a pass, the DeepEP kernels compiled (epstack.jit.gpuexport)

    @property
    def report(self) -> Path:
        return Path(self.config.report_path)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    code: int
    verdict: str
    ranks: list[RankResult]
    reported: bool  # this process is global rank 0 and wrote the report


class Progress(Protocol):
    """What a run tells its caller as it goes."""

    def started(self, launch: Launch, config: SmokeConfig, run_dir: Path) -> None: ...

    def ranks_ended(self, supervised: Supervised, findings: list[dict[str, Any]]) -> None: ...

    def exported(self, export: dict[str, Any]) -> None: ...

    def upstream_started(self, checkout: Path) -> None: ...

    def upstream_ended(self, result: UpstreamResult, ratios: dict[str, Any]) -> None: ...


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


def _run_ranks(
    settings: Settings, launch: Launch, run_dir: Path, progress: Progress
) -> tuple[int, list[RankResult], dict[str, Any]]:
    """Start this node's ranks under the supervisor; the exit code, the ranks' results and the
    report's rank sections."""
    cfg_path = run_dir / "config.json"
    settings.config.dump(cfg_path)
    base_env = dict(os.environ) | {"PYTHONUNBUFFERED": "1"}
    commands = [
        RankCommand(
            rank=spec.rank,
            argv=[*WORKER, "--config", str(cfg_path), "--run-dir", str(run_dir)],
            env=base_env | launch.rank_env(spec),
        )
        for spec in launch.ranks()
    ]
    sup = supervise(commands, run_dir=run_dir, timeout_s=settings.timeout_s)
    ranks = _ranks_from(run_dir, sup)
    code, findings = _diagnose(sup, ranks)
    progress.ranks_ended(sup, findings)
    return (
        code,
        ranks,
        {
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
        },
    )


def _run_upstream(
    upstream: Upstream, launch: Launch, run_dir: Path, summary: dict[str, Any], progress: Progress
) -> tuple[int, dict[str, Any]]:
    """DeepEP's own test_ep.py: its verdict, and the bandwidth ratio against the smoke's."""
    progress.upstream_started(upstream.checkout)
    up = upstream_mod.run(
        upstream.checkout,
        nproc=launch.nproc,
        timeout_s=upstream.timeout_s,
        run_dir=run_dir / UPSTREAM,
        extra=upstream.extra,
    )
    ratio = report_mod.ratios(summary, up)
    progress.upstream_ended(up, ratio)
    code = OK if up.passed else CHECK_FAILED
    if any(r["ratio"] < upstream.min_bandwidth_ratio for r in ratio.values()):
        code = CHECK_FAILED
    return code, {"upstream": up.to_json(), "ratios": ratio}


def run(settings: Settings, progress: Progress) -> Outcome:
    """Check everything a run needs before any rank starts, run it, and (global rank 0) write the report."""
    launch = launch_mod.detect(
        os.environ,
        nproc_per_node=settings.nproc_per_node,
        nnodes=settings.nnodes,
        node_rank=settings.node_rank,
        master_addr=settings.master_addr,
        master_port=settings.master_port,
        free_port=_free_port,
    )
    cfg = settings.config
    cfg.validate(launch.world_size)
    if settings.upstream and launch.launcher != "none":
        raise BadInput("--upstream-tests starts its own ranks: run it without a launcher")
    files = run_files(
        (spec.rank for spec in launch.ranks()),
        smoke=not settings.upstream_only,
        upstream=bool(settings.upstream),
    )
    if launch.rank == 0:
        ranks_read = [settings.run_dir / name for name in files] if settings.run_dir else []
        check_writable(settings.report, what="the smoke's --json report", inputs=ranks_read)
        if settings.export_jit_cache:
            check_writable(settings.export_jit_cache, what="--export-jit-cache", inputs=ranks_read)
    preflight.require(
        preflight.probe(), local_ranks=launch.nproc, first_local_rank=launch.local_rank, need_deep_ep=True
    )
    run_dir = fresh_run_dir(settings.run_dir, files)
    progress.started(launch, cfg, run_dir)
    report: dict[str, Any] = {
        "command": list(settings.argv),
        "launch": asdict(launch),
        "config": asdict(cfg),
        "run_dir": str(run_dir),
    }
    code = OK
    ranks: list[RankResult] = []
    if not settings.upstream_only:
        code, ranks, sections = _run_ranks(settings, launch, run_dir, progress)
        report |= sections
    if settings.upstream:
        upstream_code, sections = _run_upstream(
            settings.upstream, launch, run_dir, report.get("summary", {}), progress
        )
        code, report = max(code, upstream_code), report | sections
    # A passing run whose export fails is still reported as it ran; the export's error ends the command.
    export_error: EpstackError | None = None
    if settings.export_jit_cache and code == OK and launch.rank == 0:
        try:
            report["jit_export"] = gpuexport.export(settings.export_jit_cache, os.environ)
            progress.exported(report["jit_export"])
        except EpstackError as exc:
            report["jit_export"], export_error = {"error": str(exc)}, exc
    verdict = VERDICTS.get(code, "fail")
    report["verdict"], report["exit_code"] = verdict, export_error.exit_code if export_error else code
    if launch.rank == 0:
        write_file(
            settings.report, json.dumps(report, indent=2, sort_keys=True, default=str) + "\n", what="--json"
        )
    if export_error:
        raise export_error
    return Outcome(code=code, verdict=verdict, ranks=ranks, reported=launch.rank == 0)
