"""Slurm: an sbatch script running a Job in its image through pyxis/enroot, and the enroot pre-pull.

The image goes to `srun --container-image` by digest (enroot >= 4.0 reads REPOSITORY[:TAG]@DIGEST),
or as the squashfs file `cluster pull` imported, whose name carries the digest. The elastic smoke
runs one task per GPU (the launcher reads srun's SLURM_* variables); SGLang one task per node (it
starts a process per GPU itself), with its node rank expanded inside the task. MASTER_ADDR is the
first host of the job's node list. Every script passes `bash -n` and shellcheck in the tests.

The site's storage is node directories only (`host:DIR`): created on every node before the step, then
mounted with --container-mounts, so the JIT caches and the results are writable under enroot's
read-only root and outlive the step. The fabric's devices are mounted by path (what
awslabs/awsome-distributed-ai's DeepEP V2 sbatch does); each task gets its CPUs (--cpus-per-task)
unbound (--cpu-bind=none): SGLang runs about 11 processes per node.

With --router-image, SGLang's router (epstack.cluster.router) is a step of one task on node 0 too,
started first, in the background, without a GPU; clients and the serve smoke call it on its own port.

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

from epstack import __version__
from epstack.cluster import roles, router, servesmoke
from epstack.cluster.image import ImageRef
from epstack.cluster.jobs import IMAGE_ENTRYPOINT, Job, platform_words
from epstack.errors import BadInput
from epstack.fabric import RDMA_DEVICE_DIR
from epstack.smoke import launchenv as V
from epstack.smoke.serving.command import METRICS_PATH

# Where `cluster pull` imports images on each node unless told otherwise.
DEFAULT_SQUASHFS_DIR = "/var/tmp/epstack"


def squashfs_path(directory: str, image: ImageRef) -> str:
    """Where `cluster pull --target slurm` puts the image, and where render looks for it."""
    return str(PurePosixPath(directory) / f"epstack-{image.short}.sqsh")


def _container_image(job: Job, squashfs_dir: str | None) -> str:
    return squashfs_path(squashfs_dir, job.image) if squashfs_dir else job.image.ref


def _leader(job: Job) -> str:
    """The batch script's variable holding the host of the job's (its role's) node 0."""
    return roles.leader_variable(job) if job.role else V.MASTER_ADDR


def _task_command(job: Job) -> str:
    """What each task runs in the container, as shell text for the batch script."""
    if job.kind == "elastic-smoke":
        return shlex.join([IMAGE_ENTRYPOINT, *job.command(node_rank="", leader="")])
    # SGLang needs this task's node rank: expanded in the task, not in the batch script.
    inner = job.words(shlex.quote, node_rank=f'"${V.SLURM_NODEID}"', leader=f'"${_leader(job)}"')
    return shlex.join([IMAGE_ENTRYPOINT, "bash", "-c", " ".join(["exec", *inner])])


_LITERAL = "the value is text: quoted, never expanded"


def _assignments(env: dict[str, str]) -> list[str]:
    """KEY=VALUE lines; a value the shell would read (a site's $, quotes) is quoted, and shellcheck told
    that its single quotes are meant."""
    lines = []
    for key, value in env.items():
        quoted = shlex.quote(value)
        if quoted != value:
            lines.append(f"# shellcheck disable=SC2016,SC2089  # {_LITERAL}")
        lines.append(f"{key}={quoted}")
    return lines


def _host_dirs(job: Job) -> list[str]:
    """The site's node directories; BadInput for storage Slurm cannot mount, or a path that would break
    --container-mounts (its entries are SRC:DST, comma-separated)."""
    for volume in job.site.volumes:
        if volume.kind != "host":
            raise BadInput(
                f"--{volume.name}-storage {volume.kind}:{volume.source}: Slurm mounts node directories "
                f"only; fix: --{volume.name}-storage host:/DIR (or none)"
            )
        if {",", ":"} & set(volume.source + volume.mount):
            raise BadInput(
                f"--{volume.name}-storage {volume.source}: ',' and ':' cannot be mounted by pyxis "
                f"(--container-mounts SRC:DST,...); fix: --{volume.name}-storage host:/DIR without them"
            )
    return [volume.source for volume in job.site.volumes]


def _container_mounts(job: Job) -> list[str]:
    mounts = [f"{volume.source}:{volume.mount}" for volume in job.site.volumes]
    devices = [*job.devices, RDMA_DEVICE_DIR] if job.crosses_nodes else []
    return mounts + [f"{path}:{path}" for path in devices]


def _notes(job: Job, router_image: ImageRef | None, role_jobs: tuple[Job, ...]) -> list[str]:
    notes = job.notes()
    if role_jobs:
        notes.append(
            roles.note(
                role_jobs[0], "an srun step (prefill on the allocation's first nodes, decode on the next)"
            )
        )
    if job.crosses_nodes:
        notes.append(
            f"Devices mounted by path ({', '.join([*job.devices, RDMA_DEVICE_DIR])}): enroot shows the "
            "host's /dev unless ENROOT_RESTRICT_DEV=y; the task runs as you, with your capabilities."
        )
    if job.site.host_network:
        notes.append("--host-network: pyxis containers already share the node's network namespace.")
    if router_image is not None:
        notes.append(router.slurm_note(pd=bool(role_jobs)))
    if job.serve_smoke != "off":
        notes.append(_smoke_note(job, _smoke_port(router_image), role_jobs or (job,)))
    return notes


def _server_log_name(job: Job, run: str, node: str) -> str:
    return f"{job.workload_name}{run}-node{node}.log"


def _server_logs(job: Job) -> tuple[str, str] | None:
    """With the serve smoke and a results directory: each node's server log there (srun's --output
    pattern, which srun writes on the task's node), and node 0's as the smoke's container sees it."""
    results = job.site.results
    if job.serve_smoke == "off" or results is None:
        return None
    directory = PurePosixPath(results.source.replace("%", "%%"))  # srun reads % as a pattern
    pattern = str(directory / _server_log_name(job, "-%j", "%n"))
    return pattern, str(PurePosixPath(results.mount) / _server_log_name(job, servesmoke.RUN_ID, "0"))


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
        logs = " and ".join(str(directory / _server_log_name(each, "-JOBID", "N")) for each in workloads)
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
    hosts = {f"\0{role.role}-leader\0": f'"${_leader(role)}"' for role in role_jobs}
    command = router.slurm_command(job, tuple(zip(role_jobs, hosts, strict=True)))
    what = "each role's leader" if role_jobs else "the server there"
    return [
        f"# The router, in the background on node 0: it routes to {what} once it answers.",
        _node0_step(options, platform_words(command, shlex.quote, hosts)) + " &",
        "",
    ]


def _smoke_step(job: Job, squashfs_dir: str | None, port: int | None, served: Job) -> str:
    """The serve smoke's srun: one task on node 0 ($MASTER_ADDR) beside the server step (--overlap), no
    GPU, the results directory mounted; it reads the log of `served`'s node 0 there (the job, or its
    prefill role)."""
    results = job.site.results
    options = ["--gres=none", f"--container-image={_container_image(job, squashfs_dir)}"]
    options.append("--no-container-mount-home")
    if results is not None:
        options.append(f"--container-mounts={results.source}:{results.mount}")
    logs = _server_logs(served)
    command = servesmoke.words(
        job,
        shlex.quote,
        host="127.0.0.1",
        run_id=f'-"${V.SLURM_JOB_ID}"',
        port=port,
        server_log=logs[1] if logs else None,
    )
    return _node0_step(options, command)


_RANK_NOTE = [
    "# SGLang's node rank is the task's $SLURM_NODEID, expanded inside the task.",
    "# shellcheck disable=SC2016",
]


def _role_steps(prefill: str, decode: str) -> str:
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


def _serve_steps(
    job: Job,
    server: str,
    squashfs_dir: str | None,
    router_image: ImageRef | None,
    role_jobs: tuple[Job, ...],
) -> list[str]:
    """The router first when there is one; the server step (with roles, both roles' steps), and the serve
    smoke beside it: in the background, the job living as long as the server ("on"); or the job ending
    with the smoke's exit code ("exit"), the smoke stopped should the server step end first (it would
    wait out its --health-timeout for nothing)."""
    front = _router_step(job, router_image, role_jobs) if router_image is not None else []
    if job.serve_smoke == "off":
        return [*front, *_RANK_NOTE, server]
    smoke = _smoke_step(job, squashfs_dir, _smoke_port(router_image), (role_jobs or (job,))[0])
    if job.serve_smoke == "on":
        return [
            *front,
            "# The serve smoke, in the background: it checks the endpoint on node 0 once it answers.",
            f"{smoke} &",
            "",
            "# The server step: the job lives as long as it does.",
            *_RANK_NOTE,
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
        *_RANK_NOTE,
        "{",
        "    status=0",
        "    " + server.replace("\n", "\n    ") + " || status=$?",
        '    echo "epstack: the server step ended (exit $status) before the serve smoke" >&2',
        '    kill "$smoke" 2>/dev/null || true',
        "} &",
        'wait "$smoke"',
    ]


def _secret_reads(job: Job) -> list[str]:
    """Each --secret-file read when the job runs, on the batch script's node; a missing file stops the
    job before any step. The script holds the path only."""
    lines = []
    if job.site.secrets:
        lines.append(
            "# Secrets the site provides, read from files when the job runs (their values are not here)."
        )
    for secret in job.site.secrets:
        path = shlex.quote(secret.path)
        why = f"epstack: --secret-file {secret.env}={secret.path}: not readable on the batch node"
        lines += [
            f"if [ ! -r {path} ]; then",
            f"    echo {shlex.quote(why + '; fix: provide the file there or change the flag')} >&2",
            "    exit 1",
            "fi",
            f"{secret.env}=$(cat -- {path})",
        ]
    return lines


def _fetch_step(job: Job, squashfs_dir: str | None, exported: list[str]) -> list[str]:
    """The model's one download, a task on every node before the server step (epstack.cluster.modelfetch):
    a node's own directory is filled on each node, a shared one once (the others wait on its lock)."""
    fetch, model = job.fetch, job.site.model
    if fetch is None or model is None:
        return []
    srun = [
        "srun",
        "--ntasks-per-node=1",
        f"--container-image={_container_image(job, squashfs_dir)}",
        f"--container-env={','.join(exported)}",
        "--no-container-mount-home",
        f"--container-mounts={model.source}:{model.mount}",
    ]
    return [
        "# The model, fetched once into the model directory before the servers start.",
        "# shellcheck disable=SC2016",
        " \\\n    ".join([shlex.join(srun), shlex.join(fetch.command())]),
        "",
    ]


def _hosts(role_jobs: tuple[Job, ...]) -> list[str]:
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


def _metrics_lines(workloads: tuple[Job, ...], router_image: ImageRef | None) -> list[str]:
    """Where SGLang (each role's leader) and the router serve Prometheus metrics, printed when the job
    starts."""
    lines = []
    for workload in workloads:
        url = f"http://${_leader(workload)}:{workload.http_port}{METRICS_PATH}"
        served = f"SGLang's {workload.role} role" if workload.role else "SGLang"
        lines.append(f'echo "epstack: {served} serves Prometheus metrics at {url} (scrape it there)"')
    if router_image is not None:
        url = f"http://${V.MASTER_ADDR}:{router.METRICS_PORT}{METRICS_PATH}"
        lines.append(f'echo "epstack: the router serves Prometheus metrics at {url}"')
    return [*lines, ""]


def _server_step(workload: Job, squashfs_dir: str | None, exported: list[str]) -> str:
    """The srun of the job's (or one role's) servers: over all the job's nodes, or the role's own."""
    srun = ["srun"]
    if workload.role:
        srun += [f"--nodes={workload.nodes}", f"--relative={roles.first_node(workload)}"]
    srun += [
        f"--ntasks-per-node={workload.tasks_per_node}",
        f"--cpus-per-task={workload.site.cpus_per_gpu * workload.gpus_per_node // workload.tasks_per_node}",
        "--cpu-bind=none",
        f"--container-image={_container_image(workload, squashfs_dir)}",
        f"--container-env={','.join(exported)}",
        "--no-container-mount-home",
    ]
    mounts = _container_mounts(workload)
    if mounts:
        srun.append(f"--container-mounts={','.join(mounts)}")
    logs = _server_logs(workload)
    if logs is not None:
        srun.append(f"--output={logs[0]}")
    return " \\\n    ".join([shlex.join(srun), _task_command(workload)])


def sbatch_script(
    job: Job,
    *,
    squashfs_dir: str | None = None,
    pins_target: str = "",
    router_image: ImageRef | None = None,
    role_jobs: tuple[Job, ...] = (),
) -> str:
    """The job's sbatch script; a serve job's router in front of it when `router_image` is given; its
    prefill and decode `role_jobs` (epstack.cluster.roles) on nodes of their own, if any."""
    host_dirs = _host_dirs(job)
    workloads = role_jobs or (job,)
    nodes = job.nodes * len(workloads)
    env = job.env() | {V.MASTER_PORT: str(job.rendezvous_port)}
    leaders = [roles.leader_variable(role) for role in role_jobs]
    exported = [V.MASTER_ADDR, *leaders, *env, *(secret.env for secret in job.site.secrets)]
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job.name}",
        f"#SBATCH --nodes={nodes}",
        f"#SBATCH --ntasks-per-node={job.tasks_per_node}",
        f"#SBATCH --gpus-per-node={job.gpus_per_node}",
        "#SBATCH --exclusive",
        f"#SBATCH --output={job.name}-%j.out",
        f"# Rendered by epstack {__version__} (target {pins_target}): {job.kind} on {nodes} node(s)"
        f" x {job.gpus_per_node} GPU(s), fabric {job.fabric.name}.",
        f"# Image by digest: {shlex.quote(job.image.ref)}",
        "# Needs pyxis and enroot >= 4.0 (image references with a digest).",
        *(f"# {note}" for note in _notes(job, router_image, role_jobs)),
        "set -euo pipefail",
        "",
        "# DeepEP and NCCL pin host memory: the locked-memory limit must be unlimited (epstack doctor).",
        'if [ "$(ulimit -l)" != unlimited ]; then',
        '    echo "epstack: ulimit -l is $(ulimit -l) on $(hostname), not unlimited;'
        ' fix: set memlock unlimited in /etc/security/limits.conf and PropagateResourceLimits" >&2',
        "    exit 1",
        "fi",
        "",
        *_hosts(role_jobs),
    ]
    lines += _assignments(env)
    if any(shlex.quote(value) != value for value in env.values()):
        lines.append(f"# shellcheck disable=SC2090  # {_LITERAL}")
    lines += _secret_reads(job)
    lines.append("export " + " ".join(exported))
    lines.append("")
    if host_dirs:
        lines.append("# The node directories the container mounts, on every node.")
        lines.append(shlex.join(["srun", "--ntasks-per-node=1", "mkdir", "-p", "--", *host_dirs]))
        lines.append("")
    lines += _fetch_step(job, squashfs_dir, exported)
    if job.kind != "serve":
        return "\n".join([*lines, _server_step(job, squashfs_dir, exported)]) + "\n"
    lines += _metrics_lines(workloads, router_image)
    steps = [_server_step(workload, squashfs_dir, exported) for workload in workloads]
    server = _role_steps(*steps) if role_jobs else steps[0]
    lines += _serve_steps(job, server, squashfs_dir, router_image, role_jobs)
    return "\n".join(lines) + "\n"


def enroot_pull_script(image: ImageRef, *, nodes: int, squashfs_dir: str) -> str:
    """An sbatch script importing the image once on each of `nodes` nodes into a node-local directory."""
    target = squashfs_path(squashfs_dir, image)
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=epstack-pull-{image.short}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"# Rendered by epstack {__version__}: pre-pull {shlex.quote(image.ref)}",
        f"# into {shlex.quote(target)} on every node, so a job's first start is not {nodes} pulls at once.",
        "set -euo pipefail",
        "",
        f"srun --ntasks-per-node=1 mkdir -p -- {shlex.quote(squashfs_dir)}",
        "# Each node imports once; an existing file (same digest, same name) is kept.",
        "# shellcheck disable=SC2016",
        "srun --ntasks-per-node=1 bash -c "
        + shlex.quote('[ -e "$1" ] || enroot import --output "$1" "$2"')
        + f" _ {shlex.quote(target)} {shlex.quote('docker://' + image.ref)}",
    ]
    return "\n".join(lines) + "\n"
