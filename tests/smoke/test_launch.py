"""Launcher detection: torchrun, Slurm, Kubernetes indexed Jobs and none, from real variable sets."""

from __future__ import annotations

import pytest

from epstack.errors import BadInput
from epstack.smoke.launch import RankSpec, detect, first_host

# What torchrun 2.x sets for the second process of node 1 in `--nnodes 2 --nproc-per-node 4`.
TORCHRUN = {
    "RANK": "5",
    "WORLD_SIZE": "8",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "node-a",
    "MASTER_PORT": "29400",
    "TORCHELASTIC_RUN_ID": "none",
    "TORCHELASTIC_USE_AGENT_STORE": "True",
}
# srun -N 2 --ntasks-per-node 8: task 11 (node 1, local 3).
SLURM = {
    "SLURM_PROCID": "11",
    "SLURM_NTASKS": "16",
    "SLURM_LOCALID": "3",
    "SLURM_NODEID": "1",
    "SLURM_NNODES": "2",
    "SLURM_JOB_ID": "123456",
    "SLURM_STEP_NODELIST": "gpu-[07-08]",
    "SLURM_NTASKS_PER_NODE": "8",
}


def test_torchrun() -> None:
    launch = detect(TORCHRUN)
    assert (launch.launcher, launch.rank, launch.local_rank, launch.world_size) == ("torchrun", 5, 1, 8)
    assert (launch.node_rank, launch.nnodes, launch.nproc) == (1, 2, 1)
    assert (launch.master_addr, launch.master_port) == ("node-a", 29400)
    assert launch.ranks() == [RankSpec(rank=5, local_rank=1)]
    assert launch.rank_env(launch.ranks()[0])["RANK"] == "5"


def test_torchrun_refuses_a_second_spawner() -> None:
    with pytest.raises(BadInput, match="drop --gpus-per-node"):
        detect(TORCHRUN, nproc_per_node=4)


def test_slurm_one_task_per_gpu() -> None:
    launch = detect(SLURM)
    assert (launch.launcher, launch.rank, launch.local_rank, launch.world_size) == ("slurm", 11, 3, 16)
    assert (launch.node_rank, launch.nnodes, launch.local_world_size) == (1, 2, 8)
    assert launch.master_addr == "gpu-07"
    assert launch.master_port == 20000 + 123456 % 20000


def test_slurm_one_task_per_node_starting_eight() -> None:
    env = SLURM | {
        "SLURM_PROCID": "1",
        "SLURM_NTASKS": "2",
        "SLURM_LOCALID": "0",
        "SLURM_NTASKS_PER_NODE": "1",
        "MASTER_ADDR": "10.0.0.1",
    }
    launch = detect(env, nproc_per_node=8)
    assert [s.rank for s in launch.ranks()] == list(range(8, 16))
    assert [s.local_rank for s in launch.ranks()] == list(range(8))
    assert (launch.world_size, launch.master_addr) == (16, "10.0.0.1")


@pytest.mark.parametrize(
    ("nodelist", "host"),
    [
        ("gpu-[07-09,12],cpu1", "gpu-07"),
        ("node1,node2", "node1"),
        ("a[3]", "a3"),
        ("p5-dy-[100-101]", "p5-dy-100"),
    ],
)
def test_first_host(nodelist: str, host: str) -> None:
    assert first_host(nodelist) == host


def test_kubernetes_indexed_job() -> None:
    env = {"JOB_COMPLETION_INDEX": "3", "MASTER_ADDR": "ep-0.ep-headless", "EPSTACK_NNODES": "4"}
    launch = detect(env, nproc_per_node=8)
    assert (launch.launcher, launch.rank, launch.world_size, launch.node_rank) == ("kubernetes", 24, 32, 3)
    assert [s.local_rank for s in launch.ranks()] == list(range(8))
    assert launch.master_addr == "ep-0.ep-headless"


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"JOB_COMPLETION_INDEX": "0", "MASTER_ADDR": "x"}, "--nodes"),
        ({"JOB_COMPLETION_INDEX": "0", "EPSTACK_NNODES": "2"}, "headless service"),
        ({"JOB_COMPLETION_INDEX": "2", "EPSTACK_NNODES": "2", "MASTER_ADDR": "x"}, "only 2"),
        ({"SLURM_PROCID": "x", "SLURM_NTASKS": "2", "MASTER_ADDR": "h"}, "SLURM_PROCID='x'"),
        ({"RANK": "4", "WORLD_SIZE": "4", "LOCAL_RANK": "0"}, "outside world size"),
    ],
)
def test_bad_environments_name_the_variable(env: dict[str, str], match: str) -> None:
    with pytest.raises(BadInput, match=match):
        detect(env)


def test_no_launcher() -> None:
    with pytest.raises(BadInput, match="--gpus-per-node"):
        detect({})
    launch = detect({}, nproc_per_node=2, free_port=lambda: 40001)
    assert (launch.launcher, launch.world_size, launch.master_port) == ("none", 2, 40001)
    assert [s.rank for s in launch.ranks()] == [0, 1]
    two = detect({}, nproc_per_node=2, nnodes=2, node_rank=1, master_addr="10.1.1.1")
    assert [s.rank for s in two.ranks()] == [2, 3]
    with pytest.raises(BadInput, match="--master-addr"):
        detect({}, nproc_per_node=2, nnodes=2, node_rank=1)


# What the LeaderWorkerSet controller sets in pod 1 of a group of 2, plus the job's own variable.
LWS = {
    "LWS_LEADER_ADDRESS": "smoke-0.smoke.default",
    "LWS_GROUP_SIZE": "2",
    "LWS_WORKER_INDEX": "1",
    "EPSTACK_NPROC_PER_NODE": "8",
}


def test_leaderworkerset_pod_starts_its_ranks() -> None:
    launch = detect(LWS)
    assert (launch.launcher, launch.node_rank, launch.nnodes, launch.world_size) == (
        "leaderworkerset",
        1,
        2,
        16,
    )
    assert [s.rank for s in launch.ranks()] == list(range(8, 16))
    assert (launch.master_addr, launch.master_port) == ("smoke-0.smoke.default", 29500)


def test_leaderworkerset_index_outside_the_group() -> None:
    with pytest.raises(BadInput, match="LWS_WORKER_INDEX=2 but the group has 2 pods"):
        detect(LWS | {"LWS_WORKER_INDEX": "2"})
