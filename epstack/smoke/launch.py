"""Who am I in the job: the launcher's environment turned into one frozen value. Pure, no torch.

Order: torchrun (it sets RANK/WORLD_SIZE/LOCAL_RANK), then Slurm (SLURM_PROCID), then a
Kubernetes indexed Job (JOB_COMPLETION_INDEX), else no launcher (`--nproc-per-node N`: the smoke
starts the ranks itself). Under a launcher, each started process supervises `nproc` ranks
(1 unless --nproc-per-node asks one task per node to start several).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from epstack.errors import BadInput

DEFAULT_PORT = 29500


@dataclass(frozen=True, kw_only=True)
class RankSpec:
    rank: int
    local_rank: int


@dataclass(frozen=True, kw_only=True)
class Launch:
    launcher: str  # torchrun | slurm | kubernetes | none
    rank: int  # global rank of the first rank this process starts
    local_rank: int  # its device index on this node
    nproc: int  # ranks this process starts
    local_world_size: int  # ranks on this node
    world_size: int
    node_rank: int
    nnodes: int
    master_addr: str
    master_port: int

    def ranks(self) -> list[RankSpec]:
        return [RankSpec(rank=self.rank + i, local_rank=self.local_rank + i) for i in range(self.nproc)]

    def rank_env(self, spec: RankSpec) -> dict[str, str]:
        """The torch.distributed env:// variables for one rank."""
        return {
            "RANK": str(spec.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(spec.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "NODE_RANK": str(self.node_rank),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
        }


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    value = env.get(name)
    if value is None or value == "":
        if default is None:
            raise BadInput(f"{name} is not set; the launcher should set it")
        return default
    try:
        return int(value)
    except ValueError:
        raise BadInput(f"{name}={value!r} is not an integer") from None


def first_host(nodelist: str) -> str:
    """First host of a Slurm hostlist: 'gpu-[07-09,12],cpu1' -> 'gpu-07'."""
    head = re.match(r"([^,\[]+)(\[([^\]]+)\])?", nodelist.strip())
    if not head or not head.group(1):
        raise BadInput(f"cannot read a host from the Slurm node list {nodelist!r}")
    prefix, ranges = head.group(1), head.group(3)
    if ranges is None:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def _check(launch: Launch) -> Launch:
    if launch.world_size < 1 or not 0 <= launch.rank < launch.world_size:
        raise BadInput(f"rank {launch.rank} is outside world size {launch.world_size}")
    if launch.rank + launch.nproc > launch.world_size:
        raise BadInput(
            f"ranks {launch.rank}..{launch.rank + launch.nproc - 1} exceed world size {launch.world_size}"
        )
    if not 0 < launch.master_port < 65536:
        raise BadInput(f"master port {launch.master_port} is not a TCP port")
    return launch


def detect(
    env: Mapping[str, str],
    *,
    nproc_per_node: int | None = None,
    nnodes: int | None = None,
    node_rank: int | None = None,
    master_addr: str | None = None,
    master_port: int | None = None,
    free_port: Callable[[], int] = lambda: DEFAULT_PORT,
) -> Launch:
    """The launch this process is part of. Flags win over the environment where both exist."""
    if "TORCHELASTIC_RUN_ID" in env or all(k in env for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        if nproc_per_node not in (None, 1):
            raise BadInput(
                "torchrun already started one process per rank; drop --nproc-per-node "
                "(give it to torchrun instead)"
            )
        world = _int(env, "WORLD_SIZE")
        local_world = _int(env, "LOCAL_WORLD_SIZE", 1)
        return _check(
            Launch(
                launcher="torchrun",
                rank=_int(env, "RANK"),
                local_rank=_int(env, "LOCAL_RANK"),
                nproc=1,
                local_world_size=local_world,
                world_size=world,
                node_rank=_int(env, "GROUP_RANK", _int(env, "RANK") // max(local_world, 1)),
                nnodes=max(world // max(local_world, 1), 1),
                master_addr=master_addr or env.get("MASTER_ADDR") or "127.0.0.1",
                master_port=master_port or _int(env, "MASTER_PORT", DEFAULT_PORT),
            )
        )
    if "SLURM_PROCID" in env:
        per_task = nproc_per_node or 1
        ntasks = _int(env, "SLURM_NTASKS")
        nodes = _int(env, "SLURM_NNODES", _int(env, "SLURM_JOB_NUM_NODES", 1))
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or ""
        addr = master_addr or env.get("MASTER_ADDR") or (first_host(nodelist) if nodelist else "")
        if not addr:
            raise BadInput(
                "Slurm: no master address; set MASTER_ADDR or --master-addr (SLURM_STEP_NODELIST is empty)"
            )
        job_port = 20000 + _int(env, "SLURM_JOB_ID", 0) % 20000
        tasks_on_node = _int(env, "SLURM_NTASKS_PER_NODE", max(ntasks // max(nodes, 1), 1))
        return _check(
            Launch(
                launcher="slurm",
                rank=_int(env, "SLURM_PROCID") * per_task,
                local_rank=_int(env, "SLURM_LOCALID", 0) * per_task,
                nproc=per_task,
                local_world_size=tasks_on_node * per_task,
                world_size=ntasks * per_task,
                node_rank=_int(env, "SLURM_NODEID", 0),
                nnodes=nodes,
                master_addr=addr,
                master_port=master_port or _int(env, "MASTER_PORT", job_port),
            )
        )
    if "JOB_COMPLETION_INDEX" in env:
        index = _int(env, "JOB_COMPLETION_INDEX")
        per_pod = nproc_per_node or _int(env, "EPSTACK_NPROC_PER_NODE", 1)
        pods = nnodes or _int(env, "EPSTACK_NNODES", 0)
        if pods < 1:
            raise BadInput(
                "Kubernetes indexed Job: pass --nnodes (or set EPSTACK_NNODES) to the Job's completions count"
            )
        addr = master_addr or env.get("MASTER_ADDR", "")
        if not addr:
            raise BadInput(
                "Kubernetes indexed Job: set MASTER_ADDR (or --master-addr) to index 0's address "
                "through the headless service, e.g. <job>-0.<service>"
            )
        if index >= pods:
            raise BadInput(f"JOB_COMPLETION_INDEX={index} but only {pods} nodes (--nnodes)")
        return _check(
            Launch(
                launcher="kubernetes",
                rank=index * per_pod,
                local_rank=0,
                nproc=per_pod,
                local_world_size=per_pod,
                world_size=pods * per_pod,
                node_rank=index,
                nnodes=pods,
                master_addr=addr,
                master_port=master_port or _int(env, "MASTER_PORT", DEFAULT_PORT),
            )
        )
    if nproc_per_node is None:
        raise BadInput(
            "no launcher found (torchrun, Slurm or a Kubernetes indexed Job); "
            "pass --nproc-per-node N to start N ranks here"
        )
    if nproc_per_node < 1:
        raise BadInput("--nproc-per-node must be >= 1")
    nodes = nnodes or 1
    this_node = node_rank or 0
    if not 0 <= this_node < nodes:
        raise BadInput(f"--node-rank {this_node} is outside --nnodes {nodes}")
    if nodes > 1 and not master_addr:
        raise BadInput("--nnodes > 1 needs --master-addr (node 0's address)")
    return _check(
        Launch(
            launcher="none",
            rank=this_node * nproc_per_node,
            local_rank=0,
            nproc=nproc_per_node,
            local_world_size=nproc_per_node,
            world_size=nodes * nproc_per_node,
            node_rank=this_node,
            nnodes=nodes,
            master_addr=master_addr or "127.0.0.1",
            master_port=master_port or (free_port() if nodes == 1 else DEFAULT_PORT),
        )
    )
