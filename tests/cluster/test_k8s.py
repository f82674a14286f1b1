"""Rendered Kubernetes objects: real schemas, digests only, and the launcher's own view of each pod."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from epstack.cluster.k8s import LWS_API
from epstack.fabric import FABRICS
from epstack.smoke import launchenv as V
from epstack.smoke.launch import detect
from tests.cluster.conftest import (
    DIGEST,
    IMAGE,
    check_cluster_golden,
    load_all,
    render,
    render_args,
)
from tests.cluster.validation import images_of, validate_object
from tests.conftest import PINS

# Every variable name epstack.smoke.launchenv knows: the launcher reads no other.
LAUNCHER_NAMES = {value for key, value in vars(V).items() if key.isupper() and isinstance(value, str)}
CASES = list(itertools.product(("elastic-smoke", "serve"), ("job", "lws"), ("efa", "ib"), (1, 2, 4)))
GIN_CAPABILITIES = {"ib": ["IPC_LOCK", "SYS_RAWIO"], "efa": ["IPC_LOCK"]}


def _objects(tmp_path: Path, job: str, kind: str, fabric: str, nodes: int) -> list[dict[str, Any]]:
    pins = PINS
    args = render_args(target="k8s", job=job, nodes=nodes, gpus=8, fabric=fabric, pins=pins)
    return load_all(render(tmp_path, *args, "--k8s-kind", kind))


def _container(objects: list[dict[str, Any]], template: str = "") -> dict[str, Any]:
    """The workload's container (not the model fetch's nor the serve smoke's)."""
    for obj in objects:
        if obj["metadata"]["labels"]["app.kubernetes.io/component"] not in ("serve", "elastic-smoke"):
            continue
        if obj["kind"] == "Job":
            return dict(obj["spec"]["template"]["spec"]["containers"][0])
        if obj["kind"] == "LeaderWorkerSet":
            spec = obj["spec"]["leaderWorkerTemplate"][template or "workerTemplate"]["spec"]
            return dict(spec["containers"][0])
    raise AssertionError("no workload")


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container.get("env", [])}


@pytest.mark.parametrize(("job", "kind", "fabric", "nodes"), CASES)
def test_every_manifest_validates_and_names_the_image_by_digest(
    tmp_path: Path, job: str, kind: str, fabric: str, nodes: int
) -> None:
    objects = _objects(tmp_path, job, kind, fabric, nodes)
    for obj in objects:
        validate_object(obj)
        for image in images_of(obj):
            assert image == IMAGE and image.endswith("@" + DIGEST)
    container = _container(objects)
    limits = container["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 8
    assert container["resources"]["requests"]["cpu"] == 32  # 4 per GPU
    mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
    # The JIT caches and the results on node directories; serve's HF cache on the pod's own disk.
    assert {"/dev/shm", "/var/cache/epstack-jit", "/var/lib/epstack/results"} <= mounts
    assert ("/models" in mounts) == (job == "serve")
    facts = FABRICS[fabric]
    env = _env(container)
    assert env["EP_JIT_CACHE_DIR"] == "/var/cache/epstack-jit/deep_ep"
    if nodes > 1:
        assert limits[facts.k8s_resource] >= 1
        assert ("hugepages-2Mi" in limits) == bool(facts.hugepages_2mi)
        if fabric == "efa":  # every EFA interface of the default p5.48xlarge, and libfabric's huge pages
            assert (limits["vpc.amazonaws.com/efa"], limits["hugepages-2Mi"]) == (32, "5120Mi")
        assert dict(facts.job_env).items() <= env.items()
        # Pinned GIN types: IB GDAKI (3) maps NIC doorbells, EFA's proxy (2) does not.
        assert container["securityContext"]["capabilities"]["add"] == GIN_CAPABILITIES[fabric]
        assert "/dev/gdrdrv" in mounts and env["NVIDIA_GDRCOPY"] == "enabled"
    else:
        # One node is one NVLink domain: DeepEP V2 runs direct, no NIC, no fabric variables.
        assert set(limits) == {"nvidia.com/gpu"}
        assert not set(dict(facts.job_env)) & set(env)
        assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
        assert "/dev/gdrdrv" not in mounts and "NVIDIA_GDRCOPY" not in env


def test_lws_schema_check_is_not_empty(tmp_path: Path) -> None:
    objects = _objects(tmp_path, "serve", "lws", "ib", 2)
    lws = next(obj for obj in objects if obj["apiVersion"] == LWS_API)
    lws["spec"]["leaderWorkerTemplate"]["size"] = 0
    with pytest.raises(jsonschema.ValidationError):
        validate_object(lws)
    lws["spec"]["leaderWorkerTemplate"]["size"] = 2
    # A misspelt field in the pod template: Kubernetes' strict PodTemplate schema refuses it.
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["imagePullPolcy"] = (
        "Always"
    )
    with pytest.raises(jsonschema.ValidationError):
        validate_object(lws)


def test_a_manifest_with_a_bad_field_fails_the_real_schema(tmp_path: Path) -> None:
    objects = _objects(tmp_path, "elastic-smoke", "job", "ib", 2)
    job = next(obj for obj in objects if obj["kind"] == "Job")
    job["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = "SYS_RAWIO"
    with pytest.raises(jsonschema.ValidationError):
        validate_object(job)


@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_indexed_job_pods_are_the_ranks_the_smoke_launcher_expects(tmp_path: Path, nodes: int) -> None:
    objects = _objects(tmp_path, "elastic-smoke", "job", "ib", nodes)
    container = _container(objects)
    env = _env(container)
    service = next(obj for obj in objects if obj["kind"] == "Service")
    job = next(obj for obj in objects if obj["kind"] == "Job")
    # Exactly the launcher variables Kubernetes leaves to the job, none it sets itself.
    assert set(env) & LAUNCHER_NAMES == set(V.LAUNCHERS["kubernetes"].job_sets)
    # Pod 0's DNS name through the headless service is <job>-0.<subdomain>.
    assert job["spec"]["template"]["spec"]["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    for index in range(nodes):
        launch = detect(env | {V.JOB_COMPLETION_INDEX: str(index)})
        assert launch.launcher == "kubernetes"
        assert (launch.world_size, launch.nnodes, launch.node_rank) == (8 * nodes, nodes, index)
        assert [s.rank for s in launch.ranks()] == list(range(8 * index, 8 * index + 8))
        assert launch.master_addr == f"{job['metadata']['name']}-0.{service['metadata']['name']}"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == nodes


def test_lws_pods_are_the_ranks_the_smoke_launcher_expects(tmp_path: Path) -> None:
    objects = _objects(tmp_path, "elastic-smoke", "lws", "ib", 2)
    env = _env(_container(objects))
    assert set(env) & LAUNCHER_NAMES == set(V.LAUNCHERS["leaderworkerset"].job_sets)
    for index in range(2):
        # What the LWS controller adds to each container of group 0.
        platform = {V.LWS_LEADER_ADDRESS: "epstack-smoke-0.epstack-smoke.default", V.LWS_GROUP_SIZE: "2"}
        launch = detect(env | platform | {V.LWS_WORKER_INDEX: str(index)})
        assert (launch.launcher, launch.world_size, launch.rank) == ("leaderworkerset", 16, 8 * index)


def test_serve_readiness_is_health_on_node_0(tmp_path: Path) -> None:
    lws = _objects(tmp_path, "serve", "lws", "ib", 2)
    leader, worker = _container(lws, "leaderTemplate"), _container(lws, "workerTemplate")
    assert leader["readinessProbe"]["httpGet"] == {"path": "/health", "port": 30000}
    assert "readinessProbe" not in worker
    http = next(obj for obj in lws if obj["kind"] == "Service")
    assert http["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    job = _objects(tmp_path, "serve", "job", "ib", 2)
    probe = _container(job)["readinessProbe"]["exec"]["command"]
    assert "/health" in probe[-1] and '"$JOB_COMPLETION_INDEX" != 0' in probe[-1]


def test_smoke_profile_sizes_the_buffer_like_serve(tmp_path: Path) -> None:
    pins = PINS
    args = render_args(target="k8s", job="elastic-smoke", nodes=2, gpus=8, fabric="ib", pins=pins)
    objects = load_all(render(tmp_path, *args, "--profile", "deepseek-v3"))
    smoke = _container(objects)["args"]
    serve = _env(_container(_objects(tmp_path, "serve", "lws", "ib", 2)))
    budget = serve["SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK"]
    assert smoke[smoke.index("--num-max-tokens-per-rank") + 1] == budget
    assert smoke[smoke.index("--profile") + 1] == "deepseek-v3"


def test_golden_serve_lws_ib(tmp_path: Path) -> None:
    args = render_args(target="k8s", job="serve", nodes=2, gpus=8, fabric="ib", pins=PINS)
    check_cluster_golden(render(tmp_path, *args), "serve-lws-ib-2x8.yaml")


def test_golden_smoke_job_efa(tmp_path: Path) -> None:
    pins = PINS
    args = render_args(target="k8s", job="elastic-smoke", nodes=2, gpus=8, fabric="efa", pins=pins)
    check_cluster_golden(render(tmp_path, *args), "smoke-job-efa-2x8.yaml")


def test_prepull_daemonset(tmp_path: Path) -> None:
    text = render(tmp_path, "pull", "--platform", "k8s", "--image", IMAGE, "--node-selector", "gpu=h200")
    (daemonset,) = load_all(text)
    validate_object(daemonset)
    assert set(images_of(daemonset)) == {IMAGE}
    assert daemonset["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "h200"}
    assert daemonset["metadata"]["name"] == "epstack-prepull-" + DIGEST[7:19]
    check_cluster_golden(text, "prepull-daemonset.yaml")
