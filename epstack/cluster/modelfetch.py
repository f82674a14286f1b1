"""One download of a serve job's weights into its model volume, before any server of the job starts.

With a hub id for the model and a volume the pods or nodes keep (`shared:SIZE`, `pvc:CLAIM`, `host:DIR`),
the weights are fetched once, by `hf download` (huggingface_hub, in the image) at the pinned revision
(`--model-revision`), under a lock file in the volume: a second fetch of the same volume waits for the
first and then finds its marker, the file written last. The servers wait for that marker and run with
HF_HUB_OFFLINE=1, so no pod downloads on its own. Kubernetes runs the fetch as a Job of its own and each
serve pod waits in an init container; Slurm runs it as a step on every node before the server step (a
node-local directory is filled on each node, a shared one once). A per-pod disk (`ephemeral:SIZE`) or a
local path (`--model-path /models/...`) has no fetch: SGLang reads or downloads as it always did.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from epstack.cluster.site import Storage
from epstack.smoke.serving.profiles import ServePlan

LOCK = ".epstack-fetch.lock"
MARKERS = ".epstack-fetched"
PROGRAM = "hf"  # huggingface_hub's CLI, in the image's venv beside sglang
# $1 repo, $2 revision (may be empty: the hub's default branch), $3 marker, $4 lock file. flock(1) is
# util-linux's, in every Ubuntu image. HF_HUB_OFFLINE=0: the servers' HF_HUB_OFFLINE=1 may be inherited
# (a Slurm step gets the batch script's environment).
FETCH_SCRIPT = (
    'set -eu; mkdir -p "$(dirname "$3")"; exec 9>"$4"; flock 9; '
    'if [ -e "$3" ]; then echo "epstack: $1 ${2:-(default branch)} is here already ($3)"; exit 0; fi; '
    f'HF_HUB_OFFLINE=0 {PROGRAM} download "$1" ${{2:+--revision "$2"}}; touch "$3"'
)
WAIT_SCRIPT = 'until [ -e "$1" ]; do echo "epstack: waiting for the model fetch ($1)"; sleep 30; done'
SHARED_KINDS = ("shared", "pvc", "host")


@dataclass(frozen=True, kw_only=True)
class Fetch:
    repo: str  # a hub id, e.g. deepseek-ai/DeepSeek-V3
    revision: str  # a commit or branch; "" for the hub's default branch (not pinned)
    mount: str  # the model volume in the container (HF_HOME)

    @property
    def marker(self) -> str:
        name = f"{self.repo}@{self.revision or 'default'}".replace("/", "--")  # one file, in MARKERS
        return str(PurePosixPath(self.mount) / MARKERS / name)

    @property
    def lock(self) -> str:
        return str(PurePosixPath(self.mount) / LOCK)

    def command(self) -> list[str]:
        return [
            "/bin/sh",
            "-c",
            FETCH_SCRIPT,
            "epstack-fetch",
            self.repo,
            self.revision,
            self.marker,
            self.lock,
        ]

    def wait_command(self) -> list[str]:
        return ["/bin/sh", "-c", WAIT_SCRIPT, "epstack-wait", self.marker]


def fetch_of(plan: ServePlan | None, model: Storage | None) -> Fetch | None:
    """A serve job's fetch: its model a hub id on a volume kept beyond one pod; else None."""
    if plan is None or model is None or model.kind not in SHARED_KINDS:
        return None
    if plan.profile.dummy_weights or plan.model_path.startswith("/"):
        return None
    return Fetch(repo=plan.model_path, revision=plan.model_revision or "", mount=model.mount)


def name(job_name: str) -> str:
    """The Kubernetes Job's name."""
    return f"{job_name}-fetch"


def claim(job_name: str) -> str:
    """The claim `shared:SIZE` renders and mounts."""
    return f"{job_name}-models"


def note(fetch: Fetch) -> str:
    pinned = (
        f"revision {fetch.revision}"
        if fetch.revision
        else "its default branch, NOT pinned (--model-revision)"
    )
    return (
        f"Model: {fetch.repo} at {pinned}, fetched once into {fetch.mount} ({PROGRAM} download, lock "
        f"{fetch.lock}); servers start once {fetch.marker} is there, with HF_HUB_OFFLINE=1."
    )
