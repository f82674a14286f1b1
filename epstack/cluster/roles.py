"""Prefill/decode roles (`--disaggregation`): one serve job as a prefill and a decode role, each of
`--nodes` nodes (Kubernetes: a LeaderWorkerSet each; Slurm: below), behind SGLang's router in PD mode.

SGLang 0.5.23 takes `--disaggregation-mode prefill|decode` with `--moe-a2a-backend deepep_v2` (its
parser, tests/cluster/test_sglang_parser.py), but its servers then move the KV cache from prefill to
decode through a transfer engine, mooncake or nixl, which is a package of its own. So the roles are
rendered only when the image's sglang lock carries one; otherwise the request is refused, naming the
missing pin and the fix. The shipped lock (locks/sglang.txt) carries NIXL (pins.env NIXL_VERSION).

On Kubernetes the router finds each role's leader pods itself (`--pd-disaggregation` with a selector per
role) and reads a prefill pod's bootstrap port from its BOOTSTRAP_ANNOTATION; the serve smoke calls the
router.

On Slurm one job holds both roles: `--nodes` each, prefill on the allocation's first nodes, decode on the
next (first_node), each role an srun step over its own nodes whose leader's host the batch script reads
into leader_variable; the router is told each leader's URL (epstack.cluster.slurmserve).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from packaging.utils import canonicalize_name

from epstack.cluster.jobs import Job
from epstack.errors import BadInput
from epstack.python.lockfile import lock_path, read_lock
from epstack.smoke.serving.command import BOOTSTRAP_PORT
from epstack.smoke.serving.profiles import Role
from epstack.stack import NIXL, cuda_flavours

ROLES: tuple[Role, ...] = ("prefill", "decode")
# Each engine SGLang 0.5.23's --disaggregation-transfer-backend names, and the distributions that carry
# it (PyPI: mooncake-transfer-engine and its CUDA 13 / EFA builds; nixl and its CUDA builds).
TRANSFER_ENGINES: dict[str, tuple[str, ...]] = {
    "mooncake": (
        "mooncake-transfer-engine",
        "mooncake-transfer-engine-cuda13",
        "mooncake-transfer-engine-efa",
        "mooncake-transfer-engine-efa-cuda13",
    ),
    NIXL: (NIXL, *cuda_flavours(NIXL)),
}
LOCK = "sglang"  # the layer whose Python environment SGLang's servers run in
# smg's default --bootstrap-port-annotation: where the router reads a prefill pod's bootstrap port.
BOOTSTRAP_ANNOTATION = "sglang.ai/bootstrap-port"


def transfer_engine(locks: Path) -> str:
    """The transfer engine the sglang lock in `locks` carries; BadInput when it carries none."""
    lock = read_lock(locks, LOCK)
    held = {package.name for package in lock.resolution.packages} if lock else set()
    for engine, distributions in TRANSFER_ENGINES.items():
        if held & {canonicalize_name(name) for name in distributions}:
            return engine
    path = lock_path(locks, LOCK)
    raise BadInput(
        f"--disaggregation: SGLang's prefill and decode servers move the KV cache through a transfer "
        f"engine, and {path} pins none ({TRANSFER_ENGINES['mooncake'][0]} or {TRANSFER_ENGINES['nixl'][0]}); "
        "fix: pass the --locks of an image whose sglang layer carries one (NIXL_VERSION in pins.env, then "
        "epstack pins lock; docs/guides/clusters.md#prefill-and-decode-roles), or drop --disaggregation"
    )


def role_jobs(job: Job, *, target: str, kind: str, router: bool, locks: Path) -> tuple[Job, ...]:
    """The job's prefill and decode servers: the same plan, each with its role and the engine the lock
    carries; on Kubernetes (`target` k8s) each an LWS (`kind`). BadInput for what the roles need and the
    request lacks, the transfer engine first among the things a flag cannot fix."""
    plan = job.serve
    if plan is None:
        raise BadInput("--disaggregation: roles are a serve job's; fix: use it with --job serve")
    if plan.a2a != "deepep_v2":
        raise BadInput("--disaggregation: the roles run DeepEP V2; fix: --a2a deepep_v2")
    engine = transfer_engine(locks)
    if target == "k8s" and kind != "lws":
        raise BadInput("--disaggregation: each role is a LeaderWorkerSet; fix: --k8s-kind lws")
    if not router:
        raise BadInput(
            "--disaggregation: clients need the router in PD mode in front of both roles; fix: add "
            "--router-image"
        )
    return tuple(replace(job, serve=replace(plan, role=role, transfer_engine=engine)) for role in ROLES)


def pod_annotations(job: Job) -> dict[str, str]:
    """A prefill pod's bootstrap port, for the router."""
    return {BOOTSTRAP_ANNOTATION: str(BOOTSTRAP_PORT)} if job.role == "prefill" else {}


def first_node(role: Job) -> int:
    """Slurm: the role's first node in the job's allocation (0-based): prefill first, then decode."""
    return ROLES.index(role.role) * role.nodes


def leader_variable(role: Job) -> str:
    """Slurm: the batch script's variable holding the role's leader's host (its first node)."""
    return f"{role.role.upper()}_ADDR"


def note(role: Job, unit: str = "a LeaderWorkerSet") -> str:
    """What the roles are, for the manifests' or the script's head; each role is a `unit`."""
    engine = role.serve.transfer_engine if role.serve else ""
    return (
        f"Prefill/decode roles (--disaggregation): {unit} each of {role.nodes} node(s), the KV "
        f"cache moved by {engine} (prefill bootstrap port {BOOTSTRAP_PORT}); the router sends each request "
        "through both."
    )
