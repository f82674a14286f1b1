"""A kustomize base beside the rendered manifests (`--kustomization`): a site patches it in an overlay of
its own instead of rendering again.

The base is `kustomization.yaml` listing the manifest file, headed by the patch points of these very
objects, one comment line each: where a site's namespace, image registry, node selector, tolerations,
shared model claim's storage class and RDMA device resource go, as kustomize's own fields (`namespace`,
`images`) or as JSON patches (op, target kind and name, path). The paths are read off the objects
rendered, so they name what is there: the LeaderWorkerSet's leader and worker templates, or the Job's
one. tests/cluster/test_kustomize.py builds an overlay from every patch point with kustomize itself
(kubectl's, pinned) and validates what it writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from epstack import __version__
from epstack.cluster.image import parse_image
from epstack.cluster.k8sparts import Obj
from epstack.cluster.yamltext import dump_all

FILE = "kustomization.yaml"
API = "kustomize.config.k8s.io/v1beta1"
GPU = "nvidia.com/gpu"


@dataclass(frozen=True, kw_only=True)
class PatchPoint:
    """One JSON patch a site may apply: `op` at `path` of the object `kind`/`name`; `source` is a move's
    `from`, `value` says what the site writes there."""

    what: str
    kind: str
    name: str
    op: str
    path: str
    source: str = ""
    value: str = ""

    def text(self) -> str:
        where = f"from {self.source} to {self.path}" if self.source else f"{self.path}"
        value = f", value {self.value}" if self.value else ""
        return f"{self.what}: op {self.op}, target {self.kind}/{self.name}, {where}{value}."


def pointer(*parts: str | int) -> str:
    """A JSON pointer (RFC 6901): '~' and '/' in a part escaped."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


def pod_specs(obj: Obj) -> list[tuple[tuple[str, ...], Obj]]:
    """The pod specs of an object and their paths: an LWS's leader and worker templates, a Job's,
    Deployment's or DaemonSet's template."""
    spec = obj.get("spec", {})
    if obj["kind"] == "LeaderWorkerSet":
        template = spec["leaderWorkerTemplate"]
        return [
            (("spec", "leaderWorkerTemplate", role, "spec"), template[role]["spec"])
            for role in ("leaderTemplate", "workerTemplate")
            if role in template
        ]
    if "template" in spec:
        return [(("spec", "template", "spec"), spec["template"]["spec"])]
    return []


def _pod_points(obj: Obj, rdma_resource: str) -> list[PatchPoint]:
    """Each pod spec's tolerations (the serve smoke's pod tolerates what the leader's node has); the node
    selector and RDMA resource of each that asks for GPUs."""
    points = []
    target = {"kind": obj["kind"], "name": obj["metadata"]["name"]}
    for path, spec in pod_specs(obj):
        if "tolerations" in spec:
            points.append(
                PatchPoint(
                    what="toleration", op="add", path=pointer(*path, "tolerations", "-"),
                    value="{key: KEY, operator: Exists, effect: NoSchedule}", **target,
                )
            )  # fmt: skip
        containers = spec["containers"]
        if not any(GPU in c.get("resources", {}).get("limits", {}) for c in containers):
            continue
        points.append(
            PatchPoint(
                what="node selector", op="add", path=pointer(*path, "nodeSelector"),
                value="{LABEL: VALUE} (replaces the map)", **target,
            )
        )  # fmt: skip
        for index, container in enumerate(containers):
            resources = container.get("resources", {})
            for part in ("limits", "requests"):
                if rdma_resource in resources.get(part, {}):
                    base = (*path, "containers", index, "resources", part)
                    points.append(
                        PatchPoint(
                            what="RDMA resource", op="move", source=pointer(*base, rdma_resource),
                            path=pointer(*base, "SITE_RESOURCE"), **target,
                        )
                    )  # fmt: skip
    return points


def patch_points(objects: list[Obj], rdma_resource: str) -> list[PatchPoint]:
    """Every patch point of `objects`: the pods' tolerations, the GPU pods' node selector and
    `rdma_resource` ("" when the job requests none), and the shared model claim's storage class."""
    points = []
    for obj in objects:
        if obj["kind"] == "PersistentVolumeClaim":
            points.append(
                PatchPoint(
                    what="storage class", kind=obj["kind"], name=obj["metadata"]["name"], op="add",
                    path=pointer("spec", "storageClassName"), value="CLASS (ReadWriteMany)",
                )
            )  # fmt: skip
        else:
            points += _pod_points(obj, rdma_resource)
    return points


def image_names(objects: list[Obj]) -> list[str]:
    """The repositories of every container's image, each once: what `images: - name:` matches."""
    names: dict[str, None] = {}
    for obj in objects:
        for _, spec in pod_specs(obj):
            for container in [*spec.get("initContainers", []), *spec["containers"]]:
                names[parse_image(container["image"], what="image").repository] = None
    return list(names)


def kustomization(objects: list[Obj], resource: str, *, rdma_resource: str) -> str:
    """kustomization.yaml listing `resource`, headed by the site's patch points for `objects`."""
    head = [
        f"Rendered by epstack {__version__}: a kustomize base. A site's overlay lists this folder under "
        "resources and patches it (kubectl apply -k OVERLAY) instead of rendering again.",
        "namespace: kustomize's `namespace: NAME`; it also names it in the router's RoleBinding "
        "(rendered for namespace default), and the router reads its own pod's.",
        "image registry: kustomize's `images: [{name: REPOSITORY, newName: MIRROR/REPOSITORY}]` keeps "
        f"each digest; repositories here: {', '.join(image_names(objects))}.",
        "The rest as JSON patches (`patches: [{target: {kind, name}, patch: '[{op, path, ...}]'}]`), "
        "SITE_RESOURCE written with '/' as '~1':",
        *(point.text() for point in patch_points(objects, rdma_resource)),
    ]
    body: dict[str, Any] = {"apiVersion": API, "kind": "Kustomization", "resources": [resource]}
    return dump_all([body], comments=head)
