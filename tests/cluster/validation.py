"""Validate rendered Kubernetes objects: the real Kubernetes schemas (kubernetes-validate, strict) for
built-in kinds; for a LeaderWorkerSet, its pod templates against the real PodTemplate schema and the
rest against LWS_SCHEMA below; a PodMonitor against POD_MONITOR_SCHEMA.

LWS_SCHEMA is written here from the fields the LeaderWorkerSet CRD documents (kubernetes-sigs/lws,
api/leaderworkerset/v1/leaderworkerset_types.go: LeaderWorkerSetSpec, LeaderWorkerTemplate,
RolloutStrategy, NetworkConfig, their enums and minimums). The CRD itself is not committed (third-party
content) and cannot be fetched in CI (no GitHub), and no PyPI package carries it.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import kubernetes_validate

from epstack.cluster.k8s import K8S_VERSION, LWS_API
from epstack.cluster.k8sparts import MONITORING_API

_POD_TEMPLATE = {"type": "object"}  # checked separately, against Kubernetes' own PodTemplate schema

LWS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": LWS_API},
        "kind": {"const": "LeaderWorkerSet"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}
            },
        },
        "spec": {
            "type": "object",
            "required": ["leaderWorkerTemplate"],
            "additionalProperties": False,
            "properties": {
                "replicas": {"type": "integer", "minimum": 0},
                "startupPolicy": {"enum": ["LeaderCreated", "LeaderReady"]},
                "rolloutStrategy": {"type": "object"},
                "networkConfig": {
                    "type": "object",
                    "properties": {"subdomainPolicy": {"enum": ["Shared", "UniquePerReplica"]}},
                },
                "leaderWorkerTemplate": {
                    "type": "object",
                    "required": ["workerTemplate"],
                    "additionalProperties": False,
                    "properties": {
                        "leaderTemplate": _POD_TEMPLATE,
                        "workerTemplate": _POD_TEMPLATE,
                        "size": {"type": "integer", "minimum": 1},
                        "restartPolicy": {"enum": ["Default", "RecreateGroupOnPodRestart", "None"]},
                        "subGroupPolicy": {"type": "object"},
                        "volumeClaimTemplates": {"type": "array"},
                        "persistentVolumeClaimRetentionPolicy": {"type": "object"},
                    },
                },
            },
        },
    },
}


_DURATION = "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
_NAMESPACE = {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}
# Written from the fields the Prometheus Operator documents for PodMonitor (prometheus-operator,
# pkg/apis/monitoring/v1/podmonitor_types.go: PodMonitorSpec, PodMetricsEndpoint; the CRD's
# required `selector`, the endpoint's port name, path, and Duration pattern), the fields rendered here
# closed; the CRD is third-party content and is not committed.
POD_MONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": MONITORING_API},
        "kind": {"const": "PodMonitor"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
                "namespace": _NAMESPACE,  # set by a site's overlay (kustomize)
                "labels": _LABELS,
            },
        },
        "spec": {
            "type": "object",
            "required": ["selector"],
            "additionalProperties": False,
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": _LABELS},
                },
                "podMetricsEndpoints": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string", "minLength": 1},
                            "path": {"type": "string", "pattern": "^/"},
                            "interval": {
                                "type": "string",
                                "pattern": _DURATION,
                            },
                        },
                    },
                },
            },
        },
    },
}


def validate_object(obj: dict[str, Any]) -> None:
    """Raise on the first violation (jsonschema.ValidationError from either path)."""
    if obj.get("apiVersion") == MONITORING_API:
        jsonschema.validate(obj, POD_MONITOR_SCHEMA)
        return
    if obj.get("apiVersion") == LWS_API:
        jsonschema.validate(obj, LWS_SCHEMA)
        template = obj["spec"]["leaderWorkerTemplate"]
        for key in ("leaderTemplate", "workerTemplate"):
            if key in template:
                pod_template = {
                    "apiVersion": "v1",
                    "kind": "PodTemplate",
                    "metadata": {"name": f"{obj['metadata']['name']}-{key.lower()}"},
                    "template": template[key],
                }
                kubernetes_validate.validate(pod_template, K8S_VERSION, strict=True)
        return
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def images_of(obj: Any) -> list[str]:
    """Every value of an `image` key anywhere in the object."""
    found: list[str] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "image" and isinstance(value, str):
                found.append(value)
            else:
                found += images_of(value)
    elif isinstance(obj, list):
        for item in obj:
            found += images_of(item)
    return found
