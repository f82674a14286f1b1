"""A site's settings for a cluster job: storage (model / HF cache, JIT cache, results), environment,
network, scheduling and privileges. Flag values are parsed and checked here; epstack.cluster.k8s and
.slurm write them.

Storage is `host:DIR` (a node's directory), `pvc:CLAIM` (Kubernetes), `shared:SIZE` (Kubernetes, the
model only: a ReadWriteMany claim rendered with the job, filled once by epstack.cluster.modelfetch),
`ephemeral:SIZE` (a pod's own disk: an emptyDir of that size and an ephemeral-storage request) or `none`.

Secrets are references, never values: a Kubernetes Secret's key (`secretKeyRef`) or a whole Secret
(`envFrom`), or on Slurm a file on the node the batch script reads when the job runs. The defaults follow
public deployments (docs/guides/clusters.md): the model cache on the pod's ephemeral storage sized for the
model in Kubernetes (llm-d's wide-EP pods request ephemeral storage), a node directory on Slurm
(ai-dynamo's SGLang Slurm jobs mount the model directory); the JIT cache and the results on node
directories that outlive the pod or step (sgl-project/sglang's lws_pd examples mount a hostPath
cache, DirectoryOrCreate).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

from epstack import imagepaths
from epstack.credentials import credential
from epstack.errors import BadInput
from epstack.inputs import read_text
from epstack.smoke import launchenv as V

StorageKind = Literal["host", "pvc", "shared", "ephemeral"]
STORAGE_KINDS: tuple[StorageKind, ...] = ("host", "pvc", "shared", "ephemeral")
# Where each volume is mounted in the container.
MODEL_MOUNT = "/models"  # HF_HOME: hub ids download here once; --model-path may name a directory here
CACHE_MOUNT = str(imagepaths.JIT_CACHES)
RESULTS_MOUNT = "/var/lib/epstack/results"
# Node directories used unless told otherwise (beside `cluster prepull`'s /var/tmp/epstack images).
HOST_ROOT = "/var/tmp/epstack"
# Each JIT toolchain's cache variable and its folder under the cache mount (the names the guard's JIT
# probe uses): DeepEP, Triton, FlashInfer, DeepGEMM (SGLang sets DG_JIT_CACHE_DIR from
# SGLANG_DG_CACHE_DIR, so both name the folder), SGLang's own JIT.
JIT_CACHE_DIRS: tuple[tuple[str, str], ...] = (
    ("EP_JIT_CACHE_DIR", "deep_ep"),
    ("TRITON_CACHE_DIR", "triton"),
    ("FLASHINFER_WORKSPACE_BASE", "flashinfer"),
    ("DG_JIT_CACHE_DIR", "deep_gemm"),
    ("SGLANG_DG_CACHE_DIR", "deep_gemm"),
    ("SGLANG_JIT_CACHE_DIR", "sglang_jit"),
)
DEFAULT_CPUS_PER_GPU = 4  # llm-d's wide-EP pods request 32 CPUs for 8 GPUs
DEFAULT_STARTUP_TIMEOUT_S = 3600  # DeepSeek-V3: ~690 GB to fetch and load, then CUDA graphs
GPU_TAINT = "nvidia.com/gpu"  # GPU node pools' usual taint (EKS, GKE, the GPU operator's docs)
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SIZE = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
_DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")  # a Secret's data key
_LAUNCHER_NAMES = frozenset(v for k, v in vars(V).items() if k.isupper() and isinstance(v, str))
# Variables that choose which program, library or Python module runs in the container: the image's own
# (its guard vouches for what they pick); a site's value would run something the guard never checked.
IMAGE_OWNED = frozenset(
    {"PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP",
     "BASH_ENV", "ENV"}
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Storage:
    """A volume: what backs it (kind, source) and where the container sees it."""

    name: str  # the volume's name in a pod
    kind: StorageKind
    source: str  # a node directory, a claim name, or a size
    mount: str


@dataclass(frozen=True, kw_only=True)
class SecretRef:
    """A variable whose value only the platform holds: a Kubernetes Secret's key (secret, key), or a file
    on the node that the batch script reads when the job runs (path). Where it is, never what it is."""

    env: str
    secret: str = ""
    key: str = ""
    path: str = ""


@dataclass(frozen=True, kw_only=True)
class Site:
    """Everything about the cluster a job runs on that the job itself does not decide."""

    model: Storage | None = None
    cache: Storage | None = None
    results: Storage | None = None
    env: dict[str, str] = field(default_factory=dict)
    secrets: tuple[SecretRef, ...] = ()
    secret_env_from: tuple[str, ...] = ()  # Kubernetes Secrets whose every key becomes a variable
    annotations: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[str, ...] = (GPU_TAINT,)
    host_network: bool = False
    privileged: bool = False
    topology_key: str = ""
    cpus_per_gpu: int = DEFAULT_CPUS_PER_GPU
    startup_timeout_s: int = DEFAULT_STARTUP_TIMEOUT_S

    @property
    def volumes(self) -> tuple[Storage, ...]:
        return tuple(v for v in (self.model, self.cache, self.results) if v is not None)

    def volume_env(self, engine_caches: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
        """HF_HOME on the model volume and every JIT cache on the cache volume (`engine_caches`: those
        only the job's serving engine reads, epstack.smoke.serving.engines.Engine.caches)."""
        env = {"HF_HOME": self.model.mount} if self.model else {}
        if self.cache:
            caches = (*JIT_CACHE_DIRS, *engine_caches)
            env |= {key: str(PurePosixPath(self.cache.mount) / sub) for key, sub in caches}
        return env


def parse_storage(text: str, *, flag: str, name: str, mount: str) -> Storage | None:
    """`host:DIR`, `pvc:CLAIM`, `ephemeral:SIZE` or `none`; BadInput naming the flag otherwise."""
    if text == "none":
        return None
    kind, sep, source = text.partition(":")
    if not sep or kind not in STORAGE_KINDS or not source:
        raise BadInput(
            f"{flag} {text}: fix: write host:/DIR, pvc:CLAIM, ephemeral:SIZE (e.g. ephemeral:800Gi) or none"
        )
    if kind == "host" and not absolute_clean(source):
        raise BadInput(f"{flag} {text}: the node directory must be an absolute path; fix: write host:/DIR")
    if kind == "pvc" and not _DNS_NAME.fullmatch(source):
        raise BadInput(f"{flag} {text}: not a claim name; fix: lowercase letters, digits, '-' and '.'")
    if kind == "shared" and name != "model":
        raise BadInput(f"{flag} {text}: shared:SIZE is the model's volume; fix: write pvc:CLAIM or host:/DIR")
    if kind in ("ephemeral", "shared") and not _SIZE.fullmatch(source):
        raise BadInput(f"{flag} {text}: not a size; fix: write a Kubernetes quantity such as 800Gi")
    return Storage(name=name, kind=kind, source=source, mount=mount)


def _secret_name(text: str) -> str:
    """The variable's name of NAME=...: a shell-style name the launcher does not own."""
    name, sep, _ = text.partition("=")
    if not sep:
        raise ValueError("write NAME=...")
    env_pair(f"{name}=")
    return name


def secret_key_ref(text: str) -> SecretRef:
    """NAME=SECRET:KEY (Kubernetes); ValueError says what is wrong."""
    name = _secret_name(text)
    secret, sep, key = text.partition("=")[2].partition(":")
    if not sep or not _DNS_NAME.fullmatch(secret) or not _SECRET_KEY.fullmatch(key):
        raise ValueError("write NAME=SECRET:KEY (a Secret's name, one of its keys)")
    return SecretRef(env=name, secret=secret, key=key)


def secret_file(text: str) -> SecretRef:
    """NAME=/PATH (Slurm: a file on the node, read when the job runs); ValueError says what is wrong."""
    name = _secret_name(text)
    path = text.partition("=")[2]
    if not absolute_clean(path):
        raise ValueError("write NAME=/PATH, an absolute path without '..'")
    return SecretRef(env=name, path=path)


def secret_name(text: str) -> str:
    """A Kubernetes Secret's name (--secret-env-from)."""
    if not _DNS_NAME.fullmatch(text):
        raise ValueError("not a Secret name: lowercase letters, digits, '-' and '.'")
    return text


def dns_label(text: str) -> str:
    """A Kubernetes namespace's name (--namespace)."""
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", text):
        raise ValueError("not a namespace: up to 63 lowercase letters, digits and '-'")
    return text


def absolute_clean(path: str) -> bool:
    """An absolute path without `..`, so a mount names exactly the directory written."""
    return path.startswith("/") and ".." not in PurePosixPath(path).parts


def split_pairs(items: Iterable[str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in items)


def env_pair(line: str) -> tuple[str, str]:
    """KEY=VALUE with a shell-style name, the value taken literally (as docker --env-file does);
    ValueError says what is wrong. The caller checks the value is one line of text."""
    key, sep, value = line.partition("=")
    if not sep or not _ENV_KEY.fullmatch(key):
        raise ValueError("not KEY=VALUE with KEY a variable name ([A-Za-z_][A-Za-z0-9_]*)")
    if key in _LAUNCHER_NAMES:
        raise ValueError(f"{key} is set by the job's launcher (epstack.smoke.launchenv), not the site")
    if key in IMAGE_OWNED:
        raise ValueError(
            f"{key} picks which programs or libraries run, and the image's guard vouches for its own; a "
            "site's must not replace it (build an image with what you need)"
        )
    return key, value


@dataclass(frozen=True, kw_only=True)
class EnvLine:
    number: int
    key: str
    value: str


def read_env_file(path: Path) -> list[EnvLine]:
    """KEY=VALUE lines; blank lines and `#` comments skipped; a bad line is BadInput naming file:line."""
    lines = []
    for number, line in enumerate(read_text(path, what="an env file").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            key, value = env_pair(line)
        except ValueError as exc:
            raise env_file_error(path, number, str(exc)) from None
        lines.append(EnvLine(number=number, key=key, value=value))
    return lines


# Where a credential a job needs goes instead of a value a rendered file carries, per platform.
SECRET_FIX = {
    "k8s": "put it in a Secret and give --secret-env NAME=SECRET:KEY (or --secret-env-from SECRET)",
    "slurm": "put it in a file on the nodes and give --secret-file NAME=/PATH (read when the job runs)",
}


def screen(values: Iterable[tuple[str, str]], *, platform: str) -> None:
    """BadInput for the first (where, value) that holds a credential (epstack.credentials, the screen of
    pins and buildspecs): a rendered manifest or script is read by whoever can list the cluster's objects
    or the batch scripts. The value is never shown, only where it was given and its kind."""
    for where, value in values:
        kind = credential(value)
        if kind:
            raise BadInput(
                f"{where}: holds {kind} (not shown), which the rendered file would carry in plain text; "
                f"fix: {SECRET_FIX[platform]}"
            )


def env_file_error(path: Path, number: int, why: str) -> BadInput:
    return BadInput(
        f"{path}:{number}: {why}; fix: write one KEY=VALUE a line (the value is taken as written)"
    )
