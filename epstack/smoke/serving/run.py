"""One `epstack smoke serve`: start SGLang (or vLLM, `--engine vllm`) with the serve plan's flags (or
attach to --url), wait until it is healthy, check it (and the NCCL each of its processes loaded), sweep
the load, and again without DeepEP for the comparison (where that compares two kernels: not vLLM at data
parallel 1); one JSON report.

Failures end the run with a named reason and the report says which (the server exited before it was
healthy, with the known failure its log shows; a health timeout; a request that failed or timed out; a
wrong backend; a failed sweep level). Every server started is stopped on leaving, Ctrl-C included.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from epstack.checkrow import Check
from epstack.document import Schema
from epstack.errors import CHECK_FAILED, OK, BadInput, EpstackError
from epstack.output import check_writable, write_file
from epstack.smoke.nccl import ProcessNccl, processes_check, session_nccl
from epstack.smoke.rundir import writable_dir
from epstack.smoke.serving import checks, server, sweep, tinymodel
from epstack.smoke.serving.checks import Asked
from epstack.smoke.serving.client import Endpoint, RequestFailed
from epstack.smoke.serving.command import redacted
from epstack.smoke.serving.engines import DEFAULT, ENGINES, Engine
from epstack.smoke.serving.generation import Generation
from epstack.smoke.serving.profiles import ServePlan
from epstack.smoke.serving.server import ServerFailed
from epstack.smoke.serving.startup import Startup
from epstack.smoke.serving.sweep import Level
from epstack.smoke.serving.tinymodel import Prepared

FailureKind = Literal["server-exited", "health-timeout", "request", "wrong-backend", "sweep", "check"]


@dataclass(frozen=True, kw_only=True)
class Settings:
    plan: ServePlan
    extra_args: list[str]  # the engine's flags after the plan's (site specifics: --attention-backend ...)
    url: str | None  # attach to a running server instead of starting one
    server_log: Path | None  # with url: the server's log, for the DeepEP V2 buffer line
    compare: bool  # also serve with --moe-a2a-backend none and compare
    reference: Path | None  # a passing report whose none answers stand in for that second server
    asked: Asked
    concurrencies: tuple[int, ...]  # empty: no sweep
    isl: int
    osl: int
    requests_per_level: int  # x concurrency, at least 8
    health_timeout_s: float
    level_timeout_s: float
    run_dir: Path | None
    model_cache: Path  # where the tiny profile's generated model folder is written once and reused
    report: Path
    engine: str = DEFAULT  # epstack.smoke.serving.engines

    @property
    def server(self) -> Engine:
        return ENGINES[self.engine]


@dataclass(frozen=True, kw_only=True)
class Failure:
    kind: FailureKind
    message: str
    finding: str | None = None  # the known failure's key (epstack.smoke.classify)
    log_tail: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class ServedRun:
    """One server: how it was started and what it answered."""

    a2a: str
    argv: list[str]
    env: dict[str, str]
    launch_to_healthy_s: float | None
    info: dict[str, Any]
    log: str | None
    startup: Startup | None = None  # read from its log when it stopped (servers this run started)
    # The libnccl each of its processes mapped once it was healthy, by that library's own ncclGetVersion
    # (servers this run started: the session they run in).
    nccl: list[ProcessNccl] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class ServeReport:
    verdict: Literal["pass", "fail"]
    profile: str
    model_path: str
    tp_size: int
    ep_size: int
    runs: list[ServedRun]
    checks: list[Check]
    comparison: dict[str, Any] | None
    isl: int
    osl: int
    sweep: list[Level]
    failure: Failure | None
    elapsed_s: float
    generated_model: Prepared | None = None  # the tiny profile's folder: written now, or reused
    engine: str = DEFAULT


SERVE_REPORT = Schema(
    name="serve-smoke",
    version=1,
    model=ServeReport,
    what="a serve smoke report",
    fix="run `epstack smoke serve` again with this epstack",
)


class Printer:
    """Where progress goes (the command's console); the default says nothing."""

    def say(self, text: str) -> None:
        del text


@dataclass(kw_only=True)
class _State:
    runs: list[ServedRun] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    comparison: dict[str, Any] | None = None
    sweep: list[Level] = field(default_factory=list)


def _model(settings: Settings, out: Printer) -> tuple[ServePlan, Prepared | None]:
    """The plan, with the tiny profile's generated folder (written once into the model cache, then
    reused) when the plan still names the profile's default path."""
    plan = settings.plan
    if settings.url or not plan.profile.generated or plan.model_path != plan.profile.model_path:
        return plan, None
    folder = settings.model_cache / tinymodel.NAME
    out.say(f"the tiny model in {folder} ...")
    prepared = tinymodel.ensure(folder)
    how = "reused" if prepared.reused else f"written in {prepared.seconds:.0f} s"
    out.say(f"the tiny model: {prepared.bytes / 2**30:.2f} GiB, key {prepared.key}, {how}")
    return dataclasses.replace(plan, model_path=str(folder)), prepared


def _sweep(
    settings: Settings, endpoint: Endpoint, model: str, *, work: Path, state: _State, out: Printer
) -> None:
    if not settings.concurrencies:
        return
    for concurrency in settings.concurrencies:
        requests = max(8, settings.requests_per_level * concurrency)
        level = sweep.run_level(
            url=endpoint.url,
            model=model,
            isl=settings.isl,
            osl=settings.osl,
            concurrency=concurrency,
            requests=requests,
            seed=settings.asked.seed,
            work=work,
            timeout_s=settings.level_timeout_s,
            vllm=server.entry(settings.server.bench) if settings.server.bench else None,
        )
        state.sweep.append(level)
        out.say(
            f"sweep c={concurrency}: {level.completed}/{requests} ok, TTFT p50 {level.ttft_p50_ms:.1f} ms, "
            f"ITL p50 {level.itl_p50_ms:.2f} ms, {level.output_tokens_per_s:.0f} tok/s"
        )
    errors = sum(level.errors for level in state.sweep)
    state.checks.append(
        Check(
            component="sweep",
            expected="0 errors",
            found=f"{errors} errors in {len(state.sweep)} levels",
            verdict="ok" if errors == 0 else "fail",
            detail=next((lv.first_error for lv in state.sweep if lv.first_error), ""),
        )
    )


def _served(
    settings: Settings, plan: ServePlan, work: Path, state: _State, out: Printer, *, sweep_it: bool
) -> list[Generation]:
    """Start one server for `plan`, check it (and sweep), stop it; returns its alone generations."""
    engine = settings.server
    argv = engine.launch(plan, settings.extra_args)
    env = engine.environment(plan, os.environ)
    log = work / f"server-{plan.a2a}.log"
    out.say(f"starting {engine.title} ({plan.a2a}): {' '.join(redacted(argv))}; log {log}")
    run = ServedRun(
        a2a=plan.a2a,
        argv=redacted(argv),
        env=engine.env(plan),
        launch_to_healthy_s=None,
        info={},
        log=str(log),
    )
    state.runs.append(run)
    launched = datetime.now()  # SGLang and vLLM stamp their logs in local time
    try:
        with server.serving(argv, env, log, health=engine.health) as started:
            healthy = started.wait_healthy(settings.health_timeout_s)
            out.say(f"healthy after {healthy:.0f} s")
            loaded = session_nccl(started.proc.pid)  # the engine's workers run in the server's session
            probed = engine.probe(started.endpoint, plan, log, settings.asked)
            state.runs[-1] = dataclasses.replace(
                run, launch_to_healthy_s=round(healthy, 1), info=probed.info, nccl=loaded
            )
            _keep(state, probed.checks, out)
            _keep(state, [processes_check(loaded, f"{plan.a2a} server")], out)
            if sweep_it:
                _sweep(settings, started.endpoint, plan.model_path, work=work, state=state, out=out)
    finally:  # where the start-up went, on failure too
        text = log.read_text(errors="replace") if log.exists() else ""
        read = engine.startup(text, launched)
        state.runs[-1] = dataclasses.replace(state.runs[-1], startup=read)
        if read.deepgemm:
            out.say(f"DeepGEMM's JIT: {len(read.deepgemm)} sessions, {read.deepgemm_s} s of the start-up")
    return probed.alone


def _recorded(
    settings: Settings, report: ServeReport, plan: ServePlan, prepared: Prepared | None
) -> list[Generation]:
    """The answers without DeepEP a passing report of the same prompts holds (--reference): its engine,
    profile, model (the generated model's key, else its path), seed and tokens this run's; BadInput naming
    the report and what differs otherwise."""
    path = settings.reference
    kept = report.comparison or {}
    model = (prepared.key, report.generated_model.key) if prepared and report.generated_model else None
    differs = [
        f"{what} {theirs} (this run: {ours})"
        for what, theirs, ours in (
            ("engine", report.engine, settings.engine),
            ("profile", report.profile, plan.profile.name),
            ("model", *(model or (report.model_path, plan.model_path))),
            ("seed", kept.get("seed"), settings.asked.seed),
            ("tokens", kept.get("tokens"), settings.asked.tokens),
        )
        if theirs != ours
    ]
    if report.verdict != "pass" or not kept.get("reference"):
        differs.insert(0, "no passing comparison without DeepEP")
    if differs:
        raise BadInput(
            f"--reference {path}: {'; '.join(differs)}; fix: a report of `epstack smoke serve` with the "
            "comparison, passed, of this engine, profile, model, --seed and --tokens"
        )
    try:
        return _GENERATIONS.validate_python(kept["reference"])
    except ValidationError as exc:
        where = ".".join(str(part) for part in exc.errors()[0]["loc"])
        raise BadInput(
            f"--reference {path}: comparison.reference.{where} is no answer; fix: run that smoke again"
        ) from None


_GENERATIONS = TypeAdapter(list[Generation])


def _keep(state: _State, rows: list[Check], out: Printer) -> None:
    state.checks.extend(rows)
    for row in rows:
        out.say(f"{row.component}: {row.verdict} ({row.found})")
    wrong = next((r for r in rows if r.component in BACKEND_ROWS and r.failed), None)
    if wrong is not None:
        raise _Stop(
            Failure(
                kind="wrong-backend",
                message=f"the server reports --{wrong.component} {wrong.found}, not {wrong.expected}",
            )
        )


BACKEND_ROWS = ("moe-a2a-backend", "all2all-backend")  # SGLang's, vLLM's: a wrong one stops the run


class _Stop(Exception):
    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def _attached(settings: Settings, work: Path, state: _State, out: Printer) -> None:
    assert settings.url is not None
    endpoint = Endpoint(url=settings.url.rstrip("/"), health=settings.server.health)
    deadline = time.monotonic() + settings.health_timeout_s
    while not endpoint.healthy(timeout=10):
        if time.monotonic() >= deadline:
            raise _Stop(
                Failure(
                    kind="health-timeout",
                    message=f"{settings.url}{endpoint.health} did not "
                    f"answer 200 within {settings.health_timeout_s:g} s",
                )
            )
        time.sleep(2)
    probed = settings.server.probe(endpoint, settings.plan, settings.server_log, settings.asked)
    state.runs.append(
        ServedRun(
            a2a=settings.plan.a2a,
            argv=[],
            env={},
            launch_to_healthy_s=None,
            info=probed.info,
            log=str(settings.server_log) if settings.server_log else None,
        )
    )
    _keep(state, probed.checks, out)
    model = str(probed.info.get("model_path") or settings.plan.model_path)
    _sweep(settings, endpoint, model, work=work, state=state, out=out)


def _failure(exc: Exception) -> Failure:
    if isinstance(exc, _Stop):
        return exc.failure
    if isinstance(exc, ServerFailed):
        kind: FailureKind = "health-timeout" if "not healthy within" in str(exc) else "server-exited"
        head, _, tail = str(exc).partition("\n")
        return Failure(
            kind=kind,
            message=head,
            finding=exc.finding.key if exc.finding else None,
            log_tail=[line.removeprefix("  | ") for line in tail.splitlines()],
        )
    if isinstance(exc, RequestFailed):
        return Failure(kind="request", message=str(exc))
    return Failure(kind="sweep", message=str(exc))


def run(settings: Settings, out: Printer, *, clock: Callable[[], float] = time.monotonic) -> int:
    """The smoke; writes the report (pass or fail) and returns the exit code."""
    start = clock()
    if not settings.url:
        server.port_of(settings.extra_args)  # a --port that is no port is bad input: found before any start
    check_writable(settings.report, what="the serve smoke's --json report")
    work = (
        writable_dir(settings.run_dir)
        if settings.run_dir
        else Path(tempfile.mkdtemp(prefix="epstack-serve-"))
    )
    state = _State()
    failure: Failure | None = None
    code = OK
    # The reference read first (no model written for an unreadable one), matched once the model is known.
    reference_report = SERVE_REPORT.read(settings.reference) if settings.reference else None
    plan, prepared = _model(settings, out)  # a folder it may not write, a full disk: before any server
    recorded = _recorded(settings, reference_report, plan, prepared) if reference_report else None
    try:
        if settings.url:
            _attached(settings, work, state, out)
        else:
            through = _served(settings, plan, work, state, out, sweep_it=True)
            skip = settings.server.no_comparison(plan)
            if settings.compare and skip:
                _keep(state, [checks.not_compared(skip)], out)
            elif settings.compare and through:  # none when its answers held a value no model gives
                reference = recorded or _served(
                    settings, plan.without_deepep(), work, state, out, sweep_it=False
                )
                if reference:
                    rows, summary = checks.without_deepep(through, reference)
                    _keep(state, rows, out)
                    asked = {"seed": settings.asked.seed, "tokens": settings.asked.tokens}
                    state.comparison = {**summary, **asked, "reference_from": str(settings.reference or "")}
    except (_Stop, EpstackError) as exc:
        failure = _failure(exc)
        code = exc.exit_code if isinstance(exc, EpstackError) else CHECK_FAILED
    if failure is None and any(c.failed for c in state.checks):
        failure = Failure(
            kind="check", message=", ".join(c.component for c in state.checks if c.failed) + " failed"
        )
        code = CHECK_FAILED
    report = ServeReport(
        verdict="pass" if failure is None else "fail",
        profile=plan.profile.name,
        model_path=plan.model_path,
        tp_size=plan.tp_size,
        ep_size=plan.ep_size,
        runs=state.runs,
        checks=state.checks,
        comparison=state.comparison,
        isl=settings.isl,
        osl=settings.osl,
        sweep=state.sweep,
        failure=failure,
        elapsed_s=round(clock() - start, 1),
        generated_model=prepared,
        engine=settings.engine,
    )
    write_file(settings.report, SERVE_REPORT.dumps(report), what="the serve smoke's --json report")
    if failure is not None:
        out.say(f"{failure.kind}: {failure.message}")
        for line in failure.log_tail:
            out.say(f"  | {line}")
    return code
