"""What a platform team runs: SGLang's metrics and a PodMonitor, secrets by reference, the model fetched
once into a shared volume. DeepSeek-V3 on 2 x 8 GPUs, every object validated, every script run with the
srun stand-in, the fetch's lock run for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epstack import imagepaths
from epstack.cluster import modelfetch
from epstack.cluster.jobs import IMAGE_ENTRYPOINT
from epstack.commands.main import main
from epstack.smoke.serving import tinymodel
from tests.cluster import sglang_env
from tests.cluster.conftest import (
    IMAGE,
    ROUTER_IMAGE,
    check_cluster_golden,
    load_all,
    render,
    render_args,
)
from tests.cluster.test_slurm import _run_sbatch, _steps, _tool_checks
from tests.cluster.validation import validate_object
from tests.conftest import PINS

SECRET = "hf_epstackSECRETvalue0123456789"  # recognizable: must appear in no rendered file
REVISION = "0123456789abcdef0123456789abcdef01234567"
K8S_FLAGS = [
    "--profile", "deepseek-v3", "--model-revision", REVISION, "--storage-class", "efs-sc",
    "--secret-env", "HF_TOKEN=hf-token:token", "--secret-env-from", "site-proxy",
    "--pod-monitor", "--pod-monitor-label", "release=kube-prometheus-stack",
    "--router-image", ROUTER_IMAGE, "--namespace", "inference",
]  # fmt: skip


def _render(tmp_path: Path, target: str, *extra: str, job: str = "serve", name: str = "out") -> str:
    pins = PINS
    args = render_args(target=target, job=job, nodes=2, gpus=8, fabric="ib", pins=pins, extra=extra)
    return render(tmp_path, *args, name=name)


def _by(objects: list[dict[str, Any]], component: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["metadata"]["labels"]["app.kubernetes.io/component"] == component]


def _pod_specs(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    (workload,) = [o for o in _by(objects, "serve") if o["kind"] in ("Job", "LeaderWorkerSet")]
    if workload["kind"] == "Job":
        return [workload["spec"]["template"]["spec"]]
    template = workload["spec"]["leaderWorkerTemplate"]
    return [template["leaderTemplate"]["spec"], template["workerTemplate"]["spec"]]


def _secret_refs(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}


@pytest.mark.parametrize("kind", ["lws", "job"])
def test_k8s_deepseek_v3_with_every_feature_validates(tmp_path: Path, kind: str) -> None:
    objects = load_all(_render(tmp_path, "k8s", *K8S_FLAGS, "--k8s-kind", kind))
    for obj in objects:
        validate_object(obj)
    kinds = [o["kind"] for o in objects]
    assert kinds[:2] == ["PersistentVolumeClaim", "Job"] and kinds[-1] == "PodMonitor"
    (claim,) = _by(objects, "model")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["storageClassName"] == "efs-sc"
    assert claim["spec"]["resources"]["requests"]["storage"] == "800Gi"  # the profile's disk
    (fetch_job,) = _by(objects, "model-fetch")
    fetch = fetch_job["spec"]["template"]["spec"]
    (container,) = fetch["containers"]
    assert "nvidia.com/gpu" not in container["resources"].get("limits", {})
    assert _secret_refs(container) == {"HF_TOKEN": {"name": "hf-token", "key": "token"}}
    assert fetch["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    repo, revision, marker = container["command"][4:7]
    assert (repo, revision) == ("deepseek-ai/DeepSeek-V3", REVISION)
    for spec in _pod_specs(objects):
        (init,) = spec["initContainers"]
        assert init["name"] == "wait-for-model" and init["command"][-1] == marker
        serve = spec["containers"][0]
        args = serve["args"]
        assert args[args.index("--revision") + 1] == REVISION and "--enable-metrics" in args
        assert _secret_refs(serve) == {"HF_TOKEN": {"name": "hf-token", "key": "token"}}
        assert serve["envFrom"] == [{"secretRef": {"name": "site-proxy"}}]
        env = {e["name"]: e.get("value") for e in serve["env"]}
        assert env["HF_HUB_OFFLINE"] == "1" and env["HF_HOME"] == "/models"
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["model"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    monitor, router_monitor = _by(objects, "metrics")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s"}]
    # It scrapes node 0, the pod the HTTP Service routes to; the router's on its metrics port.
    (service,) = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"].endswith("-http")]
    assert monitor["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    (deployment,) = _by(objects, "router")[3:4]
    assert router_monitor["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert router_monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    assert router_monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_golden_deepseek_v3_production_lws(tmp_path: Path) -> None:
    check_cluster_golden(_render(tmp_path, "k8s", *K8S_FLAGS), "serve-lws-deepseek-v3-production-2x8.yaml")


def test_one_pod_keeps_its_own_disk_and_a_node_directory_fetches_in_each_pod(tmp_path: Path) -> None:
    pins = PINS
    one = load_all(
        render(tmp_path, *render_args(target="k8s", job="serve", nodes=1, gpus=8, fabric="ib", pins=pins))
    )
    assert not _by(one, "model") and not _by(one, "model-fetch")
    assert "initContainers" not in _pod_specs(one)[0]
    host = load_all(_render(tmp_path, "k8s", "--model-storage", "host:/data/hf", name="host"))
    assert not _by(host, "model-fetch")  # a Job would fill one node's directory only
    for spec in _pod_specs(host):
        (init,) = spec["initContainers"]
        assert init["name"] == "fetch-model" and init["command"][:2] == ["/bin/sh", "-c"]
    # Weights named by path: nothing to fetch, no claim made.
    local = load_all(_render(tmp_path, "k8s", "--model-path", "/models/DeepSeek-V3", name="local"))
    assert not _by(local, "model") and not _by(local, "model-fetch")
    assert "initContainers" not in _pod_specs(local)[0]


def test_the_tiny_model_is_written_where_the_server_reads_it(tmp_path: Path) -> None:
    """The tiny profile's generated model: each pod writes it into its own disk (the default) or its
    node's directory; on a claim every pod mounts, a Job writes it once and the pods wait; nowhere to
    write it is bad input."""
    key = tinymodel.key(tinymodel.config_text(), tinymodel.SEED)
    marker = f"/models/.epstack-fetched/tiny-qwen3-moe@{key}"
    own = load_all(_render(tmp_path, "k8s", "--profile", "tiny", name="own"))
    assert not _by(own, "model") and not _by(own, "model-fetch")
    for spec in _pod_specs(own):
        (init,) = spec["initContainers"]
        assert init["name"] == "write-model"
        assert init["command"][3:] == [
            "epstack-write",
            "/models/tiny-qwen3-moe",
            "0",
            marker,
            "/models/.epstack-fetch.lock",
        ]
        assert f"{imagepaths.COMMAND} smoke tiny-model --out-dir" in init["command"][2]
        assert {"name": "model", "mountPath": "/models"} in init["volumeMounts"]
        (server,) = spec["containers"]
        assert server["resources"]["requests"]["ephemeral-storage"] == "8Gi"
        assert "--load-format" not in json.dumps(server)
    shared = load_all(
        _render(tmp_path, "k8s", "--profile", "tiny", "--model-storage", "shared:8Gi", name="sh")
    )
    (writer,) = _by(shared, "model-fetch")
    assert writer["spec"]["template"]["spec"]["containers"][0]["command"][3] == "epstack-write"
    for spec in _pod_specs(shared):
        (init,) = spec["initContainers"]
        assert init["name"] == "wait-for-model" and init["command"][-1] == marker
    pins = PINS
    flags = ("--profile", "tiny", "--model-storage", "none")
    args = render_args(target="k8s", job="serve", nodes=2, gpus=8, fabric="ib", pins=pins, extra=flags)
    assert main(["cluster", *args, "--out", str(tmp_path / "none")]) == 2
    assert not (tmp_path / "none").exists()


def test_slurm_deepseek_v3_fetches_then_serves_with_the_secret_read_at_run_time(tmp_path: Path) -> None:
    token = tmp_path / "hf-token"
    token.write_text(SECRET)
    script = _render(
        tmp_path, "slurm", "--profile", "deepseek-v3", "--model-revision", REVISION,
        "--secret-file", f"HF_TOKEN={token}",
    )  # fmt: skip
    _tool_checks(script, tmp_path)
    check_cluster_golden(
        script.replace(str(token), "/etc/epstack/hf-token"), "serve-deepseek-v3-fetch-ib-2x8.sbatch"
    )
    assert SECRET not in script
    steps = _steps(tmp_path, script, nodes=2)
    fetch = [s for s in steps if s["argv"][:2] == ["/bin/sh", "-c"]]
    server = [s for s in steps if "sglang" in " ".join(s["argv"])]
    assert [s["env"]["SLURM_NODEID"] for s in fetch] == ["0", "1"]  # every node, before the servers
    assert steps.index(fetch[-1]) < steps.index(server[0])
    assert fetch[0]["argv"][4:6] == ["deepseek-ai/DeepSeek-V3", REVISION]
    for task in fetch + server:
        # The value reaches the tasks through the environment; the script only names the file.
        assert task["env"]["HF_TOKEN"] == SECRET
        assert "HF_TOKEN" in task["opts"]["container-env"].split(",")
    assert all(task["env"]["HF_HUB_OFFLINE"] == "1" for task in server)
    assert "http://$MASTER_ADDR:30000/metrics" in script


def test_slurm_gives_a_secret_to_the_fetch_and_the_servers_only(tmp_path: Path) -> None:
    """srun passes the batch script's environment to every step: the secret read from its file is not
    in it, but in the environment of the steps that need it (the router and the serve smoke do not)."""
    token = tmp_path / "hf-token"
    token.write_text(SECRET)
    script = _render(
        tmp_path, "slurm", "--model-revision", REVISION, "--secret-file", f"HF_TOKEN={token}",
        "--router-image", ROUTER_IMAGE,
    )  # fmt: skip
    _tool_checks(script, tmp_path)
    steps = _steps(tmp_path, script, nodes=2)
    given = {" ".join(task["argv"][:3]) for task in steps if "HF_TOKEN" in task["env"]}
    kept_from = {" ".join(task["argv"][:3]) for task in steps if "HF_TOKEN" not in task["env"]}
    assert given == {f"/bin/sh -c {modelfetch.FETCH_SCRIPT}", " ".join((*IMAGE_ENTRYPOINT, "bash"))}
    assert {"mkdir -p --", "smg launch --host"} <= kept_from and any("smoke serve" in t for t in kept_from)
    assert all(task["env"]["HF_TOKEN"] == SECRET for task in steps if "HF_TOKEN" in task["env"])


def test_slurm_stops_before_any_step_when_the_secret_file_is_missing(tmp_path: Path) -> None:
    script = _render(tmp_path, "slurm", "--secret-file", "HF_TOKEN=/nonexistent/token")
    result = _run_sbatch(tmp_path, script, nodes=2)
    assert result.returncode == 1
    assert (
        "--secret-file HF_TOKEN=/nonexistent/token: not readable" in result.stderr and "fix:" in result.stderr
    )
    assert not (tmp_path / "srun.jsonl").exists()


def test_no_rendered_file_holds_a_secret_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The value in the process's environment, in the secret file, under every name a secret flag takes:
    no manifest, script or printed command carries it."""
    token = tmp_path / "token"
    token.write_text(SECRET + "\n")
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "SITE_KEY"):
        monkeypatch.setenv(name, SECRET)
    k8s_secrets = [
        "--secret-env",
        "HF_TOKEN=hf:token",
        "--secret-env",
        "SITE_KEY=site:key",
        "--secret-env-from",
        "hf",
    ]
    slurm_secrets = ["--secret-file", f"HF_TOKEN={token}", "--secret-file", f"SITE_KEY={token}"]
    outputs = []
    for kind in ("lws", "job"):
        for storage in ("shared:800Gi", "host:/data/hf", "pvc:weights", "ephemeral:800Gi"):
            extra = [*k8s_secrets, "--k8s-kind", kind, "--model-storage", storage, "--pod-monitor"]
            outputs.append(_render(tmp_path, "k8s", *extra, name=f"{kind}-{storage[:4]}"))
    for mode in ("on", "exit", "off"):
        outputs.append(
            _render(tmp_path, "slurm", *slurm_secrets, "--serve-smoke", mode, name=f"slurm-{mode}")
        )
    outputs.append(_render(tmp_path, "slurm", *slurm_secrets, "--print-command", name="print"))
    outputs.append(_render(tmp_path, "slurm", *slurm_secrets, job="elastic-smoke", name="smoke"))
    assert len(outputs) == 13
    for text in outputs:
        assert SECRET not in text and "hf_epstack" not in text
    assert any("secretKeyRef" in text for text in outputs) and any(str(token) in text for text in outputs)


# ---- the fetch's lock, run for real (sh, flock, a stand-in hf) ----------------------------------

# The stand-in `hf` logs its call, then (with FAKE_HF_RELEASE) downloads until that file exists: the test
# decides when the download ends, and knows it is under way (holding the fetch's lock) from the log.
FAKE_HF = """#!/bin/sh
echo "$HF_HUB_OFFLINE $*" >> "$FAKE_HF_LOG"
while [ -n "${FAKE_HF_RELEASE:-}" ] && [ ! -e "$FAKE_HF_RELEASE" ]; do sleep 0.05; done
"""


def _fetch_env(tmp_path: Path, release: Path | None = None) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "hf").write_text(FAKE_HF)
    (bin_dir / "hf").chmod(0o755)
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_HF_LOG": str(tmp_path / "hf.log"),
        "FAKE_HF_RELEASE": str(release or ""),
        "HF_HUB_OFFLINE": "1",  # inherited from the servers' environment: the fetch turns it off
    }


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout_s} s"
        time.sleep(0.01)


def test_two_fetches_of_one_volume_download_once(tmp_path: Path) -> None:
    """The first fetch is downloading (its `hf` logged, under the lock) before the second starts, and
    finishes only once the second waits: whatever the machine's load, the second finds the marker."""
    fetch = modelfetch.Fetch(
        repo="deepseek-ai/DeepSeek-V3", revision=REVISION, mount=str(tmp_path / "models")
    )
    release, log = tmp_path / "release", tmp_path / "hf.log"
    env = _fetch_env(tmp_path, release)
    with subprocess.Popen(fetch.command(), env=env, stdout=subprocess.DEVNULL) as first:
        _wait_for(log.exists, "the first fetch's download starts")
        with subprocess.Popen(fetch.command(), env=env, stdout=subprocess.PIPE, text=True) as second:
            release.touch()
            out, _ = second.communicate(timeout=30)
            assert first.wait(timeout=30) == 0 and second.returncode == 0
    assert "is here already" in out
    assert (tmp_path / "hf.log").read_text().splitlines() == [
        f"0 download deepseek-ai/DeepSeek-V3 --revision {REVISION}"
    ]
    assert Path(fetch.marker).exists()
    waited = subprocess.run(fetch.wait_command(), capture_output=True, text=True, timeout=5, check=True)
    assert waited.returncode == 0 and not waited.stdout


def test_a_failed_download_leaves_no_marker(tmp_path: Path) -> None:
    fetch = modelfetch.Fetch(repo="org/model", revision="", mount=str(tmp_path / "models"))
    env = _fetch_env(tmp_path) | {"PATH": f"{tmp_path / 'nothing'}:/usr/bin:/bin"}
    (tmp_path / "nothing").mkdir()
    (tmp_path / "nothing" / "hf").write_text("#!/bin/sh\nexit 3\n")
    (tmp_path / "nothing" / "hf").chmod(0o755)
    assert subprocess.run(fetch.command(), env=env, capture_output=True, check=False).returncode == 3
    assert not Path(fetch.marker).exists() and fetch.marker.endswith("org--model@default")


@pytest.mark.network
def test_the_fetch_runs_the_pinned_hf_cli_with_arguments_it_takes(tmp_path: Path) -> None:
    """The fetch script with the real `hf` of huggingface_hub 1.33.0 (locks/sglang.txt's, installed with the
    SGLang parser), kept offline by the stand-in that starts it: the download is refused for being
    offline, not for its arguments (a misspelt flag would be typer's usage error, exit 2)."""
    hub = sglang_env.ensure()
    assert (hub / "huggingface_hub-1.33.0.dist-info").is_dir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    start = f'{sys.executable} -c "from huggingface_hub.cli.hf import main; main()"'
    shim = f'#!/bin/sh\nHF_HUB_OFFLINE=1 PYTHONPATH={hub} exec {start} "$@"\n'
    (bin_dir / "hf").write_text(shim)
    (bin_dir / "hf").chmod(0o755)
    fetch = modelfetch.Fetch(
        repo="deepseek-ai/DeepSeek-V3", revision=REVISION, mount=str(tmp_path / "models")
    )
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HF_HOME": fetch.mount, "NO_COLOR": "1"}
    result = subprocess.run(
        fetch.command(), env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 1, result.stderr
    assert f"DeepSeek-V3/tree/{REVISION}" in result.stderr and "offline mode is enabled" in result.stderr
    assert not Path(fetch.marker).exists()


# ---- bad input: one line, exit 2, nothing written -------------------------------------------------


@pytest.mark.parametrize(
    ("target", "args", "text"),
    [
        ("k8s", ["--secret-file", "HF_TOKEN=/etc/token"], "--secret-file: Slurm reads a node's file"),
        ("slurm", ["--secret-env", "HF_TOKEN=hf:token"], "fix: on Slurm use --secret-file NAME=/PATH"),
        ("k8s", ["--namespace", "inference"], "fix: add --router-image"),
        ("k8s", ["--storage-class", "efs-sc", "--model-storage", "pvc:weights"], "--storage-class"),
        ("slurm", ["--pod-monitor"], "--pod-monitor: Kubernetes pod settings"),
        ("slurm", ["--model-storage", "shared:800Gi"], "Slurm mounts node directories only"),
        ("k8s", ["--cache-storage", "shared:10Gi"], "shared:SIZE is the model's volume"),
        ("k8s", ["--pod-monitor-label", "a=b"], "fix: add --pod-monitor"),
        ("k8s", ["--secret-env", "HF_TOKEN=a:b", "--env", "HF_TOKEN=x"], "given twice"),
        ("k8s", ["--secret-env", "HF_TOKEN=a:b", "--secret-env", "HF_TOKEN=c:d"], "given twice"),
        ("k8s", ["--secret-env", "HF_TOKEN=Bad_Name:key"], "--secret-env"),
        ("k8s", ["--secret-env", "HF_TOKEN=hf"], "NAME=SECRET:KEY"),
        ("k8s", ["--secret-env", "LWS_WORKER_INDEX=a:b"], "set by the job's launcher"),
        ("slurm", ["--secret-file", "HF_TOKEN=relative/token"], "absolute path"),
        ("k8s", ["--model-revision", "main; rm -rf /"], "--model-revision"),
        ("k8s", ["--model-revision", "refs/../../etc"], "--model-revision"),
        ("k8s", ["--router-image", "registry.example/smg:latest"], "--router-image"),
        ("k8s", ["--router-image", ROUTER_IMAGE, "--namespace", "Prod_1"], "not a namespace"),
        ("k8s", ["--replicas", "2", "--k8s-kind", "job"], "fix: --k8s-kind lws"),
        ("slurm", ["--router-image", ROUTER_IMAGE, "--namespace", "x"], "--namespace: Kubernetes pod"),
        ("slurm", ["--router-image", "registry.example/smg:latest"], "--router-image"),
        ("k8s", ["--env", "PATH=/opt/site/bin:/usr/bin"], "PATH picks which programs or libraries run"),
        ("slurm", ["--env", "LD_PRELOAD=/site/hook.so"], "LD_PRELOAD picks which programs or libraries"),
        ("k8s", ["--secret-env", "LD_LIBRARY_PATH=a:b"], "LD_LIBRARY_PATH picks which programs"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, target: str, args: list[str], text: str
) -> None:
    pins = PINS
    base = render_args(target=target, job="serve", nodes=2, gpus=8, fabric="ib", pins=pins)
    out = tmp_path / "never"
    assert main(["cluster", *base, *args, "--out", str(out)]) == 2
    assert not out.exists()
    # BadInput is one line; a flag's own check is argparse's usage, then its one `error:` line.
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(("error: ", "epstack cluster render: error: ")) and text in last, last


@pytest.mark.parametrize(
    "case",
    [
        ("k8s", "--model-revision", "main"),
        ("k8s", "--storage-class", "efs-sc"),
        ("k8s", "--pod-monitor-label", "release=x"),
        ("k8s", "--secret-env", "HF_TOKEN=hf:token"),
        ("k8s", "--secret-env-from", "hf"),
        ("k8s", "--router-image", ROUTER_IMAGE),
        ("k8s", "--namespace", "inference"),
        ("slurm", "--secret-file", "HF_TOKEN=/etc/token"),
        ("slurm", "--router-image", ROUTER_IMAGE),
    ],
)
@pytest.mark.parametrize("breaker", ["\n", "\r", "\x1b[31m", "\u2028"])
def test_every_new_text_flag_refuses_line_breaks_and_controls(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: tuple[str, str, str], breaker: str
) -> None:
    target, flag, value = case
    pins = PINS
    base = render_args(target=target, job="serve", nodes=2, gpus=8, fabric="ib", pins=pins)
    out = tmp_path / "never"
    assert main(["cluster", *base, f"{flag}={value}{breaker}x", "--out", str(out)]) == 2
    assert f"argument {flag}" in capsys.readouterr().err and not out.exists()


def test_a_revision_with_slashes_names_one_marker_file() -> None:
    fetch = modelfetch.Fetch(repo="org/model", revision="refs/pr/1", mount="/models")
    assert fetch.marker == "/models/.epstack-fetched/org--model@refs--pr--1"


@pytest.mark.parametrize("flags", [["--pod-monitor"], ["--router-image", ROUTER_IMAGE], ["--replicas", "2"]])
def test_monitor_and_router_are_for_serve(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: list[str]
) -> None:
    pins = PINS
    base = render_args(target="k8s", job="elastic-smoke", nodes=2, gpus=8, fabric="ib", pins=pins)
    assert main(["cluster", *base, *flags, "--out", str(tmp_path / "x")]) == 2
    assert "fix: use it with --job serve" in capsys.readouterr().err


def test_the_metrics_command_reads_what_the_serve_smoke_job_writes(tmp_path: Path) -> None:
    """The serve smoke's report, as the cluster job names it, turns into a textfile for node_exporter."""
    report = tmp_path / "epstack-serve-smoke.json"
    report.write_text(json.dumps({"schema": "serve-smoke/1", "verdict": "fail", "checks": []}))
    out = tmp_path / "epstack-serve-smoke.prom"
    assert main(["cluster", "metrics", "--report", str(report), "--out", str(out)]) == 0
    assert 'epstack_report_passed{report="serve_smoke"' in out.read_text() and out.read_text().endswith(
        "# EOF\n"
    )


HF = "hf_" + "Q" * 34  # the shape of a Hugging Face token, no real one
GITHUB = "ghp_" + "Z" * 36


@pytest.mark.parametrize("target", ["k8s", "slurm"])
@pytest.mark.parametrize(
    ("args", "where", "kind"),
    [
        (["--env", f"HF_TOKEN={HF}"], "--env HF_TOKEN", "a Hugging Face token"),
        (["--env", f"AUTH=Bearer {GITHUB}"], "--env AUTH", "a GitHub token"),
        (["--model-path", f"https://me:{GITHUB}@models.example/ds"], "--model-path", "a user or token"),
        (["--env-file", "site.env"], "site.env:2: HF_TOKEN", "a Hugging Face token"),
        (["--annotation", f"site/token={GITHUB}"], "--annotation site/token", "a GitHub token"),
        (["--name", f"job-{HF}"], "--name", "a Hugging Face token"),
    ],
)  # fmt: skip
def test_a_secret_value_is_refused_before_any_file_holds_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, target: str, args: list[str], *, where: str, kind: str
) -> None:
    (tmp_path / "site.env").write_text(f"NCCL_IB_HCA=mlx5_0\nHF_TOKEN={HF}\n")
    pins = PINS
    base = render_args(target=target, job="serve", nodes=2, gpus=8, fabric="ib", pins=pins)
    out = tmp_path / "job.out"
    args = [str(tmp_path / arg) if arg == "site.env" else arg for arg in args]
    assert main(["cluster", *base, *args, "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    fix = "--secret-env NAME=SECRET:KEY" if target == "k8s" else "--secret-file NAME=/PATH"
    assert line.startswith(
        f"error: {tmp_path / where if where.startswith('site.env') else where}: holds {kind}"
    )
    assert fix in line and HF not in line and GITHUB not in line and not out.exists()


def test_a_secret_is_refused_in_a_pull_plan_too(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["cluster", "pull", "--pins", str(PINS), "--platform", "k8s", "--image", IMAGE]
    assert main([*argv, "--node-selector", f"token={GITHUB}"]) == 2
    assert "--node-selector token: holds a GitHub token (not shown)" in capsys.readouterr().err
