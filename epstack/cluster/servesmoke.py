"""The serve smoke: a serve job proves its own endpoint with `epstack smoke serve --url` once it is ready.

The command is built here, once, from the job's serve plan: the profile, model, all-to-all backend and
TP/EP size the server was started with. epstack.cluster.k8s runs it as a Job of its own beside the
leader pod, against the serve job's HTTP Service; epstack.cluster.slurm as a step on node 0 against
127.0.0.1. On both:

- it waits through the smoke's own --health-timeout, no sleep loop: the server's start-up allowance
  (--startup-timeout, what the startup probe allows) and a margin, since the smoke starts with the job,
  before the server has its node, its image and its weights;
- --no-sweep: the checks (the backend, DeepEP V2's buffer where the server's log can be read, exact
  token counts, greedy repeat, a batch of 32) prove the endpoint in 41 short requests. The load sweep
  is a benchmark, and its load generator would read the model's tokenizer from the hub, in a client
  that has no model volume and may have no hub access;
- it runs `epstack` itself, not the image's entrypoint: an HTTP client needs neither the guard (the
  server's containers ran it) nor the JIT caches, and it asks for no GPU;
- its report goes to the site's results volume, named after the job (and the run, where the platform
  has a run id); without one, to /tmp in its container, and its log keeps the check rows.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePosixPath

from epstack import imagepaths
from epstack.cluster.jobs import Job, platform_words
from epstack.smoke.serving.engines import DEFAULT

PROGRAM = str(imagepaths.COMMAND)
SUFFIX = "-smoke"  # the Kubernetes Job's name and the report's, after the serve job's
FALLBACK_REPORT = "/tmp/epstack-smoke-serve.json"  # without a results volume: lost with the container
# The smoke starts with the job: the server's scheduling, image pull and (Kubernetes) its Service's
# endpoints come before the start-up the startup probe allows.
HEALTH_MARGIN_S = 600
# The 41 check requests of 32 new tokens take seconds on a healthy server; room for a cold first batch.
CHECKS_S = 900
# Kubernetes: the Job's deadline runs from its creation, so it also covers its pod's wait for the
# leader's node and the image there.
PULL_S = 1800
# Where a platform's run id goes in the smoke's file names: Slurm's -$SLURM_JOB_ID, nothing in Kubernetes
# (one smoke Job a serve job).
RUN_ID = "\0run-id\0"


def health_timeout_s(job: Job) -> int:
    return job.site.startup_timeout_s + HEALTH_MARGIN_S


def deadline_s(job: Job) -> int:
    """Kubernetes' activeDeadlineSeconds: the image, the wait for a healthy server, the checks."""
    return PULL_S + health_timeout_s(job) + CHECKS_S


def name(job: Job) -> str:
    return job.name + SUFFIX


def report_name(job: Job, run_id: str = RUN_ID) -> str:
    """The report's file name: the job's, the run's (RUN_ID, or a text in its place)."""
    return f"{job.name}{run_id}{SUFFIX}.json"


def report(job: Job, run_id: str = RUN_ID) -> str:
    """The report in the results volume as the container sees it; else FALLBACK_REPORT."""
    if job.site.results is None:
        return FALLBACK_REPORT
    return str(PurePosixPath(job.site.results.mount) / report_name(job, run_id))


def url(job: Job, host: str, port: int | None = None) -> str:
    """The endpoint at `host`: the server's HTTP port, or `port` (a router's beside it)."""
    assert job.http_port is not None, "the serve smoke is for serve jobs"
    return f"http://{host}:{port or job.http_port}"


def command(job: Job, *, host: str, port: int | None = None, server_log: str | None = None) -> list[str]:
    """`epstack smoke serve --url` against `host` at the server's port (or `port`), with the server's own
    plan."""
    plan = job.serve
    assert plan is not None, "the serve smoke is for serve jobs"
    args = [PROGRAM, "smoke", "serve", "--url", url(job, host, port)]
    args += ["--engine", job.engine.name] if job.engine.name != DEFAULT else []
    args += ["--profile", plan.profile.name]
    args += ["--model-path", plan.model_path, "--a2a", plan.a2a]
    # The endpoint's TP = EP size, for the report; the smoke itself runs on no GPU.
    args += ["--gpus-per-node", str(plan.world), "--no-sweep", "--health-timeout", str(health_timeout_s(job))]
    args += ["--json", report(job)]
    if server_log is not None:
        args += ["--server-log", server_log]
    return args


def words(
    job: Job,
    literal: Callable[[str], str],
    *,
    host: str,
    run_id: str,
    port: int | None = None,
    server_log: str | None = None,
) -> list[str]:
    """The command as a platform writes it: literal text through `literal`, the run id as its expression."""
    smoke = command(job, host=host, port=port, server_log=server_log)
    return platform_words(smoke, literal, {RUN_ID: run_id})
