"""The pieces the Kubernetes objects here are built from: literal text, labels, secrets by reference,
volumes, tolerations, the leader pod's labels, and the Prometheus Operator's PodMonitor. epstack.cluster.k8s
(the workload), .k8smodel (the model's claim and fetch) and .router build on them.
"""

from __future__ import annotations

from typing import Any

from epstack.cluster import modelfetch
from epstack.cluster.jobs import Job
from epstack.cluster.site import Site, Storage
from epstack.smoke.serving.command import METRICS_PATH

Obj = dict[str, Any]
MONITORING_API = "monitoring.coreos.com/v1"  # the Prometheus Operator's PodMonitor
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
JOB_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"  # Kubernetes >= 1.28 labels indexed pods


def literal(text: str) -> str:
    """Text Kubernetes passes as written: it expands $(VAR) in args and reads $$ as $."""
    return text.replace("$", "$$")


ROLE_LABEL = "epstack.io/role"  # prefill or decode (epstack.cluster.roles)


def job_labels(job: Job) -> dict[str, str]:
    labels = {
        "app.kubernetes.io/name": "epstack",
        "app.kubernetes.io/component": job.kind,
        "epstack.io/job": job.name,
        "epstack.io/image-digest": job.image.short,
    }
    return labels | ({ROLE_LABEL: job.role} if job.role else {})


def part_labels(job: Job, component: str, name: str) -> dict[str, str]:
    """Labels of an object beside the workload (the model's claim and fetch, the PodMonitor)."""
    return job_labels(job) | {"app.kubernetes.io/component": component, "epstack.io/job": name}


def secret_env(job: Job) -> list[Obj]:
    return [
        {"name": s.env, "valueFrom": {"secretKeyRef": {"name": s.secret, "key": s.key}}}
        for s in job.site.secrets
    ]


def env_from(job: Job) -> Obj:
    if not job.site.secret_env_from:
        return {}
    return {"envFrom": [{"secretRef": {"name": name}} for name in job.site.secret_env_from]}


def volume_of(storage: Storage, job: Job) -> Obj:
    if storage.kind == "host":
        return {"name": storage.name, "hostPath": {"path": storage.source, "type": "DirectoryOrCreate"}}
    if storage.kind in ("pvc", "shared"):
        claim = storage.source if storage.kind == "pvc" else modelfetch.claim(job.name)
        return {"name": storage.name, "persistentVolumeClaim": {"claimName": claim}}
    return {"name": storage.name, "emptyDir": {"sizeLimit": storage.source}}


def tolerations(site: Site) -> Obj:
    if not site.tolerations:
        return {}
    return {
        "tolerations": [
            {"key": key, "operator": "Exists", "effect": "NoSchedule"} for key in site.tolerations
        ]
    }


def leader_selector(job: Job, kind: str) -> dict[str, str]:
    """Node 0's pod: the LWS leader (worker index 0) or the indexed Job's pod 0."""
    index = LWS_WORKER_INDEX_LABEL if kind == "lws" else JOB_INDEX_LABEL
    role = {ROLE_LABEL: job.role} if job.role else {}
    return {"epstack.io/job": job.name, **role, index: "0"}


def pod_monitor(job: Job, name: str, selector: dict[str, str], port: str, labels: dict[str, str]) -> Obj:
    """A Prometheus Operator PodMonitor: /metrics on the named port of the pods `selector` matches, every
    30 s; `labels` are what the Prometheus' podMonitorSelector matches (release=kube-prometheus-stack)."""
    return {
        "apiVersion": MONITORING_API,
        "kind": "PodMonitor",
        "metadata": {"name": name, "labels": part_labels(job, "metrics", name) | labels},
        "spec": {
            "selector": {"matchLabels": selector},
            "podMetricsEndpoints": [{"port": port, "path": METRICS_PATH, "interval": "30s"}],
        },
    }
