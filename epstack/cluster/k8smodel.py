"""The model's volume on Kubernetes (epstack.cluster.modelfetch): the shared claim `shared:SIZE` renders,
the fetch Job that fills a claim once, and each serve pod's init container: the fetch itself on a node
directory, a wait for the fetch's marker on a claim.
"""

from __future__ import annotations

from epstack.cluster import modelfetch
from epstack.cluster.jobs import Job
from epstack.cluster.k8sparts import Obj, env_from, literal, part_labels, secret_env, tolerations, volume_of

# The model fetch's pod: hf download's parallel transfers, no GPU.
FETCH_RESOURCES: Obj = {"requests": {"cpu": 8, "memory": "16Gi"}, "limits": {"memory": "32Gi"}}
WAIT_RESOURCES: Obj = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}}


def fetch_container(job: Job, name: str) -> Obj:
    """The model fetch's container: no GPU, the model volume, HF_HOME there, the site's variables
    (HF_ENDPOINT, a proxy) and the secrets by reference."""
    fetch, model = job.fetch, job.site.model
    assert fetch is not None and model is not None
    env = {"HF_HOME": model.mount, "NVIDIA_VISIBLE_DEVICES": "void", **job.site.env}
    return {
        "name": name,
        "image": job.image.ref,
        "imagePullPolicy": "IfNotPresent",
        "command": [literal(word) for word in fetch.command()],
        "env": [{"name": key, "value": literal(value)} for key, value in env.items()] + secret_env(job),
        **env_from(job),
        "resources": FETCH_RESOURCES,
        "volumeMounts": [{"name": model.name, "mountPath": model.mount}],
    }


def model_init(job: Job) -> Obj:
    """A serve pod's init container: on a node directory (`host:`), the fetch itself, under the lock
    in that directory (one download a node); on a claim every pod mounts, a wait for the fetch Job's
    marker."""
    fetch, model = job.fetch, job.site.model
    assert fetch is not None and model is not None
    if modelfetch.in_each_pod(fetch, model):
        return fetch_container(job, "write-model" if fetch.generated else "fetch-model")
    return {
        "name": "wait-for-model",
        "image": job.image.ref,
        "imagePullPolicy": "IfNotPresent",
        "command": [literal(word) for word in fetch.wait_command()],
        "resources": WAIT_RESOURCES,
        "volumeMounts": [{"name": model.name, "mountPath": model.mount}],
    }


def model_claim(job: Job, storage_class: str) -> Obj:
    """`shared:SIZE`: one ReadWriteMany claim every pod of the job mounts (e.g. EFS, FSx, Filestore, NFS)."""
    assert job.site.model is not None
    name = modelfetch.claim(job.name)
    size = {"storage": job.site.model.source}
    spec: Obj = {"accessModes": ["ReadWriteMany"], "resources": {"requests": size}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "labels": part_labels(job, "model", name)},
        "spec": spec,
    }


def fetch_job(job: Job) -> Obj:
    """The model fetch into a claim every pod mounts, as a Job of its own: retried (hf download resumes);
    its pod where the site's selector and taints allow, where the image already is."""
    model = job.site.model
    assert model is not None
    name = modelfetch.name(job.name)
    labels = part_labels(job, "model-fetch", name)
    spec: Obj = {"restartPolicy": "Never", "automountServiceAccountToken": False}
    if job.site.node_selector:
        spec["nodeSelector"] = dict(job.site.node_selector)
    spec |= {
        **tolerations(job.site),
        "containers": [fetch_container(job, "fetch")],
        "volumes": [volume_of(model, job)],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {"backoffLimit": 3, "template": {"metadata": {"labels": labels}, "spec": spec}},
    }
