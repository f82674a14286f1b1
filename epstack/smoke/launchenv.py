"""The environment variables the smoke's launcher reads: one list for the launcher and the cluster jobs.

epstack.smoke.launch reads these names and nothing else to find its place in a job;
epstack.cluster's manifests and sbatch scripts set the ones a launcher leaves to the job. A test
renders every job, builds the environment each pod or task would see, and runs the launcher on it,
so the two cannot drift apart. Standard library only: GPU hosts import this bare.
"""

from __future__ import annotations

from dataclasses import dataclass

# torchrun (torch.distributed.run) and every env:// rendezvous.
RANK = "RANK"
WORLD_SIZE = "WORLD_SIZE"
LOCAL_RANK = "LOCAL_RANK"
LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"
GROUP_RANK = "GROUP_RANK"
TORCHELASTIC_RUN_ID = "TORCHELASTIC_RUN_ID"
MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"

# Slurm: srun sets these for every task.
SLURM_PROCID = "SLURM_PROCID"
SLURM_LOCALID = "SLURM_LOCALID"
SLURM_NODEID = "SLURM_NODEID"
SLURM_NTASKS = "SLURM_NTASKS"
SLURM_NTASKS_PER_NODE = "SLURM_NTASKS_PER_NODE"
SLURM_NNODES = "SLURM_NNODES"
SLURM_JOB_NUM_NODES = "SLURM_JOB_NUM_NODES"
SLURM_STEP_NODELIST = "SLURM_STEP_NODELIST"
SLURM_JOB_NODELIST = "SLURM_JOB_NODELIST"
SLURM_JOB_ID = "SLURM_JOB_ID"

# Kubernetes indexed Job: Kubernetes sets the index; the job sets the rest.
JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
EPSTACK_NNODES = "EPSTACK_NNODES"
EPSTACK_NPROC_PER_NODE = "EPSTACK_NPROC_PER_NODE"

# LeaderWorkerSet: the LWS controller adds these to every container of the group.
LWS_LEADER_ADDRESS = "LWS_LEADER_ADDRESS"
LWS_GROUP_SIZE = "LWS_GROUP_SIZE"
LWS_WORKER_INDEX = "LWS_WORKER_INDEX"


@dataclass(frozen=True, kw_only=True)
class LauncherEnv:
    """What one launcher path of the smoke reads: set by the platform, or to be set by the job."""

    platform_sets: tuple[str, ...]
    job_sets: tuple[str, ...]


LAUNCHERS: dict[str, LauncherEnv] = {
    "kubernetes": LauncherEnv(
        platform_sets=(JOB_COMPLETION_INDEX,),
        job_sets=(EPSTACK_NNODES, EPSTACK_NPROC_PER_NODE, MASTER_ADDR, MASTER_PORT),
    ),
    "leaderworkerset": LauncherEnv(
        platform_sets=(LWS_LEADER_ADDRESS, LWS_GROUP_SIZE, LWS_WORKER_INDEX),
        job_sets=(EPSTACK_NPROC_PER_NODE, MASTER_PORT),
    ),
    "slurm": LauncherEnv(
        platform_sets=(
            SLURM_PROCID,
            SLURM_LOCALID,
            SLURM_NODEID,
            SLURM_NTASKS,
            SLURM_NTASKS_PER_NODE,
            SLURM_NNODES,
            SLURM_STEP_NODELIST,
            SLURM_JOB_ID,
        ),
        job_sets=(MASTER_ADDR, MASTER_PORT),
    ),
}
