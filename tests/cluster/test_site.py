"""A site's settings in the rendered jobs: storage, environment, network, scheduling, privileges, in
Kubernetes (validated like every manifest) and Slurm (bash -n, shellcheck, run with stand-ins), and
the 2-node DeepSeek-V3 jobs as golden files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from epstack.cluster.k8s import EXCLUSIVE_TOPOLOGY
from epstack.cluster.site import EnvLine, Storage, env_pair, parse_storage, read_env_file, split_pairs
from epstack.commands.main import main
from epstack.errors import BadInput
from epstack.fabric import FABRICS
from epstack.stack import GIN_EFA_GDA
from tests.cluster.conftest import check_cluster_golden, load_all, render, render_args
from tests.cluster.test_slurm import _steps, _tasks, _tool_checks
from tests.cluster.validation import validate_object
from tests.conftest import PINS

# A RoCE site without SR-IOV: its HCAs, GID index and interfaces (NCCL's and Gloo's bootstrap).
ROCE_ENV = ["NCCL_IB_HCA=mlx5_0,mlx5_1,mlx5_2,mlx5_3", "NCCL_IB_GID_INDEX=3", "NCCL_SOCKET_IFNAME=bond0"]


def _render(tmp_path: Path, target: str, job: str, fabric: str, *extra: str) -> str:
    pins = PINS
    args = render_args(target=target, job=job, nodes=2, gpus=8, fabric=fabric, pins=pins, extra=extra)
    return render(tmp_path, *args)


def _pods(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pod template of the workload: the Job's, or the LWS leader's and worker's."""
    for obj in objects:
        if obj["metadata"]["labels"]["app.kubernetes.io/component"] not in ("serve", "elastic-smoke"):
            continue
        if obj["kind"] == "Job":
            return [obj["spec"]["template"]]
        if obj["kind"] == "LeaderWorkerSet":
            template = obj["spec"]["leaderWorkerTemplate"]
            return [template["leaderTemplate"], template["workerTemplate"]]
    raise AssertionError("no workload")


def _k8s(tmp_path: Path, job: str, fabric: str, *extra: str) -> list[dict[str, Any]]:
    objects = load_all(_render(tmp_path, "k8s", job, fabric, *extra))
    for obj in objects:
        validate_object(obj)
    return objects


def _bad(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, *args: str, target: str = "k8s", fabric: str = "ib"
) -> str:
    """The one error line of a render refused with exit 2, nothing written."""
    out = tmp_path / "never"
    pins = PINS
    base = render_args(target=target, job="serve", nodes=2, gpus=8, fabric=fabric, pins=pins)
    assert main(["cluster", *base, *args, "--out", str(out)]) == 2
    assert not out.exists()
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "fix:" in lines[0], lines
    return lines[0]


# ---- golden: 2-node DeepSeek-V3 -------------------------------------------------------------------


def test_golden_deepseek_v3_serve_lws_roce(tmp_path: Path) -> None:
    """RoCE without SR-IOV: weights on a PVC, the site's NCCL settings, host network, one zone."""
    text = _render(
        tmp_path, "k8s", "serve", "ib", "--profile", "deepseek-v3",
        "--model-storage", "pvc:deepseek-v3-weights", "--model-path", "/models/DeepSeek-V3",
        *(arg for pair in ROCE_ENV for arg in ("--env", pair)), "--env", "GLOO_SOCKET_IFNAME=bond0",
        "--host-network", "--topology-key", "topology.kubernetes.io/zone",
        "--node-selector", "nvidia.com/gpu.product=NVIDIA-H200",
    )  # fmt: skip
    for obj in load_all(text):
        validate_object(obj)
    check_cluster_golden(text, "serve-lws-deepseek-v3-roce-2x8.yaml")


def test_golden_deepseek_v3_smoke_job_efa(tmp_path: Path) -> None:
    """p5en (16 EFA devices), results on a PVC, GKE-style network annotation, one zone."""
    text = _render(
        tmp_path, "k8s", "elastic-smoke", "efa", "--profile", "deepseek-v3",
        "--instance-type", "p5en.48xlarge", "--results-storage", "pvc:epstack-results",
        "--annotation", "networking.gke.io/interfaces=[{\"interfaceName\":\"eth0\",\"network\":\"default\"}]",
        "--topology-key", "topology.kubernetes.io/zone",
    )  # fmt: skip
    for obj in load_all(text):
        validate_object(obj)
    check_cluster_golden(text, "smoke-job-deepseek-v3-efa-2x8.yaml")


def test_golden_deepseek_v3_serve_sbatch(tmp_path: Path) -> None:
    """Slurm on FSx: weights, JIT caches and results on shared directories, a site env file."""
    env_file = tmp_path / "site.env"
    env_file.write_text("# site\nNCCL_SOCKET_IFNAME=^docker,lo,veth\n\nFI_EFA_FORK_SAFE=1\n")
    text = _render(
        tmp_path, "slurm", "serve", "efa", "--profile", "deepseek-v3",
        "--model-storage", "host:/fsx/hf", "--cache-storage", "host:/fsx/epstack/jit-cache",
        "--results-storage", "host:/fsx/epstack/results", "--env-file", str(env_file),
        "--squashfs-dir", "/fsx/images",
    )  # fmt: skip
    _tool_checks(text, tmp_path)
    check_cluster_golden(text, "serve-deepseek-v3-efa-2x8.sbatch")


# ---- Kubernetes ----------------------------------------------------------------------------------


def test_defaults_give_every_pod_storage_tolerations_and_probes(tmp_path: Path) -> None:
    objects = _k8s(tmp_path, "serve", "ib")
    for pod in _pods(objects):
        spec, container = pod["spec"], pod["spec"]["containers"][0]
        assert spec["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
        volumes = {volume["name"]: volume for volume in spec["volumes"]}
        # Two pods: one shared claim, filled once by the fetch Job, each pod waiting for its marker.
        assert volumes["model"]["persistentVolumeClaim"] == {"claimName": "epstack-serve-models"}
        assert "ephemeral-storage" not in container["resources"]["requests"]
        assert [init["name"] for init in spec["initContainers"]] == ["wait-for-model"]
        assert volumes["cache"]["hostPath"] == {
            "path": "/var/tmp/epstack/jit-cache",
            "type": "DirectoryOrCreate",
        }
        assert volumes["gdrdrv"]["hostPath"] == {"path": "/dev/gdrdrv", "type": "CharDevice"}
        # SGLang 0.5.23 answers /health on every node once up; an hour to start (DeepSeek-V3).
        assert container["startupProbe"]["httpGet"] == {"path": "/health", "port": 30000}
        assert (
            container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"] == 3600
        )
        assert container["livenessProbe"]["httpGet"]["path"] == "/health"
        assert "privileged" not in container["securityContext"]
        assert "hostNetwork" not in spec


def test_site_flags_reach_every_pod(tmp_path: Path) -> None:
    objects = _k8s(
        tmp_path, "serve", "ib", "--host-network", "--privileged",
        "--annotation", "k8s.v1.cni.cncf.io/networks=rdma",
        "--node-selector", "pool=h200", "--toleration", "dedicated", "--model-storage", "host:/data/hf",
        "--cache-storage", "ephemeral:50Gi", "--cpus-per-gpu", "12", "--startup-timeout", "95",
        *(arg for pair in ROCE_ENV for arg in ("--env", pair)),
    )  # fmt: skip
    lws = next(obj for obj in objects if obj["kind"] == "LeaderWorkerSet")
    assert "annotations" not in lws["metadata"]  # no --topology-key
    for pod in _pods(objects):
        spec, container = pod["spec"], pod["spec"]["containers"][0]
        assert pod["metadata"]["annotations"] == {"k8s.v1.cni.cncf.io/networks": "rdma"}
        assert (spec["hostNetwork"], spec["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
        assert spec["nodeSelector"] == {"pool": "h200"}
        assert [t["key"] for t in spec["tolerations"]] == ["nvidia.com/gpu", "dedicated"]
        assert container["securityContext"]["privileged"] is True
        assert container["resources"]["requests"]["cpu"] == 96
        assert "ephemeral-storage" not in container["resources"]["requests"]
        volumes = {volume["name"]: volume for volume in spec["volumes"]}
        assert (
            volumes["model"]["hostPath"]["path"] == "/data/hf"
            and volumes["cache"]["emptyDir"]["sizeLimit"] == "50Gi"
        )
        env = {item["name"]: item["value"] for item in container["env"]}
        assert env["NCCL_IB_GID_INDEX"] == "3" and env["HF_HOME"] == "/models"
        assert container["startupProbe"]["failureThreshold"] == 10  # 95 s, rounded up to 10 s periods


def test_topology_key_places_lws_groups_and_job_pods(tmp_path: Path) -> None:
    key = "topology.kubernetes.io/zone"
    lws = next(
        o for o in _k8s(tmp_path, "serve", "ib", "--topology-key", key) if o["kind"] == "LeaderWorkerSet"
    )
    assert lws["metadata"]["annotations"] == {EXCLUSIVE_TOPOLOGY: key}
    job = _pods(_k8s(tmp_path, "elastic-smoke", "ib", "--topology-key", key))[0]
    (term,) = job["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term == {"labelSelector": {"matchLabels": {"epstack.io/job": "epstack-smoke"}}, "topologyKey": key}


def test_lws_output_states_the_lws_version_it_needs(tmp_path: Path) -> None:
    lws = _render(tmp_path, "k8s", "serve", "ib")
    assert any(line.startswith("# Needs LeaderWorkerSet >= 0.6.0") for line in lws.splitlines())
    assert "$(LWS_WORKER_INDEX)" in lws
    job = _render(tmp_path, "k8s", "serve", "ib", "--k8s-kind", "job")
    assert "LeaderWorkerSet" not in job


@pytest.mark.parametrize(
    ("instance", "devices"), [("p5.48xlarge", 32), ("p5en.48xlarge", 16), ("p4d.24xlarge", 4)]
)
def test_efa_devices_follow_the_instance_type(tmp_path: Path, instance: str, devices: int) -> None:
    pod = _pods(_k8s(tmp_path, "elastic-smoke", "efa", "--instance-type", instance))[0]
    assert pod["spec"]["containers"][0]["resources"]["limits"]["vpc.amazonaws.com/efa"] == devices
    assert pod["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": instance}


def test_every_gin_type_of_every_fabric_names_its_host_access() -> None:
    for fabric in FABRICS.values():
        for gin_type in fabric.gin_types:
            access = fabric.host_access(gin_type)
            assert "/dev/gdrdrv" in access.devices and "IPC_LOCK" in access.capabilities and access.reason
    assert "SYS_RAWIO" not in FABRICS["efa"].host_access(GIN_EFA_GDA).capabilities


def test_env_values_are_text_in_both_targets(tmp_path: Path) -> None:
    """Kubernetes expands $(VAR) in env values and a shell expands $ and backquotes: neither happens."""
    value = "$(HOSTNAME) `id` $HOME 'x'"
    container = _pods(_k8s(tmp_path, "serve", "ib", "--env", f"SITE_NOTE={value}"))[0]["spec"]["containers"][
        0
    ]
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["SITE_NOTE"] == value.replace("$", "$$")
    script = _render(tmp_path, "slurm", "serve", "ib", "--env", f"SITE_NOTE={value}")
    _tool_checks(script, tmp_path)
    (task, *_) = _tasks(tmp_path, script, nodes=2)
    assert task["env"]["SITE_NOTE"] == value


# ---- Slurm ---------------------------------------------------------------------------------------


def test_sbatch_makes_and_mounts_the_node_directories(tmp_path: Path) -> None:
    script = _render(tmp_path, "slurm", "elastic-smoke", "ib", "--results-storage", "host:/shared/results")
    _tool_checks(script, tmp_path)
    steps = _steps(tmp_path, script, nodes=2)
    mkdirs = [step["argv"] for step in steps if "container-image" not in step["opts"]]
    assert mkdirs == [["mkdir", "-p", "--", "/var/tmp/epstack/jit-cache", "/shared/results"]] * 2
    tasks = [step for step in steps if "container-image" in step["opts"]]
    assert len(tasks) == 16
    opts = tasks[0]["opts"]
    assert (opts["cpus-per-task"], opts["cpu-bind"]) == ("4", "none")
    assert opts["container-mounts"].split(",") == [
        "/var/tmp/epstack/jit-cache:/var/cache/epstack-jit",
        "/shared/results:/var/lib/epstack/results",
        "/dev/gdrdrv:/dev/gdrdrv",
        "/dev/infiniband:/dev/infiniband",
    ]
    argv = tasks[0]["argv"]
    assert argv[argv.index("--json") + 1] == "/var/lib/epstack/results/epstack-smoke.json"
    assert argv[argv.index("--run-dir") + 1] == "/var/lib/epstack/results/epstack-smoke"
    assert tasks[0]["env"]["EP_JIT_CACHE_DIR"] == "/var/cache/epstack-jit/deep_ep"


def test_serve_task_gets_the_nodes_cpus(tmp_path: Path) -> None:
    script = _render(tmp_path, "slurm", "serve", "ib")
    opts = _tasks(tmp_path, script, nodes=2)[0]["opts"]
    assert opts["cpus-per-task"] == "32" and "/var/tmp/epstack/hf:/models" in opts["container-mounts"]


# ---- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--model-storage", "s3://bucket"], "--model-storage s3://bucket: fix: write host:/DIR"),
        (["--model-storage", "host:relative"], "must be an absolute path"),
        (["--cache-storage", "ephemeral:lots"], "not a size"),
        (["--results-storage", "pvc:Bad_Name"], "not a claim name"),
    ],
)
def test_bad_site_flags(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], text: str
) -> None:
    assert text in _bad(capsys, tmp_path, *args)


def test_an_instance_type_without_a_known_efa_count(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    line = _bad(capsys, tmp_path, "--instance-type", "p3dn.24xlarge", fabric="efa")
    assert (
        "--instance-type p3dn.24xlarge" in line
        and "p5en.48xlarge (16)" in line
        and "--fabric-devices" in line
    )


@pytest.mark.parametrize(
    ("storage", "text"),
    [("pvc:weights", "Slurm mounts node directories only"), ("host:/a,b", "cannot be mounted by pyxis")],
)
def test_slurm_refuses_what_pyxis_cannot_mount(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, storage: str, text: str
) -> None:
    line = _bad(capsys, tmp_path, "--model-storage", storage, target="slurm")
    assert text in line and "fix: --model-storage host:/DIR" in line


def test_pod_settings_are_refused_for_slurm(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = _bad(capsys, tmp_path, "--privileged", "--toleration", "dedicated", target="slurm")
    assert line.startswith("error: --toleration --privileged: Kubernetes pod settings")


@pytest.mark.parametrize(
    ("content", "where", "why"),
    [
        ("NCCL_IB_HCA=mlx5_0\nNCCL IB GID=3\n", ":2:", "not KEY=VALUE"),
        ("# ok\n\nMASTER_ADDR=node0\n", ":3:", "MASTER_ADDR is set by the job's launcher"),
        ("A=1\nB=\x1b[31m\n", ":2:", "a control character"),
    ],
)
def test_a_bad_env_file_line_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, where: str, why: str
) -> None:
    env_file = tmp_path / "site.env"
    env_file.write_text(content)
    line = _bad(capsys, tmp_path, "--env-file", str(env_file))
    assert f"{env_file}{where} " in line and why in line and "fix:" in line


@pytest.mark.parametrize("pair", ["NCCL IB=1", "LWS_WORKER_INDEX=1", "X=a\nb", "=1"])
def test_a_bad_env_flag_is_refused_at_the_flag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, pair: str
) -> None:
    pins = PINS
    base = render_args(target="k8s", job="serve", nodes=2, gpus=8, fabric="ib", pins=pins)
    assert main(["cluster", *base, "--env", pair, "--out", str(tmp_path / "x")]) == 2
    assert "--env" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_a_newline_in_a_mount_or_annotation_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pins = PINS
    base = render_args(target="k8s", job="serve", nodes=2, gpus=8, fabric="ib", pins=pins)
    for flag, value in (
        ("--model-mount", "/models\n- x"),
        ("--annotation", "a=b\nc"),
        ("--model-mount", "/a/../b"),
    ):
        assert main(["cluster", *base, flag, value, "--out", str(tmp_path / "x")]) == 2
        assert flag in capsys.readouterr().err


def test_out_is_never_the_env_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    env_file = tmp_path / "site.env"
    env_file.write_text("NCCL_IB_GID_INDEX=3\n")
    pins = PINS
    base = render_args(target="k8s", job="serve", nodes=2, gpus=8, fabric="ib", pins=pins)
    assert main(["cluster", *base, "--env-file", str(env_file), "--out", str(env_file)]) == 2
    assert env_file.read_text() == "NCCL_IB_GID_INDEX=3\n" and "--out" in capsys.readouterr().err


# ---- the flags' values as parsed -----------------------------------------------------------------


def test_a_host_directory_may_contain_a_colon() -> None:
    storage = parse_storage("host:/data/hf:v3", flag="--model-storage", name="model", mount="/models")
    assert storage == Storage(name="model", kind="host", source="/data/hf:v3", mount="/models")


def test_annotation_and_selector_values_keep_their_equals_signs() -> None:
    assert split_pairs(["a=b=c", "pool=h200"]) == {"a": "b=c", "pool": "h200"}


def test_an_env_value_keeps_its_equals_signs() -> None:
    assert env_pair("NCCL_IB_HCA==mlx5_0:1") == ("NCCL_IB_HCA", "=mlx5_0:1")


def test_a_bad_env_name_says_what_a_variable_name_is() -> None:
    with pytest.raises(ValueError) as info:
        env_pair("NCCL IB=1")
    assert str(info.value) == "not KEY=VALUE with KEY a variable name ([A-Za-z_][A-Za-z0-9_]*)"


def test_indented_comments_and_blank_lines_are_skipped_in_an_env_file(tmp_path: Path) -> None:
    env_file = tmp_path / "site.env"
    env_file.write_text("  # site settings\n   \nNCCL_IB_GID_INDEX=3\n\t# end\nX=\n")
    assert read_env_file(env_file) == [
        EnvLine(number=3, key="NCCL_IB_GID_INDEX", value="3"),
        EnvLine(number=5, key="X", value=""),
    ]


def test_a_missing_env_file_is_named_as_an_env_file(tmp_path: Path) -> None:
    with pytest.raises(BadInput) as info:
        read_env_file(tmp_path / "none.env")
    assert str(info.value) == f"{tmp_path / 'none.env'}: no such file; fix: pass the path of an env file"
