"""Kubernetes objects for a Job: a LeaderWorkerSet, or an indexed Job with a headless Service; and the
pre-pull DaemonSet. Plain dicts, in a fixed key order, written out by yamltext.

Every pod: the image by digest, nvidia.com/gpu, /dev/shm as a memory emptyDir, IPC_LOCK (DeepEP and
NCCL pin memory; Kubernetes has no memlock setting, the capability lifts the limit), and, when the job
crosses nodes, the fabric's device resource, its huge pages and its environment. The launcher
variables come from epstack.smoke.launchenv, the fabric facts from epstack.fabric.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from epstack.cluster.image import ImageRef
from epstack.cluster.jobs import Job
from epstack.smoke import launchenv as V

Obj = dict[str, Any]
K8S_VERSION = "1.34"  # the Kubernetes version the manifests are validated against (kubernetes-validate)
LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
JOB_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"  # Kubernetes >= 1.28 labels indexed pods


@dataclass(frozen=True, kw_only=True)
class PodSettings:
    shm_size: str = "64Gi"
    memory: str = "256Gi"  # a memory request: Kubernetes requires one beside huge pages
    rdma_resource: str = ""  # overrides the fabric's device plugin resource


def _literal(text: str) -> str:
    """Text Kubernetes passes as written: it expands $(VAR) in args and reads $$ as $."""
    return text.replace("$", "$$")


def _labels(job: Job) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "epstack",
        "app.kubernetes.io/component": job.kind,
        "epstack.io/job": job.name,
        "epstack.io/image-digest": job.image.short,
    }


def _env(pairs: dict[str, str]) -> list[Obj]:
    return [{"name": key, "value": value} for key, value in pairs.items()]


def _resources(job: Job, settings: PodSettings) -> Obj:
    limits: dict[str, Any] = {"nvidia.com/gpu": job.gpus_per_node}
    if job.crosses_nodes:
        limits[settings.rdma_resource or job.fabric.k8s_resource] = job.fabric_devices
        if job.fabric.hugepages_2mi:
            limits["hugepages-2Mi"] = job.fabric.hugepages_2mi
    return {"limits": limits, "requests": {"memory": settings.memory, **limits}}


def _readiness(job: Job, *, every_pod: bool) -> Obj | None:
    """Serve: /health on node 0. A template shared by all indexed pods asks only pod 0."""
    if job.http_port is None:
        return None
    if not every_pod:
        return {
            "httpGet": {"path": job.health_path, "port": job.http_port},
            "periodSeconds": 10,
            "failureThreshold": 3,
        }
    url = f"http://127.0.0.1:{job.http_port}{job.health_path}"
    script = f'[ "${V.JOB_COMPLETION_INDEX}" != 0 ] || curl -fsS -o /dev/null {url}'
    return {"exec": {"command": ["/bin/sh", "-c", script]}, "periodSeconds": 10, "failureThreshold": 3}


def _container(
    job: Job, args: list[str], env: dict[str, str], settings: PodSettings, probe: Obj | None
) -> Obj:
    container: Obj = {
        "name": job.kind,
        "image": job.image.ref,
        "imagePullPolicy": "IfNotPresent",
        # args only: the image's entrypoint runs `epstack guard` before the command.
        "args": args,
        "env": _env(env),
        "resources": _resources(job, settings),
        "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if job.http_port is not None:
        container["ports"] = [{"name": "http", "containerPort": job.http_port}]
    if probe is not None:
        container["readinessProbe"] = probe
    return container


def _pod_spec(container: Obj, settings: PodSettings, **extra: Any) -> Obj:
    return {
        **extra,
        "containers": [container],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size}}],
    }


def _service(name: str, job: Job, selector: dict[str, str], *, headless: bool, port: int) -> Obj:
    spec: Obj = {"selector": selector, "ports": [{"name": "port", "port": port, "targetPort": port}]}
    if headless:
        spec = {"clusterIP": "None", "publishNotReadyAddresses": True, **spec}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": _labels(job)},
        "spec": spec,
    }


def indexed_job(job: Job, settings: PodSettings) -> list[Obj]:
    """Headless Service (pod DNS <job>-<index>.<service>) + indexed Job; serve adds a Service on pod 0."""
    service = job.name
    leader = f"{job.name}-0.{service}"
    env = job.env()
    if job.kind == "elastic-smoke":
        env |= {
            V.EPSTACK_NNODES: str(job.nodes),
            V.EPSTACK_NPROC_PER_NODE: str(job.gpus_per_node),
            V.MASTER_ADDR: leader,
            V.MASTER_PORT: str(job.rendezvous_port),
        }
    args = job.words(_literal, node_rank=f"$({V.JOB_COMPLETION_INDEX})", leader=leader)
    container = _container(job, args, env, settings, _readiness(job, every_pod=True))
    pod = _pod_spec(container, settings, restartPolicy="Never", subdomain=service)
    objects = [
        _service(service, job, {"epstack.io/job": job.name}, headless=True, port=job.rendezvous_port),
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": job.name, "labels": _labels(job)},
            "spec": {
                "completionMode": "Indexed",
                "completions": job.nodes,
                "parallelism": job.nodes,
                "backoffLimit": 0,
                "template": {"metadata": {"labels": _labels(job)}, "spec": pod},
            },
        },
    ]
    if job.http_port is not None:
        selector = {"epstack.io/job": job.name, JOB_INDEX_LABEL: "0"}
        objects.append(_service(f"{job.name}-http", job, selector, headless=False, port=job.http_port))
    return objects


def leader_worker_set(job: Job, settings: PodSettings) -> list[Obj]:
    """One LWS group of `nodes` pods: the controller sets LWS_* in every container."""
    env = job.env()
    if job.kind == "elastic-smoke":
        env |= {V.EPSTACK_NPROC_PER_NODE: str(job.gpus_per_node), V.MASTER_PORT: str(job.rendezvous_port)}
    args = job.words(_literal, node_rank=f"$({V.LWS_WORKER_INDEX})", leader=f"$({V.LWS_LEADER_ADDRESS})")
    leader = _container(job, args, env, settings, _readiness(job, every_pod=False))
    worker = _container(job, args, env, settings, None)
    template: Obj = {
        "size": job.nodes,
        "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": {"metadata": {"labels": _labels(job)}, "spec": _pod_spec(leader, settings)},
        "workerTemplate": {"metadata": {"labels": _labels(job)}, "spec": _pod_spec(worker, settings)},
    }
    objects: list[Obj] = [
        {
            "apiVersion": LWS_API,
            "kind": "LeaderWorkerSet",
            "metadata": {"name": job.name, "labels": _labels(job)},
            "spec": {"replicas": 1, "startupPolicy": "LeaderCreated", "leaderWorkerTemplate": template},
        }
    ]
    if job.http_port is not None:
        selector = {"epstack.io/job": job.name, LWS_WORKER_INDEX_LABEL: "0"}
        objects.append(_service(f"{job.name}-http", job, selector, headless=False, port=job.http_port))
    return objects


def job_objects(job: Job, settings: PodSettings, kind: str | None = None) -> list[Obj]:
    """The job as a LeaderWorkerSet ("lws") or an indexed Job ("job"); default lws for serve."""
    kind = kind or ("lws" if job.kind == "serve" else "job")
    return (leader_worker_set if kind == "lws" else indexed_job)(job, settings)


def prepull_daemonset(image: ImageRef, *, node_selector: dict[str, str] | None = None) -> Obj:
    """Pulls the image onto every (selected) node once, before the first job: an init container that
    exits at once, then the same image sleeping (no second image to pull, no GPU requested)."""
    name = f"epstack-prepull-{image.short}"
    labels = {"app.kubernetes.io/name": "epstack-prepull", "epstack.io/image-digest": image.short}
    small = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}
    spec: Obj = {
        "tolerations": [{"operator": "Exists"}],
        "initContainers": [
            {"name": "pull", "image": image.ref, "command": ["/bin/true"], "resources": small}
        ],
        "containers": [
            {"name": "hold", "image": image.ref, "command": ["sleep", "infinity"], "resources": small}
        ],
    }
    if node_selector:
        spec = {"nodeSelector": node_selector, **spec}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }
