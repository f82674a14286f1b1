"""`epstack codebuild lint FILE...`: AWS's rules for any buildspec, epstack's own on top for its own.

Two rule sets; each finding names its set (`[aws]`, `[epstack]`), its file:line and the fix.

aws, what CodeBuild's documentation asks of any buildspec:
- the shipped schema (buildspec.schema.json, from build-spec-ref.html and batch-build-buildspec.html)
  and on-failure retries (retry.py);
- no secret in plain text (build-spec-ref.html, env/variables: sensitive values belong in
  env.parameter-store or env.secrets-manager), found by value and by name (secretscan.py);
- no exported variable from a secret store (build-spec-ref.html, env/exported-variables);
- a batch task whose buildspec runs Docker sets privileged-mode: true (batch-build-buildspec.html,
  env/privileged-mode: otherwise the build fails to reach the Docker daemon);
- paths stay in the source directory CodeBuild checks out (places.py): artifacts' and reports'
  base-directory and globs, a batch task's buildspec (build-spec-ref.html: relative to the original
  build location; never read from outside it).

epstack, this project's own (on for SOURCE/buildspecs/ when SOURCE holds pins.env, or --rules epstack):
- no AWS account ID in the repository (ARNs, ECR hosts);
- pins come from pins.env: no pin set as a variable, pins.env never sourced or grepped, no pinned
  package installed at a version written in a command, a batch builds exactly pins.env's targets.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from epstack.aws.batchspec import RENDER
from epstack.aws.buildspec import (
    Document,
    Finding,
    RuleSet,
    load_document,
    retry_findings,
    schema_findings,
)
from epstack.aws.places import Place
from epstack.aws.secretscan import in_text, in_variable
from epstack.errors import BadInput, EpstackError
from epstack.pins.model import Pins
from epstack.stack import DEEP_EP_PROVIDERS

ACCOUNT_ID: tuple[re.Pattern[str], ...] = (
    re.compile(r"\barn:aws[a-z-]*:[a-z0-9-]*:[a-z0-9-]*:(\d{12}):"),
    re.compile(r"\b(\d{12})\.dkr\.ecr[.-]"),
)
PINS_AS_TEXT = re.compile(
    r"(^|[;&|(]\s*)(source|\.)\s+\S*pins\.env\b|\b(grep|sed|awk|cut|cat)\b[^|;&]*pins\.env\b"
    r"|export\s+\$\([^)]*pins\.env"
)
DOCKER = re.compile(r"(^|[\s;&|(])(docker|epstack\s+(build|publish))\s")
PIP_PIN = re.compile(r"\b(pip3?|uv\s+pip)\s+install\b.*?\b([A-Za-z0-9_.-]+)==\S+")
SECRET_FIX = (
    "move it to env.secrets-manager (or env.parameter-store as a SecureString) and refer to the variable"
)
# The pins, or how to read them: only epstack's rules need them.
PinsSource = Pins | Callable[[], Pins]


def rules_for(path: Path, source: Path) -> RuleSet:
    """epstack's rules for epstack's own buildspecs (SOURCE/buildspecs/, SOURCE holding pins.env);
    AWS's for any other file, such as another project's buildspecs/."""
    own = (source / "pins.env").is_file() and path.resolve().is_relative_to((source / "buildspecs").resolve())
    return "epstack" if own else "aws"


def lint(
    paths: Sequence[Path], pins: PinsSource, *, source: Path, rules: RuleSet | None = None
) -> list[Finding]:
    """Every finding in every file, in file then line order; `rules` None: each file's rules_for."""
    findings: list[Finding] = []
    loaded: Pins | None = None
    for path in paths:
        document = load_document(path)
        findings += aws_findings(document, source=source)
        if (rules or rules_for(path, source)) == "epstack":
            if loaded is None:
                loaded = pins if isinstance(pins, Pins) else pins()
            findings += epstack_findings(document, loaded)
    return sorted(set(findings), key=lambda f: (str(f.file), f.line, f.message))


def aws_findings(document: Document, *, source: Path) -> list[Finding]:
    data = document.plain()
    return [
        *schema_findings(document),
        *retry_findings(document),
        *_plaintext_secrets(document, data),
        *_exported(document, data),
        *_batch_tasks(document, data, source),
        *_file_set_paths(document, data, source),
    ]


def epstack_findings(document: Document, pins: Pins) -> list[Finding]:
    data = document.plain()
    return [
        *_account_ids(document),
        *_pins_from_pins_env(document, data, pins),
        *_batch_targets(document, data, pins),
    ]


def _at(document: Document, path: Sequence[str | int], message: str, rules: RuleSet = "aws") -> Finding:
    return Finding(file=document.path, line=document.line(path), message=message, rules=rules)


def _variables(data: dict[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str, Any]]:
    """(path, name, value) of every plain variable: env.variables, each batch task's and the build
    matrix's (a dynamic one's value is the list of its values)."""
    matrix = _mapping(_mapping(data.get("batch")).get("build-matrix"))
    blocks = [
        (("env",), data.get("env")),
        *(((*path, "env"), task.get("env")) for path, task in _tasks(data)),
        *(
            (("batch", "build-matrix", part, "env"), _mapping(matrix.get(part)).get("env"))
            for part in ("static", "dynamic")
        ),
    ]
    for path, env in blocks:
        for name, value in _mapping(_mapping(env).get("variables")).items():
            yield (*path, "variables", name), name, value


def _commands(data: dict[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    for phase, body in (data.get("phases") or {}).items():
        for key in ("commands", "finally"):
            for index, text in enumerate((body or {}).get(key) or []):
                yield ("phases", phase, key, index), str(text)


def _plaintext_secrets(document: Document, data: dict[str, Any]) -> Iterator[Finding]:
    variables: dict[tuple[str | int, ...], tuple[str, Any]] = {}
    for path, name, value in _variables(data):
        items = enumerate(value) if isinstance(value, list) else [(None, value)]
        variables |= {path if i is None else (*path, i): (name, item) for i, item in items}
    for path, (name, value) in variables.items():
        what = in_variable(name, value)
        if what:
            yield _at(document, path, f"{what} in plain text; fix: {SECRET_FIX}")
    for path, text in document.strings():
        what = None if path in variables else in_text(text)
        if what:
            yield _at(document, path, f"{what} in plain text; fix: {SECRET_FIX}")


def _account_ids(document: Document) -> Iterator[Finding]:
    for path, text in document.strings():
        for pattern in ACCOUNT_ID:
            if pattern.search(text):
                yield _at(
                    document,
                    path,
                    "an AWS account ID in the repository; fix: read it at build time (parameter-store, "
                    "or the registry host in EPSTACK_REGISTRY) instead of writing it here",
                    "epstack",
                )


def _pins_from_pins_env(document: Document, data: dict[str, Any], pins: Pins) -> Iterator[Finding]:
    keys = {f.alias for f in Pins.model_fields.values() if f.alias}
    for path, name, _ in _variables(data):
        if name in keys or name.startswith("ARCH_"):
            yield _at(
                document,
                path,
                f"{name} is a pin; fix: pins come from pins.env: change it there, not here",
                "epstack",
            )
    pinned = {*pins.base_packages, *DEEP_EP_PROVIDERS, "sglang", "deep_ep"}
    for path, text in _commands(data):
        if PINS_AS_TEXT.search(text):
            yield _at(
                document,
                path,
                "pins.env is data, never sourced or grepped; fix: use `epstack pins check --json -` "
                "or the epstack command that needs the pins",
                "epstack",
            )
        for match in PIP_PIN.finditer(text):
            if match.group(2).lower() in pinned:
                yield _at(
                    document,
                    path,
                    f"{match.group(2)} installed at a version written here; fix: pins come from pins.env "
                    "(epstack render writes the requirement files)",
                    "epstack",
                )


def _uses_docker(document: Document) -> int | None:
    """The line of the first command that runs Docker, else None."""
    for path, text in _commands(document.plain()):
        if DOCKER.search(text + " "):
            return document.line(path)
    return None


def _tasks(data: dict[str, Any]) -> Iterator[tuple[tuple[str | int, ...], dict[str, Any]]]:
    """(path, task) of every build-list and build-graph task."""
    batch = _mapping(data.get("batch"))
    for kind in ("build-list", "build-graph"):
        items = batch.get(kind)
        for index, task in enumerate(items if isinstance(items, list) else []):
            yield ("batch", kind, index), _mapping(task)


def _batch_tasks(document: Document, data: dict[str, Any], source: Path) -> Iterator[Finding]:
    """Each task's buildspec inside the source directory, and privileged where it runs Docker."""
    place = Place.source(source)
    for path, task in _tasks(data):
        named = str(task.get("buildspec") or "")
        outside = place.leaves(source / named, named=named) if named else None
        if outside:
            yield _at(document, (*path, "buildspec"), f"{_where(path)}.buildspec: {outside}")
            continue
        spec = source / named if named else document.path
        if _mapping(task.get("env")).get("privileged-mode") is not True and spec.is_file():
            docker_line = _uses_docker(load_document(spec))
            if docker_line is not None:
                yield _at(
                    document,
                    path,
                    f"task {task.get('identifier', path[-1])} runs Docker ({spec}:{docker_line}) "
                    "without privileged mode; fix: set env.privileged-mode: true",
                )


def _batch_targets(document: Document, data: dict[str, Any], pins: Pins) -> Iterator[Finding]:
    """Each task's EPSTACK_TARGET a target of pins.env, and every target built."""
    targets: set[str] = set()
    for path, task in _tasks(data):
        target = _mapping(_mapping(task.get("env")).get("variables")).get("EPSTACK_TARGET")
        if not target:
            continue
        targets.add(str(target))
        if str(target) not in pins.targets:
            yield _at(
                document,
                (*path, "env", "variables", "EPSTACK_TARGET"),
                f"EPSTACK_TARGET={target} is not a target of pins.env; fix: one of {', '.join(pins.targets)} "
                "(epstack codebuild batchspec renders the batch from pins.env)",
                "epstack",
            )
    if targets and not targets >= set(pins.targets):
        missing = [target for target in pins.targets if target not in targets]
        yield _at(
            document,
            ("batch",),
            f"the batch leaves out {', '.join(missing)} of pins.env's targets; "
            f"fix: {RENDER} > {document.path}",
            "epstack",
        )


def _where(path: Sequence[str | int]) -> str:
    return ".".join(map(str, path))


def _file_sets(data: dict[str, Any]) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    """(path, block) of every artifacts and reports block."""
    artifacts = _mapping(data.get("artifacts"))
    if artifacts:
        yield ("artifacts",), artifacts
    for name, block in _mapping(artifacts.get("secondary-artifacts")).items():
        yield ("artifacts", "secondary-artifacts", name), _mapping(block)
    for group, block in _mapping(data.get("reports")).items():
        yield ("reports", group), _mapping(block)


def _mapping(value: Any) -> dict[str, Any]:
    """`value` when it is a mapping, else {} (the schema reports it)."""
    return value if isinstance(value, dict) else {}


def _file_set_paths(document: Document, data: dict[str, Any], source: Path) -> Iterator[Finding]:
    place = Place.source(source)
    for path, block in _file_sets(data):
        where = ".".join(path)
        base = str(block.get("base-directory") or "")
        outside = place.leaves(source / base, named=base)
        if outside:
            yield _at(document, (*path, "base-directory"), f"{where}.base-directory: {outside}")
            continue
        within = Place.base(source / base, base)
        files = block.get("files")
        patterns = [files] if isinstance(files, str) else files if isinstance(files, list) else []
        for index, pattern in enumerate(patterns):
            outside = within.leaves(source / base / str(pattern), named=str(pattern))
            if outside:
                yield _at(document, (*path, "files", index), f"{where}.files: {outside}")


def _exported(document: Document, data: dict[str, Any]) -> Iterator[Finding]:
    env = data.get("env") or {}
    secret_names = set(env.get("parameter-store") or {}) | set(env.get("secrets-manager") or {})
    for index, name in enumerate(env.get("exported-variables") or []):
        if name in secret_names:
            yield _at(
                document,
                ("env", "exported-variables", index),
                f"{name} comes from a secret store and cannot be exported; fix: export a plain variable",
            )


def lint_or_raise(paths: Iterable[Path], pins: PinsSource, *, source: Path) -> None:
    """For commands that run a buildspec: any finding of its rules is bad input (the first, with a
    count)."""
    findings = lint(list(paths), pins, source=source)
    if findings:
        more = f" (and {len(findings) - 1} more: epstack codebuild lint)" if len(findings) > 1 else ""
        raise BadInput(f"{findings[0]}{more}")


class LintFailed(EpstackError):
    """Findings were printed; exit 1 like any failed check."""

    exit_code = 1
