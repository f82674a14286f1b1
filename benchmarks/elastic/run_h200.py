"""The GPU run behind benchmarks/elastic/results/: on a bare GPU host (no network, no Docker), install
the stack with the project's own scripts, then run the phases named on the command line, in that order:

    bash benchmarks/elastic/run_h200.sh PHASE...     (from the repository root; --help lists the phases)

Each phase is logged with the seconds since the start (`[Ns] ...`) into $OUT/run.log (default ./out),
beside its JSON and logs. Sources come as archives in $GPU_SRC (default .gpu-src): nccl-*.tar.gz, and
the `git archive`s DeepEP-<DEEPEP_REF>.tar.gz and fmt-<DEEPEP_FMT_REF>.tar.gz the builder checks
against pins.env; epstack's own dependencies as wheels in $GPU_SRC/wheels. PYTHON (default python3)
runs every phase; NPROC (default 2) ranks for the smoke, upstream and hang phases: 1 on a one-GPU
host, 4 or 8 for EP4/EP8 hosts. Also read: WAIT_S (570) for the -wait phases, UPSTREAM_TIMEOUT
(560; 1500 detached), FERRY (/opt/ferry), SERVE_ARGS, SHARDS (8) and WARM_TIMEOUT (280) for warm.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from benchmarks.elastic.h200 import detached, install, jit, smoke
from benchmarks.elastic.h200.host import Host
from epstack.errors import BAD_INPUT, CHECK_FAILED, BadInput, EpstackError
from epstack.suggest import did_you_mean


@dataclass(frozen=True, kw_only=True)
class Phase:
    name: str
    does: str
    run: Callable[[Host], None]


PHASES = (
    Phase(name="install", run=install.install,
          does="NCCL: the ferried pinned wheel ($FERRY/nccl) over the host's pip NCCL, else built from "
               "source over it; then DeepEP with `epstack image deepep-build`; skipped when present"),
    Phase(name="first-request", run=jit.first_request,
          does="the first request's JIT toolchains (smoke, `jit probe --layer all`) in the image's "
               "CUDA_HOME, caches empty, mapped libraries recorded"),
    Phase(name="kernels-export", run=jit.kernels_export,
          does="the smoke at both model presets with an empty cache, exporting DeepEP's kernels "
               "(run with PYTHON=<the image's venv>/bin/python)"),
    Phase(name="kernels-shipped", run=jit.kernels_shipped,
          does="the export unpacked as the kernels layer does, copied by the entrypoint, both presets again"),
    Phase(name="flashinfer-shipped", run=jit.flashinfer_shipped,
          does="FlashInfer's modules shipped (`jit probe --ship`, GPU hidden), then the sampler's first call "
               "against an empty workspace"),
    Phase(name="triton-shipped", run=jit.triton_shipped,
          does="Triton's launcher built against the CUDA stub, copied by the entrypoint, then CudaUtils() "
               "against an empty cache"),
    Phase(name="stack", run=install.stack,
          does="the ferried SGLang stack ($FERRY/c) installed into /opt/sgl, its NCCL wheel set aside in "
               "$FERRY/nccl for install; later phases with PYTHONPATH=/opt/sgl"),
    Phase(name="serve-start", run=detached.serve_start,
          does="`epstack smoke serve` on the tiny profile, detached (setsid)"),
    Phase(name="serve-wait", run=detached.serve_wait,
          does="wait up to $WAIT_S s for serve-start, then copy its report and the servers' logs"),
    Phase(name="doctor", run=install.doctor, does="epstack doctor on this host (JSON)"),
    Phase(name="smoke", run=smoke.smoke,
          does="epstack smoke elastic on $NPROC ranks at test_ep's default sizes"),
    Phase(name="smoke-topk0", run=smoke.smoke_topk0,
          does="the same with ElasticBuffer(num_topk=0), + test_ep's first mode (bandwidth ratio)"),
    Phase(name="guard", run=install.guard,
          does="epstack guard --layer deepep and --layer all, pins.env with the host's torch 2.11.0"),
    Phase(name="warm", run=install.warm,
          does="fill the DeepEP JIT cache with test_ep's kernels, $SHARDS shards in parallel"),
    Phase(name="upstream", run=smoke.upstream,
          does="DeepEP's tests/elastic/test_ep.py, all 144 modes ($UPSTREAM_TIMEOUT s)"),
    Phase(name="upstream-start", run=detached.upstream_start,
          does="the upstream phase detached (setsid), so it can outlast this device call"),
    Phase(name="upstream-wait", run=detached.upstream_wait,
          does="wait up to $WAIT_S s for upstream-start, then copy its results"),
    Phase(name="torchrun", run=smoke.torchrun, does='the host as 2 torchrun "nodes" of one GPU each'),
    Phase(name="hang", run=smoke.hang,
          does="rank 1 hangs on entering buffer construction; the smoke must end within --timeout"),
)  # fmt: skip
BY_NAME = {phase.name: phase for phase in PHASES}


def phases(argv: Sequence[str]) -> list[Phase]:
    """The phases argv names, in its order; an unknown name is BadInput, before any phase runs."""
    for name in argv:
        if name not in BY_NAME:
            near = did_you_mean(name, BY_NAME)
            raise BadInput(
                f"run_h200.sh: unknown phase {name!r}{f' ({near})' if near else ''}; "
                f"fix: name phases from {', '.join(BY_NAME)}"
            )
    return [BY_NAME[name] for name in argv]


def usage() -> str:
    width = max(len(name) for name in BY_NAME)
    return __doc__ + "\nPhases:\n" + "\n".join(f"  {p.name:<{width}}  {p.does}" for p in PHASES)


def main(argv: Sequence[str], host: Host | None = None) -> int:
    """Run the named phases; 2 for an unknown one (nothing run), 1 when a phase stopped on an error."""
    if {"-h", "--help"} & set(argv):
        print(usage())
        return 0
    try:
        chosen = phases(argv)
        host = host or Host.from_environment(os.environ)
    except BadInput as error:
        print(error, file=sys.stderr)
        return BAD_INPUT
    host.out.mkdir(parents=True, exist_ok=True)
    status = 0
    for phase in chosen:
        try:
            phase.run(host)
        except (EpstackError, OSError) as error:  # as the shell script did: noted, and on to the next
            host.note(f"{phase.name}: stopped: {error}")
            status = CHECK_FAILED
    host.note("all phases done")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
