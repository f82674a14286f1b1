"""Kubernetes objects for a Job: a LeaderWorkerSet, or an indexed Job with a headless Service; a serve
job's smoke as a Job of its own; the model's claim and fetch (epstack.cluster.k8smodel) and the
PodMonitor, when asked; and the pre-pull DaemonSet. Plain dicts, in a fixed key order, written out by
yamltext; the pieces shared with .k8smodel and .router are in .k8sparts.

Every pod: the image by digest, nvidia.com/gpu, CPUs, /dev/shm as a memory emptyDir, IPC_LOCK (DeepEP
and NCCL pin memory; Kubernetes has no memlock setting, the capability lifts the limit), the site's
volumes (model cache, JIT cache, results; epstack.cluster.site), its environment, scheduling and
network settings, and, when the job crosses nodes, the fabric's device resource, its huge pages, its
environment and what its GIN type needs from the host (/dev/gdrdrv, capabilities). Serve pods get
startup and liveness probes on SGLang's /health, and secrets by reference (secretKeyRef, envFrom).
The launcher variables come from epstack.smoke.launchenv, the fabric facts from epstack.fabric.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from epstack.cluster import modelfetch, roles, servesmoke
from epstack.cluster.image import ImageRef
from epstack.cluster.jobs import Job
from epstack.cluster.k8smodel import fetch_job, model_claim, model_init
from epstack.cluster.k8sparts import (
    MONITORING_API,
    Obj,
    env_from,
    job_labels,
    leader_selector,
    literal,
    pod_monitor,
    secret_env,
    tolerations,
    volume_of,
)
from epstack.cluster.site import Site
from epstack.errors import BadInput
from epstack.fabric import GDRDRV
from epstack.smoke import launchenv as V
from epstack.smoke.serving.command import METRICS_PATH

K8S_VERSION = "1.34"  # the Kubernetes version the manifests are validated against (kubernetes-validate)
LWS_API = "leaderworkerset.x-k8s.io/v1"
EXCLUSIVE_TOPOLOGY = "leaderworkerset.sigs.k8s.io/exclusive-topology"
# The LWS release whose controller sets LWS_WORKER_INDEX in every container (kubernetes-sigs/lws#416).
LWS_MIN_VERSION = "0.6.0"
PROBE_PERIOD_S = 10
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
# The serve smoke's pod: an HTTP client (Python, 41 short requests), no GPU.
SMOKE_RESOURCES: Obj = {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}


@dataclass(frozen=True, kw_only=True)
class PodSettings:
    shm_size: str = "64Gi"
    memory: str = "256Gi"  # a memory request: Kubernetes requires one beside huge pages
    rdma_resource: str = ""  # overrides the fabric's device plugin resource
    storage_class: str = ""  # the shared model claim's storage class (default: the cluster's)
    pod_monitor: dict[str, str] | None = None  # a PodMonitor with these labels, or none
    replicas: int = 1  # LWS serving groups, each `nodes` pods
    endpoint: str = ""  # the Service clients use (the router's), else the job's HTTP Service


def _env(job: Job, env: dict[str, str]) -> list[Obj]:
    """The container's environment; Kubernetes expands $(VAR) in values too, so each is written literally.
    Secrets by reference (secretKeyRef), last: the kubelet reads their values, epstack never does."""
    if GDRDRV in job.devices:
        # The NVIDIA container toolkit adds /dev/gdrdrv to the container's allowed devices.
        env = {"NVIDIA_GDRCOPY": "enabled", **env}
    return [{"name": key, "value": literal(value)} for key, value in env.items()] + secret_env(job)


def rdma_resource(job: Job, settings: PodSettings) -> str:
    """The fabric's device resource each pod requests: only when the job crosses nodes, else ""."""
    return (settings.rdma_resource or job.fabric.k8s_resource) if job.crosses_nodes else ""


def _resources(job: Job, settings: PodSettings) -> Obj:
    limits: dict[str, Any] = {"nvidia.com/gpu": job.gpus_per_node}
    if job.crosses_nodes:
        limits[rdma_resource(job, settings)] = job.fabric_devices
        if job.fabric.hugepages_2mi:
            limits["hugepages-2Mi"] = job.fabric.hugepages_2mi
    requests: dict[str, Any] = {"memory": settings.memory, "cpu": job.site.cpus_per_gpu * job.gpus_per_node}
    model = job.site.model
    if model is not None and model.kind == "ephemeral":
        requests["ephemeral-storage"] = model.source
    return {"limits": limits, "requests": {**requests, **limits}}


def _device_name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _volume_mounts(job: Job) -> list[Obj]:
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    mounts += [{"name": v.name, "mountPath": v.mount} for v in job.site.volumes]
    return mounts + [{"name": _device_name(path), "mountPath": path} for path in job.devices]


def _security(job: Job) -> Obj:
    security: Obj = {"capabilities": {"add": list(job.capabilities)}}
    if job.site.privileged:
        security["privileged"] = True
    return security


def _health_probes(job: Job) -> Obj:
    """Serve: the engine's /health on every pod that serves HTTP (SGLang 0.5.23 answers it on nodes >= 1
    too, from a stand-in server once their schedulers are up; vLLM's --headless workers serve none).
    Start-up may take --startup-timeout (weights, CUDA graphs); after it, a pod that stops answering is
    restarted (LWS: its whole group)."""
    if job.http_port is None:
        return {}
    get = {"path": job.health_path, "port": job.http_port}
    startup = -(-job.site.startup_timeout_s // PROBE_PERIOD_S)
    return {
        "startupProbe": {"httpGet": get, "periodSeconds": PROBE_PERIOD_S, "failureThreshold": startup},
        "livenessProbe": {"httpGet": get, "periodSeconds": 30, "timeoutSeconds": 10, "failureThreshold": 4},
    }


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
    job: Job,
    args: list[str],
    env: dict[str, str],
    settings: PodSettings,
    probe: Obj | None,
    *,
    http: bool = True,
) -> Obj:
    """`http`: the command serves HTTP (not vLLM's --headless workers): its port and health probes."""
    container: Obj = {
        "name": job.kind,
        "image": job.image.ref,
        "imagePullPolicy": "IfNotPresent",
        # args only: the image's entrypoint runs `epstack guard` before the command.
        "args": args,
        "env": _env(job, env),
        **env_from(job),
        "resources": _resources(job, settings),
        "securityContext": _security(job),
        "volumeMounts": _volume_mounts(job),
    }
    if job.http_port is not None and http:
        container["ports"] = [{"name": "http", "containerPort": job.http_port}]
    if probe is not None:
        container["readinessProbe"] = probe
    return container | (_health_probes(job) if http else {})


def _scheduling(site: Site) -> Obj:
    """Where the pods may run: host network, node selector, tolerations."""
    spec: Obj = {}
    if site.host_network:
        spec |= {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}
    if site.node_selector:
        spec["nodeSelector"] = dict(site.node_selector)
    return spec | tolerations(site)


def _pod_spec(job: Job, container: Obj, settings: PodSettings, **extra: Any) -> Obj:
    volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size}}]
    volumes += [volume_of(v, job) for v in job.site.volumes]
    volumes += [
        {"name": _device_name(path), "hostPath": {"path": path, "type": "CharDevice"}} for path in job.devices
    ]
    init: Obj = {}
    if job.fetch:
        init["initContainers"] = [model_init(job)]
    return {**extra, **_scheduling(job.site), **init, "containers": [container], "volumes": volumes}


def _template(job: Job, spec: Obj) -> Obj:
    metadata: Obj = {"labels": job_labels(job)}
    annotations = job.site.annotations | roles.pod_annotations(job)
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": spec}


def _service(name: str, job: Job, selector: dict[str, str], *, headless: bool, port: int) -> Obj:
    spec: Obj = {"selector": selector, "ports": [{"name": "port", "port": port, "targetPort": port}]}
    if headless:
        spec = {"clusterIP": "None", "publishNotReadyAddresses": True, **spec}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": job_labels(job)},
        "spec": spec,
    }


def http_service(job: Job) -> str:
    """The Service in front of node 0's HTTP port: the serve job's endpoint (its role's), in its namespace."""
    return f"{job.workload_name}-http"


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
    args = job.words(literal, node_rank=f"$({V.JOB_COMPLETION_INDEX})", leader=leader)
    container = _container(job, args, env, settings, _readiness(job, every_pod=True))
    placement: Obj = {}
    if job.site.topology_key:
        # Every pod of the job in one domain of the key (one zone, one network block).
        term = {
            "labelSelector": {"matchLabels": {"epstack.io/job": job.name}},
            "topologyKey": job.site.topology_key,
        }
        placement["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    pod = _pod_spec(job, container, settings, restartPolicy="Never", subdomain=service, **placement)
    objects = [
        _service(service, job, {"epstack.io/job": job.name}, headless=True, port=job.rendezvous_port),
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": job.name, "labels": job_labels(job)},
            "spec": {
                "completionMode": "Indexed",
                "completions": job.nodes,
                "parallelism": job.nodes,
                "backoffLimit": 0,
                "template": _template(job, pod),
            },
        },
    ]
    if job.http_port is not None:
        selector = leader_selector(job, "job")
        objects.append(_service(http_service(job), job, selector, headless=False, port=job.http_port))
    return objects


def leader_worker_set(job: Job, settings: PodSettings) -> list[Obj]:
    """One LWS group of `nodes` pods: the controller sets LWS_* in every container."""
    env = job.env()
    if job.kind == "elastic-smoke":
        env |= {V.EPSTACK_NPROC_PER_NODE: str(job.gpus_per_node), V.MASTER_PORT: str(job.rendezvous_port)}
    node = {"node_rank": f"$({V.LWS_WORKER_INDEX})", "leader": f"$({V.LWS_LEADER_ADDRESS})"}
    leader_args = job.words(literal, **node)
    worker_args = job.words(literal, **node, worker=job.engine.worker)  # vLLM's workers: --headless
    leader = _container(job, leader_args, env, settings, _readiness(job, every_pod=False))
    worker = _container(job, worker_args, env, settings, None, http=not job.engine.worker)
    template: Obj = {
        "size": job.nodes,
        "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": _template(job, _pod_spec(job, leader, settings)),
        "workerTemplate": _template(job, _pod_spec(job, worker, settings)),
    }
    metadata: Obj = {"name": job.workload_name, "labels": job_labels(job)}
    if job.site.topology_key:
        # LWS places each group alone in one domain of the key (exclusive placement).
        metadata["annotations"] = {EXCLUSIVE_TOPOLOGY: job.site.topology_key}
    objects: list[Obj] = [
        {
            "apiVersion": LWS_API,
            "kind": "LeaderWorkerSet",
            "metadata": metadata,
            "spec": {
                "replicas": settings.replicas,
                "startupPolicy": "LeaderCreated",
                "leaderWorkerTemplate": template,
            },
        }
    ]
    if job.http_port is not None:
        selector = leader_selector(job, "lws")
        objects.append(_service(http_service(job), job, selector, headless=False, port=job.http_port))
    return objects


def endpoint(job: Job, settings: PodSettings) -> str:
    """The Service the serve smoke (and any client) calls: the router's, else node 0's HTTP Service."""
    return settings.endpoint or http_service(job)


def serve_smoke_job(job: Job, kind: str, host: str) -> Obj:
    """`epstack smoke serve --url` against the job's HTTP Service (what clients use; it routes once the
    leader is ready), as a Job of its own: a postStart hook would hold the leader's start for the whole
    start-up, and its failure would restart the serving group. Its pod runs on the leader pod's node,
    where the image already is (no second pull of a GPU image onto a CPU node) and where a host results
    directory is the leader's; it tolerates the site's taints for that, asks for no GPU and sees none,
    and gets no service account token. It runs once (backoffLimit 0): `kubectl wait
    --for=condition=complete job/NAME-smoke` is the cluster's proof that it serves."""
    smoke = servesmoke.name(job)
    labels = {
        "app.kubernetes.io/name": "epstack",
        "app.kubernetes.io/component": "serve-smoke",
        "epstack.io/job": smoke,
        "epstack.io/image-digest": job.image.short,
    }
    results = job.site.results
    container: Obj = {
        "name": "serve-smoke",
        "image": job.image.ref,
        "imagePullPolicy": "IfNotPresent",
        "command": servesmoke.words(job, literal, host=host, run_id=""),
        # A GPU node's NVIDIA runtime would otherwise honour the CUDA image's NVIDIA_VISIBLE_DEVICES=all
        # in a pod that asked for no GPU.
        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
        "resources": SMOKE_RESOURCES,
    }
    if results is not None:
        container["volumeMounts"] = [{"name": results.name, "mountPath": results.mount}]
    beside_leader = {
        "labelSelector": {"matchLabels": leader_selector(job, kind)},
        "topologyKey": HOSTNAME_TOPOLOGY,
    }
    spec: Obj = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [beside_leader]}},
        **tolerations(job.site),
        "containers": [container],
    }
    if results is not None:
        spec["volumes"] = [volume_of(results, job)]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": smoke, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": servesmoke.deadline_s(job),
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def k8s_kind(job: Job, kind: str | None) -> str:
    """--k8s-kind, or its default: lws for serve, job for the smoke."""
    return kind or ("lws" if job.kind == "serve" else "job")


def job_objects(
    job: Job, settings: PodSettings, kind: str | None = None, role_jobs: tuple[Job, ...] = ()
) -> list[Obj]:
    """The model's claim (`shared:SIZE`) and its fetch, if any; the job as a LeaderWorkerSet ("lws") or
    an indexed Job ("job"), default lws for serve, or each of its `role_jobs` (epstack.cluster.roles) as
    an LWS; the serve smoke's Job, unless it is off; a PodMonitor for each, when asked."""
    chosen = k8s_kind(job, kind)
    if job.serve is not None and job.engine.worker and job.crosses_nodes and chosen != "lws":
        raise BadInput(
            f"--k8s-kind {chosen}: {job.engine.title}'s nodes other than node 0 run {job.engine.worker}, "
            "and an indexed Job runs one command; fix: --k8s-kind lws (a leader and a worker template)"
        )
    if settings.replicas > 1 and chosen != "lws":
        raise BadInput(
            f"--replicas {settings.replicas}: serving groups are LWS replicas; fix: --k8s-kind lws"
        )
    objects = []
    if job.site.model is not None and job.site.model.kind == "shared":
        objects.append(model_claim(job, settings.storage_class))
    if job.fetch and job.site.model is not None and not modelfetch.in_each_pod(job.fetch, job.site.model):
        objects.append(fetch_job(job))
    workloads = role_jobs or (job,)
    for workload in workloads:
        objects += (leader_worker_set if chosen == "lws" else indexed_job)(workload, settings)
    if job.serve_smoke == "exit":
        raise BadInput(
            "--serve-smoke exit: a Kubernetes serve job keeps serving (the smoke is a Job of its own); "
            f"fix: use on, and wait for it: kubectl wait --for=condition=complete job/{servesmoke.name(job)}"
        )
    if job.serve_smoke == "on":
        # Beside the leader that answers last in a request's path: decode's, with roles.
        objects.append(serve_smoke_job(workloads[-1], chosen, endpoint(job, settings)))
    if settings.pod_monitor is not None:
        if job.http_port is None:
            raise BadInput("--pod-monitor: the metrics are a serve job's; fix: use it with --job serve")
        for workload in workloads:
            # The engine serves its metrics on node 0's HTTP port.
            selector = leader_selector(workload, chosen)
            name = f"{workload.workload_name}-metrics"
            objects.append(pod_monitor(workload, name, selector, "http", settings.pod_monitor))
    return objects


def notes(
    job: Job, settings: PodSettings, kind: str | None = None, role_jobs: tuple[Job, ...] = ()
) -> list[str]:
    """The comments heading the manifests: what the cluster must provide, and why each grant."""
    lines = []
    model = job.site.model
    if model is not None and model.kind == "shared":
        lines.append(
            f"Model claim {modelfetch.claim(job.name)}: ReadWriteMany, {model.source} (a storage class that "
            "offers it: EFS, FSx for Lustre, Filestore, NFS); every pod mounts it; it outlives the job "
            "until deleted (`kubectl delete -f` deletes it, and the weights)."
        )
    if job.fetch and model is not None and modelfetch.in_each_pod(job.fetch, model):
        where = "its node's directory" if model.kind == "host" else "its own disk"
        what = "write" if job.fetch.generated else "fetch"
        lines.append(f"Model {what}: each serve pod's init container, under the lock in {where}.")
    elif job.fetch:
        lines.append(
            f"Model fetch: Job {modelfetch.name(job.name)} (no GPU); each serve pod's init container waits "
            f"for it: `kubectl wait --for=condition=complete job/{modelfetch.name(job.name)}`."
        )
    if settings.pod_monitor is not None:
        monitors = ", ".join(f"{each.workload_name}-metrics" for each in role_jobs or (job,))
        lines.append(
            f"PodMonitor {monitors} (Prometheus Operator, {MONITORING_API}): node 0's "
            f"{METRICS_PATH}, port http, every 30 s."
        )
    if k8s_kind(job, kind) == "lws":
        lines.append(
            f"Needs LeaderWorkerSet >= {LWS_MIN_VERSION}: its controller sets LWS_WORKER_INDEX, which "
            f"the command reads as $({V.LWS_WORKER_INDEX}) (kubernetes-sigs/lws#416)."
        )
    if GDRDRV in job.devices:
        lines.append(
            f"{GDRDRV}: a hostPath device, and NVIDIA_GDRCOPY=enabled so the NVIDIA container toolkit "
            "lets the container open it."
        )
    if job.site.host_network:
        lines.append(
            "hostNetwork (--host-network): the node's RDMA netdevs (RoCE GIDs) in the pod where no "
            "SR-IOV/Multus network brings them; dnsPolicy ClusterFirstWithHostNet keeps cluster DNS."
        )
    if job.serve_smoke == "on":
        smoke, deadline = servesmoke.name(job), servesmoke.deadline_s(job)
        results = job.site.results
        where = "none kept (no results volume)"
        if results is not None:
            node = ", the leader's node's" if results.kind == "host" else ""
            where = f"{servesmoke.report(job, run_id='')} (results: {results.kind} {results.source}{node})"
        lines.append(
            f"Serve smoke: Job {smoke} runs `epstack smoke serve --url "
            f"{servesmoke.url(job, endpoint(job, settings))} --no-sweep` beside the leader pod once it "
            "answers "
            f"(--health-timeout {servesmoke.health_timeout_s(job)}); prove the endpoint with `kubectl wait "
            f"--for=condition=complete job/{smoke} --timeout={deadline}s`, read `kubectl logs job/{smoke}`; "
            f"report: {where}; --serve-smoke off leaves it out."
        )
    return lines + job.notes()


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
