"""One download of a serve job's weights into its model volume, before any server of the job starts (or,
for a profile whose model epstack generates, one write of it).

With a hub id for the model and a volume the pods or nodes keep (`shared:SIZE`, `pvc:CLAIM`, `host:DIR`),
the weights are fetched once, by `hf download` (huggingface_hub, in the image) at the pinned revision
(`--model-revision`), under a lock file in the volume: a second fetch of the same volume waits for the
first and then finds its marker, the file written last. The servers wait for that marker and run with
HF_HUB_OFFLINE=1, so no pod downloads on its own. Kubernetes runs the fetch as a Job of its own and each
serve pod waits in an init container; Slurm runs it as a step on every node before the server step (a
node-local directory is filled on each node, a shared one once). A per-pod disk (`ephemeral:SIZE`) or a
local path (`--model-path /models/...`) has no fetch: SGLang reads or downloads as it always did.

The tiny profile's model is written, not fetched: `epstack smoke tiny-model` (epstack.smoke.serving.
tinymodel, the image's torch and safetensors) under the same lock and marker, the marker named after the
folder's key (its config, seed and writer). On a volume every pod mounts, once, by the fetch Job or step;
on a pod's own disk (`ephemeral:SIZE`) or a node's directory, by each pod's init container (a node
directory: once a node). It needs a model volume: the server reads what the init container wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from epstack import imagepaths
from epstack.cluster.site import Storage
from epstack.errors import BadInput
from epstack.smoke.serving import tinymodel
from epstack.smoke.serving.profiles import ServePlan

LOCK = ".epstack-fetch.lock"
MARKERS = ".epstack-fetched"
PROGRAM = "hf"  # huggingface_hub's CLI, in the image's venv beside sglang
# Once per volume: $3 marker, $4 lock file, {what} and {step} from $1 and $2. flock(1) is util-linux's, in
# every Ubuntu image.
_ONCE = (
    'set -eu; mkdir -p "$(dirname "$3")"; exec 9>"$4"; flock 9; '
    'if [ -e "$3" ]; then echo "epstack: {what} is here already ($3)"; exit 0; fi; '
    '{step}; touch "$3"'
)
# $1 repo, $2 revision (may be empty: the hub's default branch). HF_HUB_OFFLINE=0: the servers'
# HF_HUB_OFFLINE=1 may be inherited (a Slurm step gets the batch script's environment).
FETCH_SCRIPT = _ONCE.format(
    what="$1 ${2:-(default branch)}", step=f'HF_HUB_OFFLINE=0 {PROGRAM} download "$1" ${{2:+--revision "$2"}}'
)
# $1 the generated model's folder, $2 its seed.
WRITE_SCRIPT = _ONCE.format(
    what="$1 (seed $2)", step=f'{imagepaths.COMMAND} smoke tiny-model --out-dir "$1" --seed "$2"'
)
WAIT_SCRIPT = 'until [ -e "$1" ]; do echo "epstack: waiting for the model fetch ($1)"; sleep 30; done'
SHARED_KINDS = ("shared", "pvc", "host")


@dataclass(frozen=True, kw_only=True)
class Fetch:
    repo: str  # a hub id, e.g. deepseek-ai/DeepSeek-V3; or the generated model's folder
    revision: str  # a commit or branch; "" for the hub's default branch (not pinned); a generated one's key
    mount: str  # the model volume in the container (HF_HOME)
    generated: bool = False  # written by `epstack smoke tiny-model`, not downloaded

    @property
    def marker(self) -> str:
        what = PurePosixPath(self.repo).name if self.generated else self.repo
        name = f"{what}@{self.revision or 'default'}".replace("/", "--")  # one file, in MARKERS
        return str(PurePosixPath(self.mount) / MARKERS / name)

    @property
    def lock(self) -> str:
        return str(PurePosixPath(self.mount) / LOCK)

    def command(self) -> list[str]:
        if self.generated:
            args = [WRITE_SCRIPT, "epstack-write", self.repo, str(tinymodel.SEED)]
        else:
            args = [FETCH_SCRIPT, "epstack-fetch", self.repo, self.revision]
        return ["/bin/sh", "-c", *args, self.marker, self.lock]

    def wait_command(self) -> list[str]:
        return ["/bin/sh", "-c", WAIT_SCRIPT, "epstack-wait", self.marker]


def fetch_of(plan: ServePlan | None, model: Storage | None) -> Fetch | None:
    """A serve job's fetch: its model a hub id on a volume kept beyond one pod, or the generated one at
    its profile's path on any model volume; else None (a folder named by path is read as it is). The
    generated one's path outside a model volume is BadInput."""
    if plan is None or (plan.model_path != plan.profile.model_path and plan.profile.generated):
        return None
    if plan.profile.generated:
        if model is None or not PurePosixPath(plan.model_path).is_relative_to(model.mount):
            where = "no model volume" if model is None else f"the model volume at {model.mount}"
            raise BadInput(
                f"--profile {plan.profile.name}: its model is written into {plan.model_path} before the "
                f"server starts, and {where} does not hold it; fix: keep the default --model-storage "
                f"and --model-mount {PurePosixPath(plan.model_path).parent}"
            )
        key = tinymodel.key(tinymodel.config_text(), tinymodel.SEED)
        return Fetch(repo=plan.model_path, revision=key, mount=model.mount, generated=True)
    if model is None or model.kind not in SHARED_KINDS or plan.model_path.startswith("/"):
        return None
    return Fetch(repo=plan.model_path, revision=plan.model_revision or "", mount=model.mount)


def in_each_pod(fetch: Fetch, model: Storage) -> bool:
    """Whether each pod's init container fetches (a node's directory, once a node; a generated model on a
    pod's own disk), rather than a Job of its own once for a volume every pod mounts."""
    return model.kind == "host" or (fetch.generated and model.kind == "ephemeral")


def name(job_name: str) -> str:
    """The Kubernetes Job's name."""
    return f"{job_name}-fetch"


def claim(job_name: str) -> str:
    """The claim `shared:SIZE` renders and mounts."""
    return f"{job_name}-models"


def note(fetch: Fetch) -> str:
    if fetch.generated:
        return (
            f"Model: {fetch.repo}, written by `epstack smoke tiny-model` (seed {tinymodel.SEED}, key "
            f"{fetch.revision}) under the lock {fetch.lock}; servers start once {fetch.marker} is there."
        )
    pinned = (
        f"revision {fetch.revision}"
        if fetch.revision
        else "its default branch, NOT pinned (--model-revision)"
    )
    return (
        f"Model: {fetch.repo} at {pinned}, fetched once into {fetch.mount} ({PROGRAM} download, lock "
        f"{fetch.lock}); servers start once {fetch.marker} is there, with HF_HUB_OFFLINE=1."
    )
