"""What a cluster job runs on each node: the elastic smoke, or serving (SGLang or vLLM: epstack.smoke.
serving.engines), in one image by digest.

A Job is platform-neutral: its command takes the node's rank and node 0's host as expressions the
platform fills in (Kubernetes `$(VAR)`, a shell's "$VAR"), its environment is the fabric's job
environment (when it crosses nodes) plus the job's own. epstack.cluster.k8s and .slurm turn it into
manifests; the launcher variables they add come from epstack.smoke.launchenv.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

from epstack import imagepaths
from epstack.cluster import modelfetch
from epstack.cluster.image import ImageRef
from epstack.cluster.modelfetch import Fetch, fetch_of
from epstack.cluster.site import Site
from epstack.errors import BadInput
from epstack.fabric import FABRICS, Fabric, HostAccess
from epstack.pins.model import Pins
from epstack.smoke.launch import DEFAULT_PORT
from epstack.smoke.serving.command import DIST_INIT_PORT, HEALTH_PATH, HTTP_PORT, METRICS_PATH
from epstack.smoke.serving.engines import DEFAULT, ENGINES, Engine, check_backend, engine_named
from epstack.smoke.serving.profiles import ServePlan, serve_plan

JobKind = Literal["elastic-smoke", "serve"]
JOB_KINDS: tuple[JobKind, ...] = ("elastic-smoke", "serve")
# A serve job's smoke of its own endpoint (epstack.cluster.servesmoke): on (the default: the job proves
# what it serves, then keeps serving), exit (Slurm: the job ends with the smoke's verdict), off.
ServeSmokeMode = Literal["on", "exit", "off"]
SERVE_SMOKE_MODES: tuple[ServeSmokeMode, ...] = ("on", "exit", "off")
# images/base/Dockerfile.j2's ENTRYPOINT: hold-env, the guard, then the command (pyxis does not run it
# itself).
IMAGE_ENTRYPOINT = (str(imagepaths.BIN / "hold-env"), str(imagepaths.SCRIPTS / "entrypoint.sh"))
SMOKE_REPORT = "/tmp/epstack-smoke-elastic.json"  # without a results volume: lost with the container
SMOKE_TIMEOUT_S = 900
# What the command holds for the node's rank, node 0's host and what the other nodes add (vLLM's
# --headless) until a platform writes its expressions there: NUL, which no argument and no flag value
# can hold, keeps them apart from the user's text.
_NODE_RANK, _LEADER, _WORKER = "\0node-rank\0", "\0leader\0", "\0worker\0"
_EXPRESSION = re.compile("(\0[a-z-]+\0)")


def platform_words(
    command: list[str], literal: Callable[[str], str], expressions: dict[str, str]
) -> list[str]:
    """`command` as a platform writes it: each placeholder (NUL-delimited, a key of `expressions`) as the
    platform's own expression, every other part through `literal`, the platform's quoting; a word that
    was a placeholder alone and whose expression is empty is left out."""
    words = [
        "".join(expressions[part] if part in expressions else literal(part) for part in parts if part)
        for parts in map(_EXPRESSION.split, command)
    ]
    return [word for word, part in zip(words, command, strict=True) if word or expressions.get(part) != ""]


@dataclass(frozen=True, kw_only=True)
class Job:
    kind: JobKind
    name: str
    image: ImageRef
    nodes: int
    gpus_per_node: int
    fabric: Fabric
    gin_type: str  # the pins' NCCL_GIN_TYPE for the fabric
    fabric_devices: int  # per node, only requested when the job crosses nodes
    serve: ServePlan | None
    smoke_profile: str | None
    site: Site = field(default_factory=Site)
    serve_smoke: ServeSmokeMode = "off"
    engine: Engine = ENGINES[DEFAULT]  # what a serve job serves with (its image is the engine's layer)

    @property
    def role(self) -> str:
        """Its servers' part in prefill/decode disaggregation (epstack.cluster.roles), "" for both."""
        return self.serve.role if self.serve is not None else ""

    @property
    def workload_name(self) -> str:
        """The workload's own objects' name: the job's, and its role's. What the roles share (the model,
        the router, the serve smoke) is named after the job."""
        return f"{self.name}-{self.role}" if self.role else self.name

    @property
    def fetch(self) -> Fetch | None:
        """The model's one download before the servers start (epstack.cluster.modelfetch), if any."""
        return fetch_of(self.serve, self.site.model)

    @property
    def crosses_nodes(self) -> bool:
        return self.nodes > 1

    @property
    def host_access(self) -> HostAccess | None:
        """The devices and capabilities GIN needs, when the job crosses nodes (one node: NVLink only)."""
        return self.fabric.host_access(self.gin_type) if self.crosses_nodes else None

    @property
    def capabilities(self) -> tuple[str, ...]:
        return self.host_access.capabilities if self.host_access else ("IPC_LOCK",)

    @property
    def devices(self) -> tuple[str, ...]:
        return self.host_access.devices if self.host_access else ()

    def notes(self) -> list[str]:
        """Why the job asks for what it asks (comments in the manifest or script), one line each."""
        notes = []
        if self.host_access:
            mode = self.fabric.gin_modes[self.gin_type]
            notes.append(
                f"NCCL GIN type {self.gin_type} ({mode}) over {self.fabric.title}: {self.host_access.reason}."
            )
        if self.site.privileged:
            notes.append(
                "privileged (--privileged): NVSHMEM IBGDA, GPU-initiated like GIN GDAKI, fails in a "
                "non-privileged container and works privileged (sgl-project/sglang#12533)."
            )
        for volume in self.site.volumes:
            notes.append(f"{volume.name} at {volume.mount}: {volume.kind} {shlex.quote(volume.source)}.")
        if self.fetch:
            notes.append(modelfetch.note(self.fetch))
        for secret in self.site.secrets:
            where = f"Secret {secret.secret} key {secret.key}" if secret.secret else f"file {secret.path}"
            notes.append(f"{secret.env}: from {where} when the job runs; its value is written nowhere here.")
        for secret_name in self.site.secret_env_from:
            notes.append(f"Every key of Secret {secret_name} as a variable (envFrom).")
        if self.http_port is not None:
            notes.append(
                f"Metrics: {self.engine.metrics} at :{self.http_port}{METRICS_PATH} on node 0's server."
            )
        if self.serve is not None and self.engine.worker and self.crosses_nodes:
            notes.append(
                f"Every node but node 0 runs {self.engine.title} with {self.engine.worker}: engines only, "
                "node 0's API server sends them requests."
            )
        return notes

    @property
    def tasks_per_node(self) -> int:
        """Slurm tasks: the smoke runs one rank per task (per GPU); an engine starts its own per GPU."""
        return self.gpus_per_node if self.kind == "elastic-smoke" else 1

    @property
    def rendezvous_port(self) -> int:
        return DEFAULT_PORT if self.kind == "elastic-smoke" else DIST_INIT_PORT

    @property
    def http_port(self) -> int | None:
        return HTTP_PORT if self.kind == "serve" else None

    @property
    def health_path(self) -> str:
        return HEALTH_PATH

    def command(self, *, node_rank: str, leader: str, worker: str = "") -> list[str]:
        """One node's command; `worker`: what a node other than node 0 adds (Engine.worker, or an
        expression that expands to it there)."""
        if self.serve is not None:
            return self.engine.command(self.serve, node_rank=node_rank, leader=leader, worker=worker)
        args = ["epstack", "smoke", "elastic", "--timeout", str(SMOKE_TIMEOUT_S), *self._smoke_outputs()]
        if self.smoke_profile is not None:
            # The smoke moves the serve plan's per-rank batch through ElasticBuffer at the model's shape.
            plan = serve_plan(self.smoke_profile, nodes=self.nodes, gpus_per_node=self.gpus_per_node)
            budget = str(plan.dispatch_budget)
            args += ["--profile", self.smoke_profile, "--num-tokens", budget]
            args += ["--num-max-tokens-per-rank", budget]
        return args

    def _smoke_outputs(self) -> list[str]:
        """The report and the ranks' files in the results volume, named after the job; else /tmp."""
        if self.site.results is None:
            return ["--json", SMOKE_REPORT]
        results = PurePosixPath(self.site.results.mount)
        return ["--json", str(results / f"{self.name}.json"), "--run-dir", str(results / self.name)]

    def words(
        self, literal: Callable[[str], str], *, node_rank: str, leader: str, worker: str = ""
    ) -> list[str]:
        """The command as a platform writes it: every literal part through `literal` (the platform's
        quoting), node_rank, leader and worker (what the engine adds on other nodes than node 0, or an
        expression that expands to it there; "": nothing) as the platform's own expressions."""
        command = self.command(node_rank=_NODE_RANK, leader=_LEADER, worker=_WORKER)
        return platform_words(command, literal, {_NODE_RANK: node_rank, _LEADER: leader, _WORKER: worker})

    def env(self) -> dict[str, str]:
        """Environment every node gets, before the platform's launcher variables."""
        env = dict(self.fabric.job_env) if self.crosses_nodes else {}
        if self.serve is not None:
            env |= self.engine.env(self.serve)
        if self.fetch:
            env["HF_HUB_OFFLINE"] = "1"  # the weights are in the volume: no pod downloads on its own
        caches = self.engine.caches if self.serve is not None else ()
        return env | self.site.volume_env(caches) | self.site.env


def make_job(
    *,
    kind: str,
    pins: Pins,
    image: ImageRef,
    nodes: int,
    gpus_per_node: int,
    fabric: str,
    name: str | None = None,
    profile: str | None = None,
    a2a: str = "deepep_v2",
    model_path: str | None = None,
    model_revision: str | None = None,
    fabric_devices: int | None = None,
    instance_type: str | None = None,
    site: Site | None = None,
    serve_smoke: str | None = None,
    engine: str = DEFAULT,
) -> Job:
    """Check the request against the pins and the fabric's facts; BadInput names the flag and the fix."""
    if kind not in JOB_KINDS:
        raise BadInput(f"--job {kind}: fix: use one of {', '.join(JOB_KINDS)}")
    server = engine_named(engine)
    if kind == "serve":
        check_backend(server, a2a)
    elif engine != DEFAULT:
        raise BadInput(
            f"--engine {engine}: the elastic smoke runs DeepEP alone; fix: use it with --job serve"
        )
    smoke_mode = _serve_smoke_mode(kind, serve_smoke)
    if nodes < 1 or gpus_per_node < 1:
        raise BadInput(f"--nodes {nodes} --gpus-per-node {gpus_per_node}: fix: both must be >= 1")
    if fabric not in FABRICS:
        raise BadInput(f"--fabric {fabric}: fix: use one of {', '.join(FABRICS)}")
    facts = FABRICS[fabric]
    if nodes > 1 and not facts.gin_ok(pins.nccl_version):
        others = [name for name, other in FABRICS.items() if other.gin_ok(pins.nccl_version)]
        raise BadInput(
            f"--fabric {fabric} --nodes {nodes}: DeepEP V2 crosses nodes only through NCCL GIN, and "
            f"GIN over {facts.title} needs NCCL >= {facts.gin_min_nccl} ({facts.gin_floor_source}); "
            f"pins.env has NCCL_VERSION={pins.nccl_version}; fix: raise NCCL_VERSION, use "
            f"{''.join(f'--fabric {name}, ' for name in others)}or --nodes 1"
        )
    if profile is not None and kind == "elastic-smoke":
        serve_plan(profile, nodes=nodes, gpus_per_node=gpus_per_node)  # same checks as serve
    plan = (
        serve_plan(
            profile or "deepseek-v3",
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            a2a=a2a,
            model_path=model_path,
            model_revision=model_revision,
        )
        if kind == "serve"
        else None
    )
    fetch_of(plan, (site or Site()).model)  # a generated model with nowhere to write it: BadInput now
    job_name = name or f"epstack-{'smoke' if kind == 'elastic-smoke' else 'serve'}"
    if not re.match(r"^[a-z][a-z0-9-]{0,39}$", job_name) or job_name.endswith("-"):
        raise BadInput(f"--name {job_name}: fix: lowercase letters, digits and '-', starting with a letter")
    return Job(
        kind="serve" if kind == "serve" else "elastic-smoke",
        name=job_name,
        image=image,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        fabric=facts,
        gin_type=pins.gin_type(fabric),
        fabric_devices=fabric_devices or _devices_per_node(facts, gpus_per_node, instance_type),
        serve=plan,
        smoke_profile=profile if kind == "elastic-smoke" else None,
        site=site or Site(),
        serve_smoke=smoke_mode,
        engine=server,
    )


def _serve_smoke_mode(kind: str, mode: str | None) -> ServeSmokeMode:
    """--serve-smoke, or its default: on for serve (the job proves its endpoint), off for the smoke."""
    if mode is None:
        return "on" if kind == "serve" else "off"
    if kind != "serve":
        raise BadInput(
            f"--serve-smoke {mode}: it smokes a serve job's endpoint; fix: use it with --job serve"
        )
    for known in SERVE_SMOKE_MODES:
        if mode == known:
            return known
    raise BadInput(f"--serve-smoke {mode}: fix: use one of {', '.join(SERVE_SMOKE_MODES)}")


def _devices_per_node(facts: Fabric, gpus_per_node: int, instance_type: str | None) -> int:
    """The instance type's device count where the fabric has one (EFA), else one per GPU or one."""
    if not facts.instance_devices:
        return gpus_per_node if facts.device_per_gpu else 1
    instance = instance_type or facts.default_instance
    if instance not in facts.instance_devices:
        known = ", ".join(f"{name} ({count})" for name, count in facts.instance_devices.items())
        raise BadInput(
            f"--instance-type {instance}: its {facts.title} device count is not known here ({known}); "
            "fix: pass --fabric-devices N"
        )
    return facts.instance_devices[instance]


def node_commands(job: Job) -> str:
    """A serve job's plan and node 0's and 1's commands, as shell text to read or paste."""
    plan = job.serve
    assert plan is not None
    env = " ".join(f"{key}={shlex.quote(value)}" for key, value in job.env().items())
    out = [
        f"# {plan.profile.name} on {job.nodes} node(s) x {job.gpus_per_node} GPU(s), {plan.a2a}: "
        + job.engine.layout(plan)
    ]
    for rank in range(min(job.nodes, 2)):
        command = job.command(
            node_rank=str(rank), leader=f"{job.name}-0", worker=job.engine.worker if rank else ""
        )
        out += [f"# node {rank}", f"{env} {shlex.join(command)}".strip()]
    return "\n".join(out) + "\n"
