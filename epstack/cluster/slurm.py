"""Slurm: an sbatch script running a Job in its image through pyxis/enroot, and the enroot pre-pull.

The image goes to `srun --container-image` by digest (enroot >= 4.0 reads REPOSITORY[:TAG]@DIGEST),
or as the squashfs file `cluster prepull` imported, whose name carries the digest. The elastic smoke
runs one task per GPU (the launcher reads srun's SLURM_* variables); SGLang one task per node (it
starts a process per GPU itself), with its node rank expanded inside the task. MASTER_ADDR is the
first host of the job's node list. Every script passes `bash -n` and shellcheck in the tests.

The site's storage is node directories only (`host:DIR`): created on every node before the step, then
mounted with --container-mounts, so the JIT caches and the results are writable under enroot's
read-only root and outlive the step. The fabric's devices are mounted by path (what
awslabs/awsome-distributed-ai's DeepEP V2 sbatch does); each task gets its CPUs (--cpus-per-task)
unbound (--cpu-bind=none): SGLang runs about 11 processes per node.

A serve job's server step (one per prefill/decode role), its router and its serve smoke are
epstack.cluster.slurmserve's.
"""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath

from epstack import __version__
from epstack.cluster import roles, slurmserve
from epstack.cluster.image import ImageRef
from epstack.cluster.jobs import IMAGE_ENTRYPOINT, Job
from epstack.errors import BadInput
from epstack.fabric import RDMA_DEVICE_DIR
from epstack.smoke import launchenv as V

# Where `cluster prepull` imports images on each node unless told otherwise.
DEFAULT_SQUASHFS_DIR = "/var/tmp/epstack"


def squashfs_path(directory: str, image: ImageRef) -> str:
    """Where `cluster prepull --target slurm` puts the image, and where render looks for it."""
    return str(PurePosixPath(directory) / f"epstack-{image.short}.sqsh")


def _container_image(job: Job, squashfs_dir: str | None) -> str:
    return squashfs_path(squashfs_dir, job.image) if squashfs_dir else job.image.ref


def _task_command(job: Job) -> str:
    """What each task runs in the container, as shell text for the batch script."""
    if job.kind == "elastic-smoke":
        return shlex.join([*IMAGE_ENTRYPOINT, *job.command(node_rank="", leader="")])
    # The engine needs this task's node rank: expanded in the task, not in the batch script; so is what
    # the nodes but node 0 add (vLLM's --headless).
    node = f'"${V.SLURM_NODEID}"'
    worker = f"$([ {node} = 0 ] || echo {job.engine.worker})" if job.engine.worker else ""
    inner = job.words(shlex.quote, node_rank=node, leader=f'"${slurmserve.leader(job)}"', worker=worker)
    return shlex.join([*IMAGE_ENTRYPOINT, "bash", "-c", " ".join(["exec", *inner])])


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
    if job.crosses_nodes:
        notes.append(
            f"Devices mounted by path ({', '.join([*job.devices, RDMA_DEVICE_DIR])}): enroot shows the "
            "host's /dev unless ENROOT_RESTRICT_DEV=y; the task runs as you, with your capabilities."
        )
    if job.site.host_network:
        notes.append("--host-network: pyxis containers already share the node's network namespace.")
    return notes + slurmserve.notes(job, router_image, role_jobs)


def _secret_reads(job: Job) -> list[str]:
    """Each --secret-file read when the job runs, on the batch script's node, into a shell variable that
    is not exported (_with_secrets passes it to the steps that need it); a missing file stops the job
    before any step. The script holds the path only."""
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


def _with_secrets(job: Job, srun: str) -> str:
    """`srun` with the --secret-file variables in its environment alone: the fetch and server steps get
    them, and no other step (the router, the serve smoke, mkdir) inherits them from the script's."""
    given = " ".join(f'{secret.env}="${secret.env}"' for secret in job.site.secrets)
    return f"{given} {srun}" if given else srun


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
        f"# The model, {'written' if fetch.generated else 'fetched'} once into the model directory before "
        "the servers start.",
        "# shellcheck disable=SC2016",
        _with_secrets(job, " \\\n    ".join([shlex.join(srun), shlex.join(fetch.command())])),
        "",
    ]


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
    logs = slurmserve.server_logs(workload)
    if logs is not None:
        srun.append(f"--output={logs[0]}")
    return _with_secrets(workload, " \\\n    ".join([shlex.join(srun), _task_command(workload)]))


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
    exported = [V.MASTER_ADDR, *leaders, *env]
    container_env = [*exported, *(secret.env for secret in job.site.secrets)]
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
        *slurmserve.leader_hosts(role_jobs),
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
    lines += _fetch_step(job, squashfs_dir, container_env)
    if job.kind != "serve":
        return "\n".join([*lines, _server_step(job, squashfs_dir, container_env)]) + "\n"
    lines += slurmserve.metrics_lines(workloads, router_image)
    steps = [_server_step(workload, squashfs_dir, container_env) for workload in workloads]
    server = slurmserve.role_steps(*steps) if role_jobs else steps[0]
    image = _container_image(job, squashfs_dir)
    lines += slurmserve.serve_steps(job, server, image, router_image, role_jobs)
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
