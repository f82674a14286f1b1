"""Slurm: an sbatch script running a Job in its image through pyxis/enroot, and the enroot pre-pull.

The image goes to `srun --container-image` by digest (enroot >= 4.0 reads REPOSITORY[:TAG]@DIGEST),
or as the squashfs file `cluster pull` imported, whose name carries the digest. The elastic smoke
runs one task per GPU (the launcher reads srun's SLURM_* variables); SGLang one task per node (it
starts a process per GPU itself), with its node rank expanded inside the task. MASTER_ADDR is the
first host of the job's node list. Every script passes `bash -n` and shellcheck in the tests.
"""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath

from epstack import __version__
from epstack.cluster.image import ImageRef
from epstack.cluster.jobs import IMAGE_ENTRYPOINT, Job
from epstack.smoke import launchenv as V

# Where `cluster pull` imports images on each node unless told otherwise.
DEFAULT_SQUASHFS_DIR = "/var/tmp/epstack"


def squashfs_path(directory: str, image: ImageRef) -> str:
    """Where `cluster pull --target slurm` puts the image, and where render looks for it."""
    return str(PurePosixPath(directory) / f"epstack-{image.short}.sqsh")


def _container_image(job: Job, squashfs_dir: str | None) -> str:
    return squashfs_path(squashfs_dir, job.image) if squashfs_dir else job.image.ref


def _task_command(job: Job) -> str:
    """What each task runs in the container, as shell text for the batch script."""
    if job.kind == "elastic-smoke":
        return shlex.join([IMAGE_ENTRYPOINT, *job.command(node_rank="", leader="")])
    # SGLang needs this task's node rank: expanded in the task, not in the batch script.
    inner = job.words(shlex.quote, node_rank=f'"${V.SLURM_NODEID}"', leader=f'"${V.MASTER_ADDR}"')
    return shlex.join([IMAGE_ENTRYPOINT, "bash", "-c", " ".join(["exec", *inner])])


def sbatch_script(job: Job, *, squashfs_dir: str | None = None, pins_target: str = "") -> str:
    env = job.env() | {V.MASTER_PORT: str(job.rendezvous_port)}
    exported = [V.MASTER_ADDR, *env]
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job.name}",
        f"#SBATCH --nodes={job.nodes}",
        f"#SBATCH --ntasks-per-node={job.tasks_per_node}",
        f"#SBATCH --gpus-per-node={job.gpus_per_node}",
        "#SBATCH --exclusive",
        f"#SBATCH --output={job.name}-%j.out",
        f"# Rendered by epstack {__version__} (target {pins_target}): {job.kind} on {job.nodes} node(s)"
        f" x {job.gpus_per_node} GPU(s), fabric {job.fabric.name}.",
        f"# Image by digest: {shlex.quote(job.image.ref)}",
        "# Needs pyxis and enroot >= 4.0 (image references with a digest).",
        "set -euo pipefail",
        "",
        "# DeepEP and NCCL pin host memory: the locked-memory limit must be unlimited (epstack doctor).",
        'if [ "$(ulimit -l)" != unlimited ]; then',
        '    echo "epstack: ulimit -l is $(ulimit -l) on $(hostname), not unlimited;'
        ' fix: set memlock unlimited in /etc/security/limits.conf and PropagateResourceLimits" >&2',
        "    exit 1",
        "fi",
        "",
        f'{V.MASTER_ADDR}=$(scontrol show hostnames "${V.SLURM_JOB_NODELIST}" | sed -n 1p)',
    ]
    lines += [f"{key}={shlex.quote(value)}" for key, value in env.items()]
    lines.append("export " + " ".join(exported))
    lines.append("")
    srun = [
        "srun",
        f"--ntasks-per-node={job.tasks_per_node}",
        f"--container-image={_container_image(job, squashfs_dir)}",
        f"--container-env={','.join(exported)}",
        "--no-container-mount-home",
    ]
    if job.kind == "serve":
        lines.append("# SGLang's node rank is the task's $SLURM_NODEID, expanded inside the task.")
        lines.append("# shellcheck disable=SC2016")
    lines.append(" \\\n    ".join([shlex.join(srun), _task_command(job)]))
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


def enroot_commands(image: ImageRef, *, squashfs_dir: str) -> list[str]:
    """The bare commands for one node (no Slurm): what the pull script runs there."""
    target = squashfs_path(squashfs_dir, image)
    return [
        f"mkdir -p -- {shlex.quote(squashfs_dir)}",
        f"enroot import --output {shlex.quote(target)} {shlex.quote('docker://' + image.ref)}",
    ]
