"""The smoke's phases on the host's GPUs: smoke, smoke-topk0, upstream, torchrun, hang."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from benchmarks.elastic.h200.host import Argv, Host, tail_file


def elastic(host: Host) -> list[object]:
    """`epstack.smoke elastic` on NPROC ranks."""
    return [host.python, "-m", "epstack.smoke", "elastic", "--gpus-per-node", str(host.nproc)]


def upstream_name(host: Host) -> str:
    """The name of the upstream phase's report and run folder."""
    return f"test_ep-{host.nproc}rank-144"


def _smoke(host: Host, phase: str, name: str, extra: Argv) -> None:
    host.note(phase)
    argv = [*elastic(host), "--timeout", "300", *extra,
            "--run-dir", host.at(f"/tmp/{name}"), "--json", host.out / f"{name}.json"]  # fmt: skip
    host.record(argv)
    console = host.at(f"/tmp/{name}.console")
    status = host.run(argv, console=console)
    tail_file(console, 30)
    host.note(f"{phase}: exit {status}")
    rank0 = host.at(f"/tmp/{name}/upstream/rank0.log")
    if rank0.is_file():
        shutil.copy(rank0, host.out / f"{name}.test_ep.log")


def smoke(host: Host) -> None:
    """ElasticBuffer(num_topk=6), the model's top-k."""
    _smoke(host, "smoke", f"smoke-{host.nproc}rank", [])


def smoke_topk0(host: Host) -> None:
    """ElasticBuffer(num_topk=0) as test_ep builds it, plus test_ep's first mode for the bandwidth ratio."""
    extra = ["--buffer-num-topk", "0", "--upstream-tests", host.at("/opt/src/DeepEP"),
             "--upstream-args=--test-first-only", "--min-bandwidth-ratio", "0.97"]  # fmt: skip
    _smoke(host, "smoke-topk0", f"smoke-{host.nproc}rank-topk0", extra)


def upstream(host: Host) -> None:
    """All of test_ep (144 modes) on its own."""
    extra = ["--upstream-only", "--upstream-tests", host.at("/opt/src/DeepEP"),
             "--upstream-timeout", host.setting("UPSTREAM_TIMEOUT", "560")]  # fmt: skip
    _smoke(host, "upstream", upstream_name(host), extra)


def torchrun(host: Host) -> None:
    """The host as 2 torchrun "nodes" of one GPU each."""
    host.note("torchrun: 2 nodes x 1 GPU")
    nodes = []
    for node in (0, 1):
        argv = [host.python, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
                "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", "29631",
                "-m", "epstack.smoke", "elastic", "--timeout", "300",
                "--run-dir", host.at(f"/tmp/smoke-node{node}"),
                "--json", host.out / "smoke-torchrun-2node.json"]  # fmt: skip
        env = host.environ({"CUDA_VISIBLE_DEVICES": str(node)})
        nodes.append(host.start(argv, env=env, console=host.at(f"/tmp/torchrun-node{node}.log")))
    host.record(["CUDA_VISIBLE_DEVICES=<node> python -m torch.distributed.run --nnodes 2 --node-rank <node>",
                 "--nproc-per-node 1 --master-addr 127.0.0.1 --master-port 29631 -m epstack.smoke elastic",
                 "--timeout 300 --json smoke-torchrun-2node.json"])  # fmt: skip
    statuses = [node.wait() for node in nodes]
    tail_file(host.at("/tmp/torchrun-node0.log"), 25)
    tail_file(host.at("/tmp/torchrun-node1.log"), 5)
    host.note(f"torchrun: node 0 exit {statuses[0]}, node 1 exit {statuses[1]}")


def workers_left(proc: Path = Path("/proc")) -> int:
    """Processes whose command line names epstack.smoke.worker (`pgrep -f`)."""
    count = 0
    for cmdline in proc.glob("[0-9]*/cmdline"):
        try:
            count += b"epstack.smoke.worker" in cmdline.read_bytes()
        except OSError:  # ended while we looked
            continue
    return count


def hang(host: Host) -> None:
    """Rank 1 hangs on entering buffer construction: the smoke must end within --timeout."""
    host.note("hang: rank 1 stops on entering buffer construction, --timeout 30")
    argv = [*elastic(host), "--timeout", "30", "--skip-bench", "--run-dir", host.at("/tmp/smoke-hang"),
            "--json", host.out / "smoke-hang.json"]  # fmt: skip
    host.record(argv, before="EPSTACK_SMOKE_HANG_STAGE=buffer EPSTACK_SMOKE_HANG_RANK=1 ")
    started = time.monotonic()
    env = host.environ({"EPSTACK_SMOKE_HANG_STAGE": "buffer", "EPSTACK_SMOKE_HANG_RANK": "1"})
    console = host.at("/tmp/hang.console")
    status = host.run(argv, env=env, console=console)
    tail_file(console, 8)
    seconds = int(time.monotonic() - started)
    host.note(f"hang: exit {status} after {seconds} s; worker processes left: {workers_left()}")
