"""Kubernetes' rules for the names and quantities a job carries, as the API server applies them: what
it refuses is refused at the flag (exit 2, naming it), before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from epstack.cluster import k8snames
from epstack.commands.main import main
from tests.cluster.conftest import IMAGE

GOOD = {
    k8snames.quantity: ["256Gi", "64Gi", "512Mi", "1.5T", "100", "1e3", "0.5Gi", "2Ei"],
    k8snames.qualified_name: ["topology.kubernetes.io/zone", "nvidia.com/gpu", "rack", "a_b.c-d"],
    k8snames.label_value: ["p5.48xlarge", "", "a-b_c.d"],
    k8snames.extended_resource: ["rdma/ib", "vpc.amazonaws.com/efa", "rdma/hca_shared_devices_a"],
    k8snames.dns_subdomain: ["efs-sc", "fsx.lustre", "a"],
}
BAD = {
    k8snames.quantity: ["lots", "256GiB", "0", "-1Gi", "Gi", "1 Gi", ".", "1.5.1Gi"],
    k8snames.qualified_name: ["a b", "-rack", "Example.com/x", "/x", "x/", "a/b/c", "x" * 64],
    k8snames.label_value: ["p5 48xlarge", "-a", "x" * 64],
    k8snames.extended_resource: ["rdma ib", "ib", "kubernetes.io/gpu", "foo.kubernetes.io/x"],
    k8snames.dns_subdomain: ["EFS", "efs_sc", "-a", "a" * 254],
}


@pytest.mark.parametrize(("check", "text"), [(c, t) for c, texts in GOOD.items() for t in texts])
def test_what_kubernetes_accepts_passes(check: object, text: str) -> None:
    assert check(text) == text  # type: ignore[operator]


@pytest.mark.parametrize(("check", "text"), [(c, t) for c, texts in BAD.items() for t in texts])
def test_what_kubernetes_refuses_is_refused_with_a_fix(check: object, text: str) -> None:
    with pytest.raises(ValueError, match="fix: "):
        check(text)  # type: ignore[operator]


RENDER = ["cluster", "render", "--platform", "k8s", "--job", "serve", "--nodes", "1", "--gpus-per-node", "8"]


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--memory", "lots"),
        ("--shm-size", "huge"),
        ("--rdma-resource", "rdma ib"),
        ("--storage-class", "EFS"),
        ("--instance-type", "p5 48xlarge"),
        ("--topology-key", "a b"),
        ("--toleration", "no such key"),
        ("--node-selector", "pool=gpu nodes"),
        ("--annotation", "bad key=x"),
        ("--pod-monitor-label", "release=a b"),
        ("--replicas", "1000000"),
        ("--cpus-per-gpu", "4096"),
        ("--startup-timeout", "99999999"),
    ],
)
def test_a_value_kubernetes_refuses_exits_2_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    out = tmp_path / "serve.yaml"
    assert main([*RENDER, "--image", IMAGE, flag, value, "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: argument {flag}: ") and "fix: " in line, line
    assert not out.exists()
