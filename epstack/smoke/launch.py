"""Who am I in the job: the launcher's environment turned into one frozen value. Pure, no torch.

Order: torchrun (it sets RANK/WORLD_SIZE/LOCAL_RANK), then Slurm (SLURM_PROCID), then a
LeaderWorkerSet (LWS_WORKER_INDEX), then a Kubernetes indexed Job (JOB_COMPLETION_INDEX), else no
launcher (`--gpus-per-node N`: the smoke starts the ranks itself). Under a launcher, each started
process supervises `nproc` ranks (1 unless --gpus-per-node asks one task per node to start several).
Every variable name comes from epstack.smoke.launchenv, which the cluster jobs use too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from epstack.errors import BadInput
from epstack.smoke import launchenv as V

DEFAULT_PORT = 29500


@dataclass(frozen=True, kw_only=True)
class RankSpec:
    rank: int
    local_rank: int


@dataclass(frozen=True, kw_only=True)
class Launch:
    launcher: str  # torchrun | slurm | leaderworkerset | kubernetes | none
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
            V.RANK: str(spec.rank),
            V.WORLD_SIZE: str(self.world_size),
            V.LOCAL_RANK: str(spec.local_rank),
            V.LOCAL_WORLD_SIZE: str(self.local_world_size),
            "NODE_RANK": str(self.node_rank),
            V.MASTER_ADDR: self.master_addr,
            V.MASTER_PORT: str(self.master_port),
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


@dataclass(frozen=True, kw_only=True)
class _Flags:
    """The command line's launch flags; each wins over the environment where both exist."""

    nproc_per_node: int | None
    nnodes: int | None
    node_rank: int | None
    master_addr: str | None
    master_port: int | None


def _torchrun(env: Mapping[str, str], flags: _Flags) -> Launch:
    if flags.nproc_per_node not in (None, 1):
        raise BadInput(
            "torchrun already started one process per rank; drop --gpus-per-node "
            "(give it to torchrun instead)"
        )
    world = _int(env, V.WORLD_SIZE)
    local_world = _int(env, V.LOCAL_WORLD_SIZE, 1)
    return Launch(
        launcher="torchrun",
        rank=_int(env, V.RANK),
        local_rank=_int(env, V.LOCAL_RANK),
        nproc=1,
        local_world_size=local_world,
        world_size=world,
        node_rank=_int(env, V.GROUP_RANK, _int(env, V.RANK) // max(local_world, 1)),
        nnodes=max(world // max(local_world, 1), 1),
        master_addr=flags.master_addr or env.get(V.MASTER_ADDR) or "127.0.0.1",
        master_port=flags.master_port or _int(env, V.MASTER_PORT, DEFAULT_PORT),
    )


def _slurm(env: Mapping[str, str], flags: _Flags) -> Launch:
    per_task = flags.nproc_per_node or 1
    ntasks = _int(env, V.SLURM_NTASKS)
    nodes = _int(env, V.SLURM_NNODES, _int(env, V.SLURM_JOB_NUM_NODES, 1))
    nodelist = env.get(V.SLURM_STEP_NODELIST) or env.get(V.SLURM_JOB_NODELIST) or ""
    addr = flags.master_addr or env.get(V.MASTER_ADDR) or (first_host(nodelist) if nodelist else "")
    if not addr:
        raise BadInput(
            "Slurm: no master address; set MASTER_ADDR or --master-addr (SLURM_STEP_NODELIST is empty)"
        )
    job_port = 20000 + _int(env, V.SLURM_JOB_ID, 0) % 20000
    tasks_on_node = _int(env, V.SLURM_NTASKS_PER_NODE, max(ntasks // max(nodes, 1), 1))
    return Launch(
        launcher="slurm",
        rank=_int(env, V.SLURM_PROCID) * per_task,
        local_rank=_int(env, V.SLURM_LOCALID, 0) * per_task,
        nproc=per_task,
        local_world_size=tasks_on_node * per_task,
        world_size=ntasks * per_task,
        node_rank=_int(env, V.SLURM_NODEID, 0),
        nnodes=nodes,
        master_addr=addr,
        master_port=flags.master_port or _int(env, V.MASTER_PORT, job_port),
    )


def _pod(launcher: str, *, index: int, pods: int, per_pod: int, addr: str, port: int) -> Launch:
    """One pod of `pods`, each starting `per_pod` ranks on its own devices."""
    return Launch(
        launcher=launcher,
        rank=index * per_pod,
        local_rank=0,
        nproc=per_pod,
        local_world_size=per_pod,
        world_size=pods * per_pod,
        node_rank=index,
        nnodes=pods,
        master_addr=addr,
        master_port=port,
    )


def _leaderworkerset(env: Mapping[str, str], flags: _Flags) -> Launch:
    """One LeaderWorkerSet group: the controller sets the pod's index, the group size and the leader's
    address; EPSTACK_NPROC_PER_NODE (or --gpus-per-node) says how many ranks each pod starts."""
    index = _int(env, V.LWS_WORKER_INDEX)
    pods = flags.nnodes or _int(env, V.LWS_GROUP_SIZE)
    per_pod = flags.nproc_per_node or _int(env, V.EPSTACK_NPROC_PER_NODE, 1)
    addr = flags.master_addr or env.get(V.MASTER_ADDR) or env.get(V.LWS_LEADER_ADDRESS, "")
    if not addr:
        raise BadInput(f"LeaderWorkerSet: {V.LWS_LEADER_ADDRESS} is empty; set --master-addr")
    if index >= pods:
        raise BadInput(f"{V.LWS_WORKER_INDEX}={index} but the group has {pods} pods")
    port = flags.master_port or _int(env, V.MASTER_PORT, DEFAULT_PORT)
    return _pod("leaderworkerset", index=index, pods=pods, per_pod=per_pod, addr=addr, port=port)


def _indexed_job(env: Mapping[str, str], flags: _Flags) -> Launch:
    index = _int(env, V.JOB_COMPLETION_INDEX)
    per_pod = flags.nproc_per_node or _int(env, V.EPSTACK_NPROC_PER_NODE, 1)
    pods = flags.nnodes or _int(env, V.EPSTACK_NNODES, 0)
    if pods < 1:
        raise BadInput(
            "Kubernetes indexed Job: pass --nodes (or set EPSTACK_NNODES) to the Job's completions count"
        )
    addr = flags.master_addr or env.get(V.MASTER_ADDR, "")
    if not addr:
        raise BadInput(
            "Kubernetes indexed Job: set MASTER_ADDR (or --master-addr) to index 0's address "
            "through the headless service, e.g. <job>-0.<service>"
        )
    if index >= pods:
        raise BadInput(f"JOB_COMPLETION_INDEX={index} but only {pods} nodes (--nodes)")
    port = flags.master_port or _int(env, V.MASTER_PORT, DEFAULT_PORT)
    return _pod("kubernetes", index=index, pods=pods, per_pod=per_pod, addr=addr, port=port)


def _no_launcher(flags: _Flags, free_port: Callable[[], int]) -> Launch:
    nproc = flags.nproc_per_node
    if nproc is None:
        raise BadInput(
            "no launcher found (torchrun, Slurm, a LeaderWorkerSet or a Kubernetes indexed Job); "
            "pass --gpus-per-node N to start N ranks here"
        )
    if nproc < 1:
        raise BadInput("--gpus-per-node must be >= 1")
    nodes = flags.nnodes or 1
    this_node = flags.node_rank or 0
    if not 0 <= this_node < nodes:
        raise BadInput(f"--node-rank {this_node} is outside --nodes {nodes}")
    if nodes > 1 and not flags.master_addr:
        raise BadInput("--nodes > 1 needs --master-addr (node 0's address)")
    port = flags.master_port or (free_port() if nodes == 1 else DEFAULT_PORT)
    return Launch(
        launcher="none",
        rank=this_node * nproc,
        local_rank=0,
        nproc=nproc,
        local_world_size=nproc,
        world_size=nodes * nproc,
        node_rank=this_node,
        nnodes=nodes,
        master_addr=flags.master_addr or "127.0.0.1",
        master_port=port,
    )


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
    flags = _Flags(
        nproc_per_node=nproc_per_node,
        nnodes=nnodes,
        node_rank=node_rank,
        master_addr=master_addr,
        master_port=master_port,
    )
    if V.TORCHELASTIC_RUN_ID in env or all(k in env for k in (V.RANK, V.WORLD_SIZE, V.LOCAL_RANK)):
        return _check(_torchrun(env, flags))
    if V.SLURM_PROCID in env:
        return _check(_slurm(env, flags))
    if V.LWS_WORKER_INDEX in env:
        return _check(_leaderworkerset(env, flags))
    if V.JOB_COMPLETION_INDEX in env:
        return _check(_indexed_job(env, flags))
    return _check(_no_launcher(flags, free_port))
