"""A serve job's part of the sbatch script (epstack.cluster.slurm): its leaders' hosts, the server step,
the router and the serve smoke on node 0 beside it, where each serves its metrics, and their notes.

With --router-image, SGLang's router (epstack.cluster.router) is a step of one task on node 0, started
first, in the background, without a GPU; clients and the serve smoke call it on its own port.

With prefill/decode roles (epstack.cluster.roles) the job asks for `--nodes` twice: prefill's step runs
on the allocation's first nodes, decode's on the next (srun --nodes --relative), each SGLang's leader the
first host of its own nodes and its node rank the task's SLURM_NODEID, which slurmstepd numbers within the
step. Decode's step is the server step; prefill's, should it end, stops it (decode cannot serve alone).
Node 0, prefill's leader, runs the router in PD mode and the serve smoke.

A serve job also runs the serve smoke (epstack.cluster.servesmoke) unless --serve-smoke off: a step of
one task on node 0 beside the server step (--overlap), with no GPU (--gres=none), against 127.0.0.1.
It starts first, in the background, and waits for the server itself. With "on" the job then lives as
long as the server step; with "exit" it ends with the smoke's exit code (Slurm stops the server step),
and a server step that ends first stops the smoke. With a results directory the server step logs one
file a node there (srun --output, written on the task's node), so the smoke reads node 0's for DeepEP
V2's buffer line.
"""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath

from epstack.cluster import roles, router, servesmoke
from epstack.cluster.image import ImageRef
from epstack.cluster.jobs import Job, platform_words
from epstack.smoke import launchenv as V
from epstack.smoke.serving.command import METRICS_PATH


def leader(job: Job) -> str:
    """The batch script's variable holding the host of the job's (its role's) node 0."""
    return roles.leader_variable(job) if job.role else V.MASTER_ADDR


def _log_name(job: Job, run: str, node: str) -> str:
    return f"{job.workload_name}{run}-node{node}.log"


def server_logs(job: Job) -> tuple[str, str] | None:
    """With the serve smoke and a results directory: each node's server log there (srun's --output
    pattern, which srun writes on the task's node), and node 0's as the smoke's container sees it."""
    results = job.site.results
    if job.serve_smoke == "off" or results is None:
        return None
    directory = PurePosixPath(results.source.replace("%", "%%"))  # srun reads % as a pattern
    pattern = str(directory / _log_name(job, "-%j", "%n"))
    return pattern, str(PurePosixPath(results.mount) / _log_name(job, servesmoke.RUN_ID, "0"))


def _smoke_port(router_image: ImageRef | None) -> int | None:
    """The port the serve smoke calls on node 0: the router's when there is one, else the server's."""
    return router.SLURM_PORT if router_image is not None else None


def _smoke_note(job: Job, port: int | None, workloads: tuple[Job, ...]) -> str:
    results = job.site.results
    ending = (
        "the job keeps serving whatever its verdict"
        if job.serve_smoke == "on"
        else "the job ends with its exit code (and the server step with it)"
    )
    where = "none kept (no results directory); its log has the check rows"
    if results is not None:
        directory = PurePosixPath(results.source)
        logs = " and ".join(str(directory / _log_name(each, "-JOBID", "N")) for each in workloads)
        where = (
            f"{directory / servesmoke.report_name(job, '-JOBID')}, and each node's server log is "
            f"{logs} (not this job's output file)"
        )
    return (
        f"Serve smoke (--serve-smoke {job.serve_smoke}): a step on node 0 without a GPU runs `epstack smoke "
        f"serve --url {servesmoke.url(job, '127.0.0.1', port)} --no-sweep` once the server answers "
        f"(--health-timeout {servesmoke.health_timeout_s(job)}); {ending}. Report: {where}."
    )


def _node0_step(options: list[str], command: list[str]) -> str:
    """An srun of one task on node 0 ($MASTER_ADDR) beside the server step (--overlap), no GPU."""
    srun = f'srun --overlap --nodes=1 --ntasks=1 --nodelist="${V.MASTER_ADDR}" {shlex.join(options)}'
    return " \\\n    ".join([srun, " ".join(command)])


def _router_step(job: Job, image: ImageRef, role_jobs: tuple[Job, ...]) -> list[str]:
    """SGLang's router on node 0, in the background, in its own image; with roles, told each role's
    leader by the batch script's variable for it."""
    options = ["--gres=none", f"--container-image={image.ref}", "--no-container-mount-home"]
    hosts = {f"\0{role.role}-leader\0": f'"${leader(role)}"' for role in role_jobs}
    command = router.slurm_command(job, tuple(zip(role_jobs, hosts, strict=True)))
    what = "each role's leader" if role_jobs else "the server there"
    return [
        f"# The router, in the background on node 0: it routes to {what} once it answers.",
        _node0_step(options, platform_words(command, shlex.quote, hosts)) + " &",
        "",
    ]


def _smoke_step(job: Job, image: str, port: int | None, served: Job) -> str:
    """The serve smoke's srun: one task on node 0 ($MASTER_ADDR) beside the server step (--overlap), no
    GPU, the results directory mounted; it reads the log of `served`'s node 0 there (the job, or its
    prefill role)."""
    results = job.site.results
    options = ["--gres=none", f"--container-image={image}"]
    options.append("--no-container-mount-home")
    if results is not None:
        options.append(f"--container-mounts={results.source}:{results.mount}")
    logs = server_logs(served)
    command = servesmoke.words(
        job,
        shlex.quote,
        host="127.0.0.1",
        run_id=f'-"${V.SLURM_JOB_ID}"',
        port=port,
        server_log=logs[1] if logs else None,
    )
    return _node0_step(options, command)


def _rank_note(job: Job) -> list[str]:
    return [
        f"# {job.engine.title}'s node rank is the task's $SLURM_NODEID, expanded inside the task.",
        "# shellcheck disable=SC2016",
    ]


def role_steps(prefill: str, decode: str) -> str:
    """Both roles' steps as one server step: decode's in the background, waited for; prefill's beside it,
    stopping decode's should it end first."""
    return "\n".join(
        [
            "# The decode step, in the background; the job waits for it.",
            f"{decode} &",
            "decode=$!",
            "# The prefill step beside it; should it end, it stops decode's: decode cannot serve alone.",
            "# shellcheck disable=SC2016",
            "{",
            "    status=0",
            "    " + prefill.replace("\n", "\n    ") + " || status=$?",
            '    echo "epstack: the prefill step ended (exit $status); stopping the decode step" >&2',
            '    kill "$decode" 2>/dev/null || true',
            "} &",
            'wait "$decode"',
        ]
    )


def serve_steps(
    job: Job,
    server: str,
    image: str,
    router_image: ImageRef | None,
    role_jobs: tuple[Job, ...],
) -> list[str]:
    """The router first when there is one; the server step (with roles, both roles' steps), and the serve
    smoke beside it: in the background, the job living as long as the server ("on"); or the job ending
    with the smoke's exit code ("exit"), the smoke stopped should the server step end first (it would
    wait out its --health-timeout for nothing)."""
    front = _router_step(job, router_image, role_jobs) if router_image is not None else []
    if job.serve_smoke == "off":
        return [*front, *_rank_note(job), server]
    smoke = _smoke_step(job, image, _smoke_port(router_image), (role_jobs or (job,))[0])
    if job.serve_smoke == "on":
        return [
            *front,
            "# The serve smoke, in the background: it checks the endpoint on node 0 once it answers.",
            f"{smoke} &",
            "",
            "# The server step: the job lives as long as it does.",
            *_rank_note(job),
            server,
        ]
    return [
        *front,
        "# The serve smoke, in the background: it checks the endpoint on node 0 once it answers; the",
        "# job ends with its exit code, and Slurm then stops the server step.",
        f"{smoke} &",
        "smoke=$!",
        "",
        "# The server step; should it end first, the smoke is stopped: nothing is left to answer it.",
        *_rank_note(job),
        "{",
        "    status=0",
        "    " + server.replace("\n", "\n    ") + " || status=$?",
        '    echo "epstack: the server step ended (exit $status) before the serve smoke" >&2',
        '    kill "$smoke" 2>/dev/null || true',
        "} &",
        'wait "$smoke"',
    ]


def leader_hosts(role_jobs: tuple[Job, ...]) -> list[str]:
    """Node 0's host, and each role's leader's: hosts of the job's node list, read when it runs."""
    read = f'$(scontrol show hostnames "${V.SLURM_JOB_NODELIST}" | sed -n {{}}p)'
    lines = [f"{V.MASTER_ADDR}={read.format(1)}"]
    for role in role_jobs:
        first = roles.first_node(role)
        lines.append(
            f"# The {role.role} role on the allocation's nodes {first}-{first + role.nodes - 1}; its leader:"
        )
        lines.append(f"{roles.leader_variable(role)}={read.format(first + 1)}")
    return lines


def metrics_lines(workloads: tuple[Job, ...], router_image: ImageRef | None) -> list[str]:
    """Where the engine (each role's leader) and the router serve Prometheus metrics, printed when the job
    starts."""
    lines = []
    for workload in workloads:
        url = f"http://${leader(workload)}:{workload.http_port}{METRICS_PATH}"
        title = workload.engine.title
        served = f"{title}'s {workload.role} role" if workload.role else title
        lines.append(f'echo "epstack: {served} serves Prometheus metrics at {url} (scrape it there)"')
    if router_image is not None:
        url = f"http://${V.MASTER_ADDR}:{router.METRICS_PORT}{METRICS_PATH}"
        lines.append(f'echo "epstack: the router serves Prometheus metrics at {url}"')
    return [*lines, ""]


def notes(job: Job, router_image: ImageRef | None, role_jobs: tuple[Job, ...]) -> list[str]:
    """The script's head on the roles, the router and the serve smoke, each when there is one."""
    found = []
    if role_jobs:
        unit = "an srun step (prefill on the allocation's first nodes, decode on the next)"
        found.append(roles.note(role_jobs[0], unit))
    if router_image is not None:
        found.append(router.slurm_note(pd=bool(role_jobs)))
    if job.serve_smoke != "off":
        found.append(_smoke_note(job, _smoke_port(router_image), role_jobs or (job,)))
    return found
