"""The router in front of a serve job's groups: SGLang's model gateway, `smg launch`, on Kubernetes and Slurm.

SGLang 0.5.23's README names SMG (smg-project/smg; PyPI `smg`, 1.13.0 of 2026-10, the renamed
`sglang-router`, whose last release is 0.3.2 of 2026-01) for routing and load balancing. It runs from
an image by digest the site names (`--router-image`): epstack's images do not carry it. The router finds
the serving groups itself (`--service-discovery`): every leader pod of the job (node 0 of each LWS
replica, or the indexed Job's pod 0) once it is ready, at SGLang's HTTP port, and routes cache-aware.
For that it reads pods in its own namespace, which it takes from its pod (the downward API), so a
namespace set later (`kubectl apply -n`, a kustomize overlay) is the one it watches: a ServiceAccount, a
Role (pods: get, list, watch) and a RoleBinding, whose subject names the namespace (`--namespace`,
default `default`, which kustomize's namespace transformer rewrites). Its own metrics are Prometheus text on
METRICS_PORT. Clients, and the serve smoke, call the `<job>-router` Service.

On Slurm a job is one serving group: the router is a step of one task on node 0 beside the server step,
without a GPU, in its own image, told the server's URL (`--worker-urls`), or with prefill/decode roles each
role's leader's (`--pd-disaggregation --prefill URL BOOTSTRAP_PORT --decode URL`); it waits for them as
long as the serve smoke does. Node 0 serves SGLang on HTTP_PORT in the same network namespace, so the router
listens on SLURM_PORT. Every flag is one smg's own parser takes (tests/cluster/test_router_parser.py
runs smg 1.13.0's RouterArgs over both commands).
"""

from __future__ import annotations

from epstack.cluster import servesmoke
from epstack.cluster.image import ImageRef
from epstack.cluster.jobs import Job
from epstack.cluster.k8sparts import Obj, leader_selector, part_labels, pod_monitor
from epstack.smoke.serving.command import BOOTSTRAP_PORT, HTTP_PORT

PACKAGE = "smg==1.13.0"  # what --router-image must carry (its CLI is what the command is checked against)
PORT = 30000
METRICS_PORT = 29000  # smg's --prometheus-port default, written out
POLICY = "cache_aware"
# Slurm: the router's port on node 0, where SGLang already listens on HTTP_PORT.
SLURM_PORT = 8000
# The router pod: a Rust proxy; the figures of smg's own Kubernetes examples' order of magnitude.
RESOURCES: Obj = {"requests": {"cpu": 2, "memory": "4Gi"}, "limits": {"memory": "8Gi"}}


def name(job: Job) -> str:
    return f"{job.name}-router"


NAMESPACE_ENV = "POD_NAMESPACE"  # the router pod's namespace, from the downward API


def _selector(job: Job, kind: str) -> list[str]:
    return [f"{key}={value}" for key, value in leader_selector(job, kind).items()]


def command(job: Job, kind: str, role_jobs: tuple[Job, ...] = ()) -> list[str]:
    """`smg launch`, discovering the job's leader pods in its own pod's namespace; with prefill and decode
    `role_jobs` (epstack.cluster.roles), in PD mode, each role's leaders by a selector of their own."""
    found = ["--selector", *_selector(job, kind)]
    if role_jobs:
        found = ["--pd-disaggregation"]
        for role in role_jobs:
            found += [f"--{role.role}-selector", *_selector(role, kind)]
    return [
        "smg", "launch", "--host", "0.0.0.0", "--port", str(PORT), "--policy", POLICY,
        "--service-discovery", *found,
        "--service-discovery-port", str(HTTP_PORT), "--service-discovery-namespace", f"$({NAMESPACE_ENV})",
        "--prometheus-host", "0.0.0.0", "--prometheus-port", str(METRICS_PORT),
    ]  # fmt: skip


def slurm_command(job: Job, leaders: tuple[tuple[Job, str], ...] = ()) -> list[str]:
    """`smg launch` on node 0, routing to the server there; with `leaders` (each prefill and decode role
    and its leader's host), in PD mode to each role's leader, a prefill's with its bootstrap port. It
    waits for them as the serve smoke does."""
    workers = ["--worker-urls", servesmoke.url(job, "127.0.0.1")]
    if leaders:
        workers = ["--pd-disaggregation"]
        for role, host in leaders:
            workers += [f"--{role.role}", servesmoke.url(role, host)]
            workers += [str(BOOTSTRAP_PORT)] if role.role == "prefill" else []
    return [
        "smg", "launch", "--host", "0.0.0.0", "--port", str(SLURM_PORT), "--policy", POLICY, *workers,
        "--worker-startup-timeout-secs", str(servesmoke.health_timeout_s(job)),
        "--prometheus-host", "0.0.0.0", "--prometheus-port", str(METRICS_PORT),
    ]  # fmt: skip


def _rbac(job: Job, labels: dict[str, str], namespace: str) -> list[Obj]:
    """What discovery needs: read the pods of its namespace, nothing else."""
    meta = {"name": name(job), "labels": labels}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name(job)},
            "subjects": [{"kind": "ServiceAccount", "name": name(job), "namespace": namespace}],
        },
    ]


def objects(
    job: Job,
    kind: str,
    image: ImageRef,
    *,
    namespace: str,
    monitor: dict[str, str] | None,
    role_jobs: tuple[Job, ...] = (),
) -> list[Obj]:
    """ServiceAccount, Role, RoleBinding, the router's Deployment and Service; its PodMonitor when the
    job has one (`--pod-monitor`). With `role_jobs`, in front of both roles (PD mode)."""
    labels = part_labels(job, "router", name(job))
    container: Obj = {
        "name": "router",
        "image": image.ref,
        "imagePullPolicy": "IfNotPresent",
        "command": command(job, kind, role_jobs),
        "env": [{"name": NAMESPACE_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
        "ports": [
            {"name": "http", "containerPort": PORT},
            {"name": "metrics", "containerPort": METRICS_PORT},
        ],
        "readinessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 10},
        "resources": RESOURCES,
    }
    pod: Obj = {"serviceAccountName": name(job), "containers": [container]}
    deployment: Obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name(job), "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
    service: Obj = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name(job), "labels": labels},
        "spec": {"selector": labels, "ports": [{"name": "http", "port": PORT, "targetPort": PORT}]},
    }
    found = [*_rbac(job, labels, namespace), deployment, service]
    if monitor is not None:
        found.append(pod_monitor(job, f"{name(job)}-metrics", labels, "metrics", monitor))
    return found


def note(job: Job, namespace: str) -> str:
    return (
        f"Router: Deployment {name(job)} (`smg launch`, {PACKAGE} in --router-image) in front of every "
        f"serving group, found by their leader pods in its own namespace (a Role to read pods; the "
        f"RoleBinding's subject in namespace {namespace}); "
        f"clients call http://{name(job)}:{PORT}; its metrics on :{METRICS_PORT}/metrics."
    )


def slurm_note(pd: bool) -> str:
    front = "both roles' leaders (PD mode)" if pd else "the job's server"
    return (
        f"Router: `smg launch` ({PACKAGE} in --router-image), a step on node 0 without a GPU, in front of "
        f"{front}; clients call http://$MASTER_ADDR:{SLURM_PORT}; its metrics on "
        f":{METRICS_PORT}/metrics."
    )
