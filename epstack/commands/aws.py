"""`epstack codebuild lint|run-local|start|batchspec` and `epstack publish login|digest|promote` (ECR)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape

from epstack.aws.batchspec import command, fleet_arn, render_batchspec
from epstack.aws.buildspec import load_buildspec
from epstack.aws.checkout import pins_sha256, revision, source_root
from epstack.aws.clients import Backoff, codebuild_client, logs_client
from epstack.aws.codebuild import StartRequest, Watch, check_privileged, start
from epstack.aws.ecr import ecr_for, login, parse_ecr_image
from epstack.aws.lint import LintFailed, lint, lint_or_raise, rules_for
from epstack.aws.publish import registry_for
from epstack.aws.runner import (
    DEFAULT_TIMEOUT,
    loopback_registry,
    parse_overrides,
    reads_secret_stores,
    run_local,
)
from epstack.aws.secrets import aws_secrets
from epstack.commands.common import PINS, SubParsers, path_arg, pins_path, rename, results_console, seconds
from epstack.errors import BadInput
from epstack.image.engine import DockerEngine
from epstack.image.registry import ECR_HOST
from epstack.inputs import read_text
from epstack.output import check_output
from epstack.pins.load import load_pins


def cmd_lint(args: argparse.Namespace, console: Console) -> int:
    source = (args.source or source_root(args.files[0])).resolve()
    findings = lint(args.files, lambda: load_pins(pins_path(args.pins)), source=source, rules=args.rules)
    console = results_console(console)  # the findings, or that there are none
    for finding in findings:
        console.print(f"[red]{escape(str(finding))}[/]")
    if findings:
        raise LintFailed(f"{len(findings)} problems in {len(args.files)} buildspecs")
    checked = [f"{path} [{args.rules or rules_for(path, source)}]" for path in args.files]
    console.print(f"[green]{len(args.files)} buildspecs ok[/] ({escape(', '.join(checked))})")
    return 0


def cmd_run_local(args: argparse.Namespace, console: Console) -> int:
    source = (args.source or source_root(args.file)).resolve()
    pins = pins_path(args.pins)
    out = check_output(
        str(args.out or source / "build" / "codebuild-local"), checkout=source, inputs=[args.file, pins]
    )
    lint_or_raise([args.file], load_pins(pins), source=source)
    spec = load_buildspec(args.file)
    overrides = parse_overrides(
        args.env,
        on_error=lambda item: BadInput(f"--env {item}: not NAME=VALUE; fix: --env EPSTACK_TARGET=hopper-ib"),
    )
    if args.registry:
        overrides["EPSTACK_REGISTRY"] = loopback_registry(args.registry)
    secrets = aws_secrets(Backoff(log=console.print)) if reads_secret_stores(spec, overrides) else None
    result = run_local(
        spec,
        source=source,
        out=out,
        overrides=overrides,
        secrets=secrets,
        echo=lambda line: console.print(escape(line), highlight=False, soft_wrap=True),
        timeout=args.timeout,
    )
    console = results_console(console)  # how each phase ended, what it exported
    for phase in result.phases:
        style = {"SUCCEEDED": "green", "FAILED": "red"}.get(phase.status, "yellow")
        where = f" at {args.file}:{phase.failed_line}: {phase.failed_command}" if phase.failed_command else ""
        console.print(f"{phase.name}: [{style}]{phase.status}[/]{escape(where)}")
    for name, value in result.exported_variables.items():
        console.print(f"exported {name}={escape(value)}")
    upload = f" ({result.upload_error})" if result.upload_error else ""
    console.print(f"build {result.status}{upload}", markup=False)
    return 0 if result.status == "SUCCEEDED" else 1


def cmd_start(args: argparse.Namespace, console: Console) -> int:
    path = pins_path(args.pins)
    pins = load_pins(path)
    if args.target:
        pins.target(args.target, path)
    source = source_root(path)
    commit = revision(source, args.source_version)
    request = StartRequest(
        project=args.project,
        source_version=commit,
        target=None if args.batch else (args.target or pins.default_target),
        pins_sha256=pins_sha256(source, path, commit),
    )
    backoff = Backoff(log=console.print)
    client = codebuild_client(args.region)
    if request.target:
        check_privileged(client, args.project, backoff)
    build_id = start(client, request, backoff)
    what = f"target {request.target}" if request.target else f"batch over {', '.join(pins.targets)}"
    results_console(console).print(
        f"started {build_id} ({what}, source {commit[:12]}, token {request.idempotency_token()[:12]})"
    )
    if not args.watch:
        return 0
    watch = Watch(
        codebuild=client,
        logs=logs_client(args.region),
        backoff=backoff,
        out=lambda line: console.print(escape(line)),
        poll=args.poll,
    )
    status = watch.build(build_id) if request.target else watch.batch(build_id)
    return 0 if status == "SUCCEEDED" else 1


def cmd_batchspec(args: argparse.Namespace, console: Console) -> int:
    text = render_batchspec(load_pins(pins_path(args.pins)), smoke_fleet=args.smoke_fleet)
    if args.compare:
        if read_text(args.compare, what="a batch buildspec") != text:
            raise LintFailed(
                f"{args.compare} differs from pins.env; fix: {command(args.smoke_fleet)} > {args.compare}"
            )
        results_console(console).print(f"[green]{escape(str(args.compare))} matches pins.env[/]")
        return 0
    print(text, end="")
    return 0


def _fleet(text: str) -> str:
    try:
        return fleet_arn(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def cmd_ecr_login(args: argparse.Namespace, console: Console) -> int:
    def docker_login(registry: str, user: str, password: str) -> None:
        DockerEngine.find().login(registry, user, password)

    login(args.registry, ecr=None, docker_login=docker_login, log=console.print)
    return 0


def _other_registry(image: str) -> tuple[str, str, str] | None:
    """(host, repository, tag) of an image in a registry other than ECR, else None."""
    host, slash, rest = image.partition("/")
    if not slash or not ("." in host or ":" in host or host == "localhost") or ECR_HOST.match(host):
        return None
    repository, colon, tag = rest.rpartition(":")
    if not colon or not repository or "/" in tag:
        raise BadInput(f"{image}: no tag; fix: HOST/REPOSITORY:TAG")
    return host, repository, tag


def cmd_ecr_digest(args: argparse.Namespace, console: Console) -> int:
    other = _other_registry(args.image)
    if other:
        host, repository, tag = other
        digest = registry_for(host, DockerEngine.find()).digest(repository, tag)
    else:
        image = parse_ecr_image(args.image)
        digest = ecr_for(image, Backoff(log=console.print)).digest(image)
    if digest is None:
        raise BadInput(f"{args.image}: no such tag; fix: check the tag")
    print(digest)
    return 0


def cmd_ecr_promote(args: argparse.Namespace, console: Console) -> int:
    source, destination = parse_ecr_image(args.source), parse_ecr_image(args.destination)
    ecr_for(source, Backoff(log=console.print)).promote(source, destination, log=console.print)
    return 0


def register(subparsers: SubParsers) -> None:
    """Add `codebuild` to the top-level subcommands."""
    codebuild = subparsers.add_parser("codebuild", help="lint, run locally, start and watch CodeBuild builds")
    commands = codebuild.add_subparsers(dest="codebuild_command", required=True, metavar="SUBCOMMAND")

    lint_parser = commands.add_parser(
        "lint", parents=[PINS], help="check buildspecs: CodeBuild's documented rules, and epstack's own"
    )
    lint_parser.add_argument("files", nargs="+", type=path_arg, metavar="FILE", help="buildspec files")
    lint_parser.add_argument(
        "--source", type=path_arg, help="source root for batch buildspec paths (default: git root)"
    )
    lint_parser.add_argument(
        "--rules",
        choices=["aws", "epstack"],
        help="aws: CodeBuild's documented syntax and rules only; epstack: those and this project's "
        "(account IDs, pins from pins.env); default: epstack for SOURCE/buildspecs/ when SOURCE holds "
        "pins.env, aws for any other file",
    )
    lint_parser.set_defaults(func=cmd_lint)

    run = commands.add_parser(
        "run-local", parents=[PINS], help="run a buildspec's phases here, as CodeBuild would"
    )
    run.add_argument("file", type=path_arg, metavar="FILE", help="the buildspec to run")
    run.add_argument(
        "--registry",
        metavar="127.0.0.1:PORT",
        help="a loopback registry standing in for ECR (EPSTACK_REGISTRY)",
    )
    run.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a variable (like start-build)",
    )
    run.add_argument("--source", type=path_arg, help="source directory (default: the buildspec's git root)")
    run.add_argument(
        "--out-dir",
        dest="out",
        metavar="DIR",
        type=path_arg,
        help="run.json, build.log, artifacts/ (default SOURCE/build/codebuild-local)",
    )
    rename(run, "--out-dir", "--out")
    run.add_argument(
        "--timeout",
        type=seconds,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="the build's time limit, like the project's timeoutInMinutes (default 3600: CodeBuild's)",
    )
    run.set_defaults(func=cmd_run_local)

    start_parser = commands.add_parser(
        "start", parents=[PINS], help="start a build (or a batch of every target) and follow it"
    )
    start_parser.add_argument("--project", required=True, help="CodeBuild project name")
    which = start_parser.add_mutually_exclusive_group()
    which.add_argument("--target", help="target to build (default DEFAULT_TARGET)")
    which.add_argument(
        "--batch", action="store_true", help="every target, then each one's smoke (buildspecs/batch.yml)"
    )
    start_parser.add_argument(
        "--watch", action="store_true", help="print phases and logs; exit with the build's status"
    )
    start_parser.add_argument("--source-version", help="commit to build (default HEAD)")
    start_parser.add_argument("--region", help="AWS region (default AWS_REGION)")
    start_parser.add_argument(
        "--poll", type=seconds, default=5.0, help="seconds between status reads (default 5)"
    )
    start_parser.set_defaults(func=cmd_start)

    batch = commands.add_parser(
        "batchspec", parents=[PINS], help="print buildspecs/batch.yml rendered from pins.env"
    )
    batch.add_argument(
        "--compare", type=path_arg, metavar="FILE", help="exit 1 unless FILE equals the rendering"
    )
    rename(batch, "--compare", "--check")
    smoke = batch.add_mutually_exclusive_group(required=True)
    smoke.add_argument(
        "--smoke-fleet",
        type=_fleet,
        metavar="ARN",
        help="each target's smoke after its build, on this reserved capacity fleet of Hopper or Blackwell "
        "GPUs (CodeBuild's on-demand LINUX_GPU_CONTAINER has A10G or T4, which cannot run it)",
    )
    smoke.add_argument(
        "--no-smoke",
        dest="smoke_fleet",
        action="store_const",
        const=None,
        help="builds only: no smoke tasks (no fleet of Hopper or Blackwell GPUs)",
    )
    batch.set_defaults(func=cmd_batchspec)


def register_ecr(ecr_commands: SubParsers) -> None:
    """Add `login`, `digest` and `promote` (Amazon ECR's API) to `epstack publish`'s commands."""
    login_parser = ecr_commands.add_parser(
        "login", help="docker login to an ECR registry (GetAuthorizationToken); others: docker login"
    )
    login_parser.add_argument(
        "registry", help="ACCOUNT.dkr.ecr.REGION.amazonaws.com[/NS] (loopback: nothing to do)"
    )
    login_parser.set_defaults(func=cmd_ecr_login)
    digest = ecr_commands.add_parser("digest", help="print the digest a tag names, in any registry")
    digest.add_argument(
        "image",
        metavar="IMAGE:TAG",
        help="an image by tag: in ECR (REPOSITORY:TAG or its URI) or HOST/REPO:TAG",
    )
    digest.set_defaults(func=cmd_ecr_digest)
    promote = ecr_commands.add_parser("promote", help="point DST's tag at SRC's manifest (same digest)")
    promote.add_argument("source", metavar="SRC", help="IMAGE:TAG whose manifest to point at")
    promote.add_argument("destination", metavar="DST", help="IMAGE:TAG to point at it")
    promote.set_defaults(func=cmd_ecr_promote)
