"""`epstack cluster render|prepull|metrics`; wire with `register(subparsers)`.

Exit 0 written, 2 bad input (one line naming the flag or file and the fix; nothing written).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from rich.console import Console

from epstack import metrics
from epstack.cluster import k8s, k8snames, kustomize, roles, router, site, slurm, values
from epstack.cluster.image import PLACEHOLDER, ImageRef, chosen_image, parse_image, pins_target
from epstack.cluster.jobs import JOB_KINDS, SERVE_SMOKE_MODES, Job, make_job, node_commands
from epstack.cluster.k8sparts import Obj
from epstack.cluster.yamltext import dump_all
from epstack.commands.common import (
    LOCKS,
    PINS,
    SubParsers,
    add_values_file,
    commands,
    count_up_to,
    from_args,
    one_line,
    path_arg,
    pins_path,
    positive_int,
    rename,
)
from epstack.errors import BadInput
from epstack.fabric import FABRICS
from epstack.output import check_writable, write_file
from epstack.pins.load import load_pins
from epstack.python.lockfile import locks_dir
from epstack.smoke.serving.engines import DEFAULT as DEFAULT_ENGINE
from epstack.smoke.serving.engines import ENGINES
from epstack.smoke.serving.profiles import A2A_BACKENDS, PROFILES


def _write(text: str, out: Path | None) -> None:
    """stdout, or the file written whole, never half."""
    if out is None:
        sys.stdout.write(text)
    else:
        write_file(out, text, what="--out")


def _check_out(args: argparse.Namespace) -> None:
    """--out is never a file the command reads (the pins file, the build manifest, the env file)."""
    if args.out:
        given = (args.manifest, getattr(args, "env_file", None))
        inputs = [pins_path(args.pins), *(path for path in given if path)]
        check_writable(args.out, what="--out", inputs=inputs)


INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
T = TypeVar("T")


def _mount_path(text: str) -> str:
    """A --*-mount value: an absolute container path."""
    one_line(text)
    if not site.absolute_clean(text):
        raise argparse.ArgumentTypeError(f"{text!r}: write an absolute path without '..'")
    return text


def _key_value(text: str) -> str:
    """KEY=VALUE for --annotation (checked as text; split by site.split_pairs): a Kubernetes key."""
    one_line(text)
    if "=" not in text or text.startswith("="):
        raise argparse.ArgumentTypeError(f"{text!r}: write KEY=VALUE")
    key = text.partition("=")[0]
    try:
        k8snames.qualified_name(key)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"key {key!r}: {exc}") from None
    return text


def _label(text: str) -> str:
    """KEY=VALUE of a label (--node-selector, --pod-monitor-label): as Kubernetes checks a label."""
    one_line(text)
    if "=" not in text or text.startswith("="):
        raise argparse.ArgumentTypeError(f"{text!r}: write KEY=VALUE")
    try:
        k8snames.label(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    return text


# Counts beyond these are typos rather than jobs.
MAX_REPLICAS = 64
MAX_CPUS_PER_GPU = 64  # the largest GPU nodes have 384 vCPUs for 8 GPUs: 48 each
MAX_STARTUP_TIMEOUT_S = 86400  # a day


def _env_arg(text: str) -> str:
    """--env KEY=VALUE, the value one line of text."""
    try:
        _, value = site.env_pair(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    if value:
        one_line(value)
    return text


def _typed(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse type from a site parser: one line of text, its ValueError as the flag's error."""

    def check(text: str) -> T:
        one_line(text)
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None

    return check


def _revision(text: str) -> str:
    """--model-revision: a hub commit or branch name."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}", text) or ".." in text:
        raise ValueError("write a commit hash (40 hex) or a branch name")
    return text


def _secrets(args: argparse.Namespace, env: dict[str, str]) -> tuple[site.SecretRef, ...]:
    """--secret-env (Kubernetes) or --secret-file (Slurm): each variable once, and not also an --env."""
    if args.target == "k8s" and args.secret_file:
        raise BadInput(
            "--secret-file: Slurm reads a node's file; fix: on Kubernetes use --secret-env NAME=SECRET:KEY"
        )
    secrets = [*args.secret_env, *args.secret_file]
    names = [secret.env for secret in secrets]
    for name in names:
        if names.count(name) > 1 or name in env:
            raise BadInput(f"--secret-* {name}: given twice (or also by --env); fix: give each variable once")
    return tuple(secrets)


def _site_env(args: argparse.Namespace) -> dict[str, str]:
    """--env-file's variables, then --env's (the later wins); a bad value or a credential names file:line."""
    env = {}
    lines = site.read_env_file(args.env_file) if args.env_file else []
    site.screen(
        ((f"{args.env_file}:{line.number}: {line.key}", line.value) for line in lines), platform=args.target
    )
    for line in lines:
        try:
            if line.value:
                one_line(line.value)
        except argparse.ArgumentTypeError as exc:
            raise site.env_file_error(args.env_file, line.number, str(exc).split("; fix:")[0]) from None
        env[line.key] = line.value
    return env | dict(site.env_pair(pair) for pair in args.env)


def _flag_values(args: argparse.Namespace) -> list[tuple[str, str]]:
    """Every text a flag gave, named by its flag (and its KEY, for a repeated KEY=VALUE flag): what a
    render may write into the manifest or script."""
    values = []
    for dest, given in vars(args).items():
        flag = "--" + dest.replace("_", "-")
        if isinstance(given, str):
            values.append((flag, given))
        elif isinstance(given, list):
            values += [(f"{flag} {item.partition('=')[0]}", item) for item in given if isinstance(item, str)]
    return values


def _storage(args: argparse.Namespace, name: str, default: str) -> site.Storage | None:
    text = getattr(args, f"{name}_storage") or default
    return site.parse_storage(text, flag=f"--{name}-storage", name=name, mount=getattr(args, f"{name}_mount"))


# Pod settings Slurm has no place for: refused there rather than dropped unseen.
K8S_ONLY = (
    "annotation",
    "node_selector",
    "toleration",
    "topology_key",
    "privileged",
    "secret_env",
    "secret_env_from",
    "storage_class",
    "pod_monitor",
    "pod_monitor_label",
    "namespace",
    "replicas",
    "kustomization",
)


def _site(args: argparse.Namespace) -> site.Site:
    """The site's settings from the flags, with the defaults of the target (docs/guides/clusters.md)."""
    if args.target == "slurm" and args.secret_env:
        raise BadInput(
            "--secret-env: a Kubernetes Secret's key; fix: on Slurm use --secret-file NAME=/PATH (read "
            "when the job runs)"
        )
    if args.target == "slurm" and (given := [name for name in K8S_ONLY if getattr(args, name)]):
        flags = " ".join("--" + name.replace("_", "-") for name in given)
        raise BadInput(
            f"{flags}: Kubernetes pod settings; fix: drop them for --platform slurm (pyxis has no "
            "privileged mode; place a Slurm job with sbatch's own options)"
        )
    node_dir = f"{site.HOST_ROOT}/{{}}"
    if args.job != "serve":
        model_default = "none"
    elif args.target == "k8s":
        # Several pods of a hub model: one shared volume, filled once (epstack.cluster.modelfetch);
        # one pod, or weights named by path: the pod's own disk.
        profile = PROFILES[args.profile or "deepseek-v3"]
        hub_model = not profile.generated and not (args.model_path or profile.model_path).startswith("/")
        model_default = f"{'shared' if args.nodes > 1 and hub_model else 'ephemeral'}:{profile.disk}"
    else:
        model_default = "host:" + node_dir.format("hf")
    selector = site.split_pairs(args.node_selector)
    if args.instance_type:
        selector.setdefault(INSTANCE_TYPE_LABEL, args.instance_type)
    if args.pod_monitor_label and not args.pod_monitor:
        raise BadInput("--pod-monitor-label: labels the PodMonitor; fix: add --pod-monitor")
    env = _site_env(args)
    return from_args(
        site.Site,
        args,
        model=_storage(args, "model", model_default),
        cache=_storage(args, "cache", "host:" + node_dir.format("jit-cache")),
        results=_storage(args, "results", "host:" + node_dir.format("results")),
        env=env,
        secrets=_secrets(args, env),
        secret_env_from=tuple(args.secret_env_from),
        annotations=site.split_pairs(args.annotation),
        node_selector=selector,
        tolerations=tuple(dict.fromkeys([site.GPU_TAINT, *args.toleration])),
        topology_key=args.topology_key or "",
        startup_timeout_s=args.startup_timeout,
    )


def cmd_render(args: argparse.Namespace, console: Console) -> int:
    _check_out(args)
    site.screen(_flag_values(args), platform=args.target)
    pins = load_pins(pins_path(args.pins))
    target, fabric = pins_target(pins, arch=args.arch, fabric=args.fabric)
    if args.print_command and args.job != "serve":
        raise BadInput("--print-command: fix: use it with --job serve")
    if args.print_command and args.kustomization:
        raise BadInput("--print-command --kustomization: a command is no manifest; fix: drop one of them")
    image = (
        PLACEHOLDER
        if args.print_command and not (args.image or args.manifest)
        else chosen_image(pins, target, image=args.image, manifest=args.manifest, layer=args.engine)
    )
    job = make_job(
        kind=args.job,
        pins=pins,
        image=image,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        fabric=fabric,
        name=args.name,
        profile=args.profile,
        a2a=args.a2a,
        model_path=args.model_path,
        model_revision=args.model_revision,
        fabric_devices=args.fabric_devices,
        instance_type=args.instance_type,
        site=_site(args),
        serve_smoke=args.serve_smoke,
        engine=args.engine,
    )
    role_jobs = _role_jobs(args, job)
    if args.print_command:
        _say_model_trust(args, job, console)
        _write("".join(node_commands(each) for each in role_jobs or (job,)), args.out)
        return 0
    if args.target == "slurm":
        text = slurm.sbatch_script(
            job,
            squashfs_dir=args.squashfs_dir,
            pins_target=target,
            router_image=_router_image(args, job),
            role_jobs=role_jobs,
        )
    else:
        objects, text, rdma = _k8s_render(args, job, role_jobs)
        if args.kustomization:
            base = _kustomization_path(args)
            write_file(
                base, kustomize.kustomization(objects, args.out.name, rdma_resource=rdma), what=base.name
            )
    _say_model_trust(args, job, console)
    _write(text, args.out)
    if args.out:
        console.print(
            f"wrote {args.out}: {job.kind} on {job.nodes} x {job.gpus_per_node} GPUs, {job.image.ref}",
            markup=False,
        )
    return 0


_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def _say_model_trust(args: argparse.Namespace, job: Job, console: Console) -> None:
    """On stderr, what a serve job trusts of its model: a hub revision that can move under it, and the
    model's own code run in every pod (--trust-remote-code, only where the profile needs it)."""
    if job.http_port is None:
        return
    profile = PROFILES[args.profile or "deepseek-v3"]
    model = args.model_path or profile.model_path
    if not profile.generated and not model.startswith("/") and not _COMMIT.match(args.model_revision or ""):
        moving = (
            f"--model-revision {args.model_revision} is a branch"
            if args.model_revision
            else "no --model-revision"
        )
        console.print(
            f"warning: {moving}: each pod downloads whatever {model} holds when it starts, so two pods "
            "may serve different weights; fix: --model-revision COMMIT (the 40-hex commit on the hub)",
            markup=False,
        )
    if profile.trust_remote_code:
        console.print(
            f"note: SGLang runs with --trust-remote-code: the {profile.name} profile's model ({model}) needs "
            "it, so its own Python from the hub runs in every pod; pin --model-revision to know which",
            markup=False,
        )


def _router_image(args: argparse.Namespace, job: Job) -> ImageRef | None:
    """--router-image, by digest, for a serve job only."""
    if not args.router_image:
        return None
    if job.http_port is None:
        raise BadInput("--router-image: the router fronts a serve job; fix: use it with --job serve")
    _sglang_only(job, "--router-image")
    return parse_image(args.router_image, what="--router-image")


def _role_jobs(args: argparse.Namespace, job: Job) -> tuple[Job, ...]:
    """--disaggregation: the job's prefill and decode servers (epstack.cluster.roles), else none."""
    if not args.disaggregation:
        return ()
    _sglang_only(job, "--disaggregation")
    return roles.role_jobs(
        job,
        target=args.target,
        kind=k8s.k8s_kind(job, args.k8s_kind),
        router=bool(args.router_image) or args.print_command,  # printed commands need no router
        locks=locks_dir(args.locks),
    )


def _sglang_only(job: Job, flag: str) -> None:
    """The router and prefill/decode roles are SGLang's (sglang-router, SGLang's disaggregation flags)."""
    if not job.engine.router:
        raise BadInput(f"{flag}: SGLang's router and roles, not {job.engine.title}'s; fix: --engine sglang")


def _kustomization_path(args: argparse.Namespace) -> Path:
    """--kustomization: kustomization.yaml beside --out, which it lists."""
    if args.out is None or args.out.name == kustomize.FILE:
        raise BadInput(
            f"--kustomization: the base lists the manifests file, and goes beside it; fix: add --out "
            f"DIR/NAME.yaml (not {kustomize.FILE})"
        )
    if args.namespace:
        raise BadInput(
            "--kustomization --namespace: a site's overlay sets the namespace (kustomize's namespace: "
            "NAME, which also names it in the router's RoleBinding); fix: drop --namespace"
        )
    path: Path = args.out.parent / kustomize.FILE
    check_writable(path, what="--kustomization", inputs=[pins_path(args.pins)])
    return path


def _k8s_render(args: argparse.Namespace, job: Job, role_jobs: tuple[Job, ...]) -> tuple[list[Obj], str, str]:
    """The job's Kubernetes objects, and the router in front of them when --router-image is given; their
    text; the RDMA resource the pods request ("" when none)."""
    router_image = _router_image(args, job)
    if args.namespace and not router_image:
        raise BadInput("--namespace: the router's RoleBinding names it; fix: add --router-image, or drop it")
    if args.replicas and job.http_port is None:
        raise BadInput(f"--replicas {args.replicas}: serving groups; fix: use it with --job serve")
    model = job.site.model
    if args.storage_class and (model is None or model.kind != "shared"):
        raise BadInput(
            "--storage-class: the class of the shared model claim; fix: add --model-storage shared:SIZE "
            "(the default for a serve job on 2 or more nodes), or drop it"
        )
    settings = from_args(
        k8s.PodSettings,
        args,
        rdma_resource=args.rdma_resource or "",
        storage_class=args.storage_class or "",
        pod_monitor=site.split_pairs(args.pod_monitor_label) if args.pod_monitor else None,
        replicas=args.replicas or 1,
        endpoint=router.name(job) if router_image else "",
    )
    objects = k8s.job_objects(job, settings, args.k8s_kind, role_jobs)
    notes = k8s.notes(job, settings, args.k8s_kind, role_jobs)
    if role_jobs:
        notes.append(roles.note(role_jobs[0]))
    if router_image:
        kind, namespace = k8s.k8s_kind(job, args.k8s_kind), args.namespace or "default"
        objects += router.objects(
            job, kind, router_image, namespace=namespace, monitor=settings.pod_monitor, role_jobs=role_jobs
        )
        notes.append(router.note(job, namespace))
    return objects, dump_all(objects, comments=notes), k8s.rdma_resource(job, settings)


def cmd_pull(args: argparse.Namespace, console: Console) -> int:
    _check_out(args)
    site.screen(_flag_values(args), platform=args.target)
    pins = load_pins(pins_path(args.pins))
    target, _ = pins_target(pins, arch=args.arch, fabric=args.fabric)
    image = chosen_image(pins, target, image=args.image, manifest=args.manifest, layer=args.engine)
    if args.target == "slurm":
        text = slurm.enroot_pull_script(
            image, nodes=args.nodes, squashfs_dir=args.squashfs_dir or slurm.DEFAULT_SQUASHFS_DIR
        )
    else:
        selector = dict(item.split("=", 1) for item in args.node_selector)
        text = dump_all([k8s.prepull_daemonset(image, node_selector=selector)])
    _write(text, args.out)
    return 0


def cmd_metrics(args: argparse.Namespace, console: Console) -> int:
    """A report's verdict as OpenMetrics text, labelled with the image digest and the pins hash."""
    if args.out:
        check_writable(args.out, what="--out", inputs=[pins_path(args.pins), args.report])
    pins = load_pins(pins_path(args.pins))
    target, _ = pins_target(pins, arch=args.arch, fabric=args.fabric)
    verdict = metrics.read_verdict(args.report)
    digest = parse_image(args.image).digest if args.image else ""
    pins_hash = pins.layer_hash(verdict.layer or "sglang", target)
    _write(metrics.openmetrics(verdict, image_digest=digest, pins_hash=pins_hash), args.out)
    return 0


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--platform", dest="target", choices=("k8s", "slurm"), required=True, help="the scheduler"
    )
    rename(parser, "--platform", "--target")
    parser.add_argument("--arch", type=one_line, help="image arch, e.g. hopper (default: DEFAULT_TARGET's)")
    parser.add_argument("--fabric", choices=tuple(FABRICS), help="default: DEFAULT_TARGET's")
    parser.add_argument("--image", type=one_line, help="REPOSITORY[:TAG]@sha256:<64 hex>")
    parser.add_argument("--manifest", type=path_arg, help="build manifest JSON: its image for these pins")
    parser.add_argument(
        "--engine",
        choices=tuple(ENGINES),
        default=DEFAULT_ENGINE,
        help=f"serve: the serving engine, and the manifest's image of its layer (default {DEFAULT_ENGINE})",
    )
    parser.add_argument("--squashfs-dir", type=one_line, help="slurm: node-local directory of pulled images")
    parser.add_argument(
        "--out", type=path_arg, metavar="FILE", help="write here (whole or not at all) instead of stdout"
    )


def _site_arguments(render: argparse.ArgumentParser) -> None:
    """The cluster's own settings (epstack.cluster.site); defaults in docs/guides/clusters.md."""
    group = render.add_argument_group("site (storage: host:/DIR, pvc:CLAIM, ephemeral:SIZE or none)")
    for name, what, mount in (
        ("model", "serve: HF cache (HF_HOME) / model weights; also shared:SIZE (k8s; default: a hub "
         "model on 2+ nodes shared:<profile's size>, else ephemeral:<size>; slurm host:/var/tmp/epstack/hf)",
         site.MODEL_MOUNT),
        ("cache", "writable JIT caches (default host:/var/tmp/epstack/jit-cache)", site.CACHE_MOUNT),
        ("results", "smoke report and rank logs (default host:/var/tmp/epstack/results)", site.RESULTS_MOUNT),
    ):  # fmt: skip
        group.add_argument(f"--{name}-storage", type=one_line, metavar="SPEC", help=what)
        group.add_argument(
            f"--{name}-mount",
            type=_mount_path,
            default=mount,
            help=f"where the container sees it ({mount})",
        )
    group.add_argument("--env", type=_env_arg, action="append", default=[], help="KEY=VALUE (repeatable)")
    group.add_argument(
        "--secret-env",
        type=_typed(site.secret_key_ref),
        action="append",
        default=[],
        metavar="NAME=SECRET:KEY",
        help="k8s: NAME from a Secret's key (secretKeyRef), e.g. HF_TOKEN=hf-token:token",
    )
    group.add_argument(
        "--secret-env-from",
        type=_typed(site.secret_name),
        action="append",
        default=[],
        metavar="SECRET",
        help="k8s: every key of a Secret as a variable (envFrom)",
    )
    group.add_argument(
        "--secret-file",
        type=_typed(site.secret_file),
        action="append",
        default=[],
        metavar="NAME=/PATH",
        help="slurm: NAME read from the node's file when the job runs, e.g. HF_TOKEN=/etc/hf/token",
    )
    group.add_argument(
        "--storage-class",
        type=_typed(k8snames.dns_subdomain),
        help="k8s: the shared model claim's class (needs ReadWriteMany)",
    )
    group.add_argument(
        "--pod-monitor", action="store_true", help="k8s serve: a PodMonitor for node 0's /metrics"
    )
    group.add_argument(
        "--router-image",
        type=one_line,
        help=f"serve: SGLang's router ({router.PACKAGE}) in front of the groups (k8s: a Deployment; slurm: "
        f"a step on node 0, port {router.SLURM_PORT}), from this image REPOSITORY[:TAG]@sha256:<64 hex>",
    )
    group.add_argument(
        "--namespace",
        type=_typed(site.dns_label),
        help="k8s: the namespace the job is applied in, which the router's RoleBinding names (default: "
        "default; the router watches its own pod's)",
    )
    group.add_argument(
        "--kustomization",
        action="store_true",
        help=f"k8s: also write {kustomize.FILE} beside --out: a kustomize base listing it, headed by the "
        "patch points a site's overlay uses (namespace, registry, node selector, tolerations, storage "
        "class, RDMA resource)",
    )
    group.add_argument(
        "--replicas",
        type=count_up_to(MAX_REPLICAS),
        help=f"k8s serve: serving groups (LWS replicas, default 1, at most {MAX_REPLICAS})",
    )
    group.add_argument(
        "--pod-monitor-label",
        type=_label,
        action="append",
        default=[],
        help="k8s: KEY=VALUE on the PodMonitor, for the Prometheus' podMonitorSelector",
    )
    group.add_argument("--env-file", type=path_arg, help="KEY=VALUE lines (before --env)")
    group.add_argument(
        "--instance-type",
        type=_typed(k8snames.label_value),
        help="EFA device count (default p5.48xlarge: 32); k8s node selector",
    )
    group.add_argument(
        "--host-network", action="store_true", help="k8s: hostNetwork, for RoCE without SR-IOV"
    )
    group.add_argument("--privileged", action="store_true", help="k8s: privileged containers")
    group.add_argument(
        "--annotation", type=_key_value, action="append", default=[], help="k8s pod annotation KEY=VALUE"
    )
    group.add_argument("--node-selector", type=_label, action="append", default=[], help="k8s: KEY=VALUE")
    group.add_argument(
        "--toleration",
        type=_typed(k8snames.qualified_name),
        action="append",
        default=[],
        help="k8s: tolerate KEY:NoSchedule too",
    )
    group.add_argument(
        "--topology-key",
        type=_typed(k8snames.qualified_name),
        help="k8s: all pods in one domain (LWS exclusive-topology)",
    )
    group.add_argument(
        "--cpus-per-gpu",
        type=count_up_to(MAX_CPUS_PER_GPU),
        default=site.DEFAULT_CPUS_PER_GPU,
        help=f"CPUs requested per GPU (at most {MAX_CPUS_PER_GPU})",
    )
    group.add_argument(
        "--startup-timeout",
        type=count_up_to(MAX_STARTUP_TIMEOUT_S),
        default=site.DEFAULT_STARTUP_TIMEOUT_S,
        help="serve: seconds to start (k8s startup probe); the serve smoke waits this + 600",
    )


def _flag(action: argparse.Action) -> values.Flag:
    """A flag as the values file sees it: its argparse type as a check raising ValueError."""
    convert = action.type if callable(action.type) else None

    def check(text: str) -> object:
        try:
            return convert(text) if convert else text
        except argparse.ArgumentTypeError as exc:
            raise ValueError(str(exc)) from None

    return values.Flag(check=check, choices=tuple(map(str, action.choices or ())), help=action.help or "")


def flags_of(parser: argparse.ArgumentParser) -> dict[str, values.Flag]:
    """Each long option of `parser` (cluster render's) as the values file sees it."""
    return {
        name: _flag(action) for name, action in parser._option_string_actions.items() if name.startswith("--")
    }


def _read_values(path: Path, parser: argparse.ArgumentParser) -> list[str]:
    return values.flags(path, flags_of(parser))


def render_parser() -> argparse.ArgumentParser:
    """`cluster render`'s parser, as `epstack` builds it."""
    from epstack.commands.main import build_parser  # noqa: PLC0415 (the CLI above this module)

    return dict(commands(build_parser("cluster")))["cluster render"]


# The options of `cluster render` that a values file cannot set: what the command reads and writes.
INPUT_OUTPUT = ("--pins", "--locks", "--values", "--out", "--print-command")


def _group_options(render: argparse.ArgumentParser) -> None:
    """--help in the values file's groups (epstack.cluster.values.GROUPS): the job's options first,
    then each group's, then what the command reads and writes."""
    groups = {"": render.add_argument_group("the job"), **{
        name: render.add_argument_group(f"{name}: {text}") for name, text in values.GROUPS.items()
    }, "io": render.add_argument_group("input and output")}  # fmt: skip
    where = {key.flag: key.group for key in values.KEYS} | dict.fromkeys(INPUT_OUTPUT, "io")
    for action in render._actions:
        flag = next((name for name in action.option_strings if name.startswith("--")), "")
        if flag not in where:
            continue
        for group in render._action_groups:
            if action in group._group_actions:
                group._group_actions.remove(action)
        groups[where[flag]]._group_actions.append(action)
    render._action_groups = [group for group in render._action_groups if group._group_actions]


def register(subparsers: SubParsers) -> None:
    cluster = subparsers.add_parser(
        "cluster", help="Kubernetes and Slurm jobs by image digest"
    ).add_subparsers(dest="cluster_command", required=True, metavar="SUBCOMMAND")
    render = cluster.add_parser(
        "render", parents=[PINS, LOCKS], help="a smoke or serve job as Kubernetes objects or an sbatch script"
    )
    _common(render)
    render.add_argument("--job", choices=JOB_KINDS, required=True, help="what the job runs")
    render.add_argument("--nodes", type=positive_int, required=True, help="nodes of the job")
    render.add_argument("--gpus-per-node", type=positive_int, required=True, help="GPUs (ranks) per node")
    render.add_argument("--profile", choices=tuple(PROFILES), help="serve: model (default deepseek-v3)")
    render.add_argument("--a2a", choices=A2A_BACKENDS, default="deepep_v2", help="MoE all-to-all backend")
    render.add_argument(
        "--model-path", type=one_line, help="serve: weights path or hub id (default: the profile's)"
    )
    render.add_argument(
        "--model-revision",
        type=_typed(_revision),
        help="serve: the hub commit of the weights (SGLang --revision; the one fetch downloads it)",
    )
    render.add_argument("--name", type=one_line, help="job name (default epstack-smoke / epstack-serve)")
    render.add_argument(
        "--k8s-kind", choices=("job", "lws"), help="default: lws for serve, job for the smoke"
    )
    render.add_argument(
        "--fabric-devices", type=positive_int, help="fabric devices per pod (default: EFA 1/GPU, IB 1)"
    )
    render.add_argument(
        "--rdma-resource",
        type=_typed(k8snames.extended_resource),
        help="RDMA device plugin resource (default rdma/ib for IB)",
    )
    render.add_argument(
        "--shm-size", type=_typed(k8snames.quantity), default="64Gi", help="/dev/shm size (default 64Gi)"
    )
    render.add_argument(
        "--memory", type=_typed(k8snames.quantity), default="256Gi", help="pod memory request (default 256Gi)"
    )
    render.add_argument("--print-command", action="store_true", help="serve: print node 0's and 1's commands")
    render.add_argument(
        "--disaggregation",
        action="store_true",
        help="serve: prefill and decode roles of --nodes each behind the router in PD mode (k8s: an LWS "
        "each; slurm: an srun step each, the job asking for both roles' nodes); needs a KV transfer engine "
        "(mooncake or nixl) in the sglang lock (--locks); the shipped lock pins nixl",
    )
    render.add_argument(
        "--serve-smoke",
        choices=SERVE_SMOKE_MODES,
        help="serve: `epstack smoke serve --url` against the endpoint once it answers (k8s: a Job beside "
        "the leader; slurm: a step on node 0); on (default): then keep serving; exit (slurm): end the "
        "job with the smoke's exit code; off",
    )
    _site_arguments(render)
    add_values_file(
        render,
        _read_values,
        "the job's settings as a values file (YAML: site, storage, secrets, scheduling, router; "
        "schema: epstack/cluster/values.schema.json); flags given too win (repeatable: later files win)",
    )
    _group_options(render)
    render.set_defaults(func=cmd_render)

    pull = cluster.add_parser(
        "prepull", parents=[PINS], help="pre-pull plan: a DaemonSet, or enroot imports on Slurm nodes"
    )
    _common(pull)
    pull.add_argument("--nodes", type=positive_int, default=1, help="slurm: nodes to import on")
    pull.add_argument("--node-selector", type=_label, action="append", default=[], help="k8s: KEY=VALUE")
    pull.set_defaults(func=cmd_pull)

    metrics_parser = cluster.add_parser(
        "metrics",
        parents=[PINS],
        help="a guard/smoke report as OpenMetrics text (node_exporter's textfile collector)",
    )
    metrics_parser.add_argument(
        "--report",
        type=path_arg,
        required=True,
        help="the --json of epstack guard / smoke elastic / smoke serve",
    )
    metrics_parser.add_argument(
        "--image",
        type=one_line,
        help="the image it ran in, REPOSITORY[:TAG]@sha256:<64 hex>: its digest label",
    )
    metrics_parser.add_argument(
        "--arch", type=one_line, help="pins hash of this arch (default: DEFAULT_TARGET's)"
    )
    metrics_parser.add_argument("--fabric", choices=tuple(FABRICS), help="default: DEFAULT_TARGET's")
    metrics_parser.add_argument(
        "--out",
        type=path_arg,
        metavar="FILE",
        help="write here (whole or not at all) instead of stdout, e.g. DIR/epstack-guard.prom",
    )
    metrics_parser.set_defaults(func=cmd_metrics)
