"""`epstack pins check|get|predict|bump|outdated`: the pins file as users and scripts read and move it.

`pins get KEY...` is how the shell scripts (scripts/gpu, benchmarks) get a version: from the
validated pins, never from a constant of their own.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from epstack.bump.branch import (
    Pending,
    branch_name,
    checkout_of,
    commit_files,
    made,
    pending,
    push,
    record_pending,
    remote_url,
)
from epstack.bump.forge import GitHub, PullRequest, open_pull_request
from epstack.bump.groups import GROUPS, Group, group_named, propose
from epstack.bump.outdated import OUTDATED, Outdated, Sources, outdated
from epstack.bump.plan import apply_bump, bump_texts, plan_bump
from epstack.bump.report import Section, markdown, sections, short, title, verdict
from epstack.bump.upstream import IMAGE_KEYS, current_digest
from epstack.commands.common import (
    LOCKS,
    PINS,
    FileOrBare,
    SubParsers,
    path_arg,
    pins_path,
    positive_int,
    results_console,
    working,
)
from epstack.commands.lock import moves_table
from epstack.commands.lock import register as register_lock
from epstack.errors import BadInput, EnvironmentProblem
from epstack.journal import exclusive, staging
from epstack.layers import LAYER_NAMES
from epstack.output import check_writable, write_file
from epstack.pins.load import load_pins
from epstack.pins.model import Pins
from epstack.python.lock import stale_locks
from epstack.python.lockfile import locks_dir
from epstack.python.predict import predict_locks, predict_pins
from epstack.python.releases import index_url
from epstack.python.resolve import check_installable, compile_requirements
from epstack.suggest import did_you_mean


def cmd_pins_check(args: argparse.Namespace, console: Console) -> int:
    path = pins_path(args.pins)
    pins = load_pins(path)
    if args.json:
        check_writable(args.json, what="the pins JSON", inputs=[path])
        write_file(
            args.json,
            json.dumps(pins.model_dump(by_alias=True), indent=2, sort_keys=True) + "\n",
            what="the pins JSON",
        )
        return 0
    table = Table("target", "layer", "image")
    for target in pins.targets:
        for layer in LAYER_NAMES:
            table.add_row(escape(target), layer, escape(pins.image_ref(layer, target)))
    out = results_console(console)
    out.print(table)
    out.print(
        f"[green]{escape(str(path))}: ok[/] "
        f"({len(pins.targets)} targets, default {escape(pins.default_target)})"
    )
    for caveat in pins.caveats:
        console.print(f"[yellow]caveat:[/] {escape(caveat)}")
    return 0


def cmd_pins_get(args: argparse.Namespace, console: Console) -> int:
    """Each KEY's validated value on its own line (ARCH_<NAME> as written, comma-separated)."""
    path = pins_path(args.pins)
    values = {key: str(value) for key, value in load_pins(path).as_env().items()}
    for key in args.keys:
        if key not in values:
            hint = did_you_mean(key, values) or "see docs/reference/pins.md#keys"
            raise BadInput(f"{key}: not a key of {path}; fix: {hint}")
        print(values[key])
    return 0


def _print_locks(console: Console, pins: Pins, directory: Path) -> None:
    stale = stale_locks(pins, directory)
    if not stale:
        _print(console, f"{directory}: every lock is fresh for these pins; no build would move", "green")
        return
    for entry in stale:
        _print(console, str(entry), "yellow")
    run = predict_locks(pins, directory)
    if isinstance(run, str):
        _print(console, f"the locks cannot be resolved for these pins: {run}", "red")
    elif run.moves:
        console.print(
            moves_table(run.moves, f"against {escape(str(directory))}: what `epstack pins lock` would move")
        )
    else:
        _print(console, "resolved again, the stale locks keep every version", "green")


def _print(console: Console, text: str, style: str) -> None:
    console.print(f"[{style}]{escape(text)}[/]")


def cmd_pins_predict(args: argparse.Namespace, console: Console) -> int:
    path = pins_path(args.pins)
    pins = load_pins(path)
    prediction = predict_pins(pins, locks_dir(args.locks))
    console = results_console(console)  # what uv would install is this command's result
    console.print(
        f"uv would install {prediction.installs} distributions for {prediction.requested} "
        f"(Python {pins.image_target.python_version}, {pins.image_target.platform}; "
        f"answered from {escape(prediction.source)})"
    )
    for move in prediction.moves:
        _print(console, str(move), "red")
        _print(console, f"  required by: {', '.join(move.required_by)}", "dim")
    for move in prediction.overrides:
        _print(
            console,
            f"{move.package}: a plain install takes {move.resolved} ({', '.join(move.required_by)}); "
            f"the images install {move.pinned} over it, {move.reason}",
            "yellow",
        )
    for provider in prediction.deep_ep:
        _print(
            console,
            f"deep_ep: {provider.package} {provider.resolved} would install its own deep_ep over the one "
            f"built from DEEPEP_REF {pins.deepep_ref[:7]} ({provider.reason})",
            "red",
        )
    if not prediction.drifts:
        _print(console, f"{path}: installing {prediction.requested} moves no pinned package", "green")
    _print_locks(console, pins, locks_dir(args.locks))
    return 1 if prediction.drifts else 0


def _table(section: Section) -> Table:
    table = Table(*section.columns, title=escape(section.title))
    for row in section.rows:
        table.add_row(*map(escape, row))
    return table


@dataclass(frozen=True, kw_only=True)
class _Request:
    """What `pins bump` was asked to move, checked before anything is asked of upstream."""

    assignments: tuple[str, ...]  # KEY=VALUE as given
    digests: tuple[str, ...]  # the image pins whose digest to follow
    group: Group | None

    @property
    def label(self) -> str:
        """What names the pull request's branch: the group, "digests", the keys given."""
        keys = sorted({a.partition("=")[0].lower() for a in self.assignments})
        group = [self.group.name] if self.group else []
        return "-".join([*group, *(["digests"] if self.digests else []), *keys])

    @property
    def words(self) -> str:
        """The request as arguments: a rerun of the same words resumes a pull request not made."""
        group = ["--group", self.group.name] if self.group else []
        return " ".join([*self.assignments, *(f"--digest {key}" for key in self.digests), *group])


def _request(args: argparse.Namespace) -> _Request:
    """BadInput when nothing was asked, a --digest key is not an image pin or --group no group."""
    digests = IMAGE_KEYS if args.all_digests else tuple(dict.fromkeys(args.digest or ()))
    for key in digests:
        if key not in IMAGE_KEYS:
            hint = did_you_mean(key, IMAGE_KEYS) or f"name one of {', '.join(IMAGE_KEYS)}"
            raise BadInput(f"--digest {key}: not a pin of an image by digest; fix: {hint}")
    group = group_named(args.group) if args.group else None
    if not (args.assignments or digests or group):
        raise BadInput(
            "pins bump: nothing to move; fix: give KEY=VALUE, --digest KEY, --all-digests or --group NAME"
        )
    return _Request(assignments=tuple(args.assignments), digests=digests, group=group)


def _proposed(request: _Request, pins: Pins, candidates: int, console: Console) -> tuple[str, ...]:
    """The KEY=VALUE list to check: the arguments, each digest that moved, the group's proposal."""
    env = pins.as_env()
    proposed = list(request.assignments)
    with working(console, "pins bump: asking upstream (registries, the package index)"):
        for key in request.digests:
            current = current_digest(key, env[key])
            if current != env[key]:
                proposed.append(f"{key}={current}")
            else:
                _print(console, f"{key}: {short(env[key])} is still where its tag points", "green")
        if request.group:
            group = request.group
            values = propose(
                group,
                pins,
                index=index_url(),
                resolver=compile_requirements,
                digests=current_digest,
                candidates=candidates,
            )
            proposed += [f"{key}={value}" for key, value in values.items()]
            if not values:
                _print(console, f"group {group.name} ({', '.join(group.keys)}): nothing newer", "green")
    return tuple(proposed)


@dataclass(frozen=True, kw_only=True)
class _PullRequestTarget:
    root: Path
    remote: str
    forge: GitHub
    branch: str
    found: PullRequest | None  # the branch's open pull request, asked before any work


def _pull_request_target(
    args: argparse.Namespace, files: tuple[Path, Path], label: str
) -> _PullRequestTarget:
    """Where --open-pr goes, its token checked by asking the forge for the branch's open pull request
    before anything is asked of upstream or written. BadInput when the pins file or the locks are not
    in the checkout."""
    if args.dry_run:
        raise BadInput("--open-pr and --dry-run: a dry run writes nothing to commit; fix: drop one")
    root = checkout_of(files[0])
    for each in files:
        if not each.resolve().is_relative_to(root.resolve()):
            raise BadInput(f"--open-pr: {each} is outside the checkout {root}; fix: use the checkout's own")
    forge = GitHub.from_environment(remote_url(root, args.remote))
    branch = branch_name(label)
    return _PullRequestTarget(
        root=root, remote=args.remote, forge=forge, branch=branch, found=forge.find(branch)
    )


def _open_pr(console: Console, target: _PullRequestTarget, wanted: Pending, base: str) -> None:
    """The bump's files as one commit on its branch, pushed, and its pull request; then nothing pending."""
    files = [target.root / name for name in wanted.files]
    commit = commit_files(target.root, files, message=wanted.title)
    pushed = push(target.root, commit, remote=target.remote, branch=target.branch)
    state = "pushed" if pushed.moved else "already there"
    console.print(f"branch {escape(pushed.branch)}: {pushed.commit[:12]} {state}")
    action, pull = open_pull_request(
        target.forge, target.found, head=target.branch, base=base, title=wanted.title, body=wanted.body
    )
    console.print(f"pull request #{pull.number} {action}: {escape(pull.url)}")
    made(target.root, target.branch)


def cmd_pins_bump(args: argparse.Namespace, console: Console) -> int:
    """One bump at a time per pins file, from reading it to the commit (journal.exclusive)."""
    path, directory = pins_path(args.pins), locks_dir(args.locks)
    if args.summary:
        reads = [path, directory, *([args.build_report] if args.build_report else [])]
        check_writable(args.summary, what="the summary", inputs=reads)
    with exclusive(path, what="pins bump"):
        return _bump(args, console, path, directory)


def _bump(args: argparse.Namespace, console: Console, path: Path, directory: Path) -> int:
    pins = load_pins(path)
    request = _request(args)
    target = _pull_request_target(args, (path, directory), request.label) if args.open_pr else None
    resumed = pending(target.root, target.branch, request.words) if target else None
    if target and resumed:
        _print(console, f"{path} and {directory} already hold this bump: resuming its pull request", "green")
        _open_pr(console, target, resumed, args.base)
        return 0
    assignments = _proposed(request, pins, args.candidates, console)
    if not assignments:
        _print(console, f"{path}: nothing to bump; untouched", "green")
        return 0
    with staging(path) as folder:  # uv works there too: a killed bump's files go with its staging
        with working(console, "pins bump: resolving every layer's lock again with uv"):
            bump = plan_bump(
                path,
                directory,
                assignments,
                staging=folder,
                resolver=partial(compile_requirements, workdir=folder),
                installable=partial(check_installable, workdir=folder),
                build_report=args.build_report,
            )
        console = results_console(console)  # the bump's tables, verdict and what it wrote
        for section in sections(bump):
            console.print(_table(section))
        for line in verdict(bump):
            _print(console, line, "red" if bump.refusals else "green")
        if args.summary:
            write_file(args.summary, markdown(bump), what="the summary")
            console.print(f"summary: {escape(str(args.summary))}")
        if bump.refusals:
            _print(console, f"{path} and {directory}: untouched", "red")
            return 1
        if args.dry_run:
            _print(console, f"--dry-run: {path} and {directory} untouched", "green")
            return 0
        if target:  # recorded first: should the push or the forge fail, a rerun resumes from here
            resumed = record_pending(target.root, target.branch, request=request.words, title=title(bump),
                                     body=markdown(bump), texts=bump_texts(bump))  # fmt: skip
        for each in apply_bump(bump, folder):
            console.print(f"{escape(str(each))}: written")
    if target and resumed:
        _open_pr(console, target, resumed, args.base)
    return 0


_STATUS_STYLE = {"current": "green", "newer": "yellow", "held back": "yellow", "moved": "red"}


def _print_outdated(console: Console, report: Outdated) -> None:
    """The rows as a table, then each row's note and the command that checks an unreachable one."""
    title = f"{report.pins} against upstream ({report.index}; {report.seconds:.1f} s)"
    columns = ("key", "source", "pinned", "newest", "newest that resolves (the rest held)", "status")
    table = Table(*columns, title=escape(title))
    for row in report.rows:
        cells = (row.key, row.source, short(row.pinned), short(row.newest), row.resolves, row.status)
        table.add_row(*(escape(cell) for cell in cells), style=_STATUS_STYLE.get(row.status, "dim"))
    console.print(table)
    for row in report.rows:
        if row.note:
            _print(console, f"{row.key} ({row.source}): {row.note}", _STATUS_STYLE.get(row.status, "dim"))
        if row.check:
            console.print(f"  check: {escape(row.check)}", soft_wrap=True)


def next_commands(report: Outdated) -> list[str]:
    """The bumps `pins outdated` suggests: SGLang's, and the digest of each image tag that moved."""
    moved = [row.key for row in report.rows if row.status == "moved"]
    return [
        *([f"epstack pins bump SGLANG_VERSION={report.sglang_bump} --dry-run"] if report.sglang_bump else []),
        *([f"epstack pins bump {' '.join(f'--digest {key}' for key in moved)} --dry-run"] if moved else []),
    ]


def cmd_pins_outdated(args: argparse.Namespace, console: Console) -> int:
    path = pins_path(args.pins)
    pins = load_pins(path)
    if args.json:
        check_writable(args.json, what="the report", inputs=[path])
    with working(console, "pins outdated: asking the package index, git remotes and registries"):
        report = outdated(pins, path, Sources(index=index_url(), candidates=args.candidates))
    out = results_console(console, document=args.json)
    _print_outdated(out, report)
    for command in next_commands(report):
        out.print(f"next: {escape(command)}")
    if args.json:
        write_file(args.json, OUTDATED.dumps(report), what="the report")
        console.print(f"report: {escape(str(args.json))}")
    if not report.answered:
        raise EnvironmentProblem(
            "no upstream source answered (package index, registry, git); fix: run where one is reachable, "
            "or point UV_DEFAULT_INDEX at a mirror of the index"
        )
    return 0


def _add_candidates(parser: argparse.ArgumentParser) -> None:
    """`--candidates N`: how many newer releases of a pin uv resolves, newest first (pins outdated: of
    every index pin; pins bump: of a --group's first pin)."""
    parser.add_argument(
        "--candidates",
        type=positive_int,
        default=Sources.candidates,
        metavar="N",
        help="newer releases of a pin resolved, newest first; bump: of a --group's first pin "
        "(default %(default)s)",
    )


def register(subparsers: SubParsers) -> None:
    """Add `pins check`, `get`, `predict`, `bump`, `outdated` and `lock` to the top-level subcommands."""
    pins = subparsers.add_parser(
        "pins", help="check the pins file, read a pin, predict and bump moves, see upstream, lock the layers"
    )
    commands = pins.add_subparsers(dest="pins_command", required=True, metavar="SUBCOMMAND")
    check = commands.add_parser("check", parents=[PINS], help="validate pins.env and its compatibility rules")
    check.add_argument(
        "--json",
        type=path_arg,
        nargs="?",
        action=FileOrBare,
        metavar="FILE",
        help="write the validated pins as JSON to FILE instead of the table (- for stdout)",
    )
    check.set_defaults(func=cmd_pins_check)
    get = commands.add_parser("get", parents=[PINS], help="print validated pins, one per line (for scripts)")
    get.add_argument("keys", nargs="+", metavar="KEY", help="pins.env keys, e.g. NCCL_VERSION")
    get.set_defaults(func=cmd_pins_get)
    commands.add_parser(
        "predict",
        parents=[PINS, LOCKS],
        help="ask uv what installing SGLang would move (the fresh locks answer offline, else the index)",
    ).set_defaults(func=cmd_pins_predict)
    bump = commands.add_parser(
        "bump",
        parents=[PINS, LOCKS],
        help="move pins: rules, relock, predict and render checked before pins.env and locks are written",
    )
    bump.add_argument("assignments", nargs="*", metavar="KEY=VALUE", help="e.g. SGLANG_VERSION=0.5.24")
    bump.add_argument(
        "--digest",
        action="append",
        metavar="KEY",
        help=f"the digest its pinned tag has now, from the registry ({', '.join(IMAGE_KEYS)}; repeatable)",
    )
    bump.add_argument("--all-digests", action="store_true", help="--digest for every image pin")
    bump.add_argument(
        "--group",
        metavar="NAME",
        help=f"move a group as one: {'; '.join(f'{g.name} ({g.why})' for g in GROUPS)}",
    )
    _add_candidates(bump)
    bump.add_argument(
        "--open-pr",
        action="store_true",
        help="commit pins.env and the locks on the bump's own branch, push it and open or update its pull "
        "request (GitHub; token in $GITHUB_TOKEN, repository from the remote or $GITHUB_REPOSITORY)",
    )
    bump.add_argument("--base", default="main", metavar="BRANCH", help="--open-pr: the branch it merges into")
    bump.add_argument(
        "--remote", default="origin", metavar="NAME", help="--open-pr: the git remote to push to"
    )
    bump.add_argument("--dry-run", action="store_true", help="check and print, write neither pins nor locks")
    bump.add_argument("--summary", type=path_arg, metavar="FILE", help="also write the result as Markdown")
    bump.add_argument(
        "--build-report",
        type=path_arg,
        metavar="FILE",
        help="the last `epstack build --report`: its image sizes estimate the bytes a node pulls",
    )
    bump.set_defaults(func=cmd_pins_bump)
    newer = commands.add_parser(
        "outdated",
        parents=[PINS],
        help="each pin against upstream: the newest release and the newest that resolves with the rest held",
    )
    newer.add_argument(
        "--json", type=path_arg, metavar="FILE", help="also write the rows (pins-outdated/1; - for stdout)"
    )
    _add_candidates(newer)
    newer.set_defaults(func=cmd_pins_outdated)
    register_lock(commands)
