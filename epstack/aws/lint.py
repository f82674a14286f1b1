"""`epstack codebuild lint FILE...`: the shipped buildspec schema, then the project's rules.

Rules (each finding names file:line and the fix):
- no secret in plain text: secret-looking variables, AWS key IDs, private keys, tokens, passwords
  on a command line; secrets come from env.secrets-manager or env.parameter-store;
- no AWS account ID in the repository (ARNs, ECR hosts);
- pins come from pins.env: no pin set as a variable, pins.env never sourced or grepped, no pinned
  package installed at a version written in a command, a batch builds exactly pins.env's targets;
- Docker needs privileged mode: a batch task whose buildspec runs Docker sets privileged-mode: true
  (a single build's project setting is checked by `epstack codebuild start`);
- exported variables are not secrets (CodeBuild cannot export them);
- paths stay in their place (places.py): artifacts' and reports' base-directory and globs inside the
  source directory and their base, a batch task's buildspec inside the source directory (and never
  read from outside it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from epstack.aws.buildspec import Document, Finding, load_document, retry_findings, schema_findings
from epstack.aws.places import Place
from epstack.credentials import TOKENS, Shape
from epstack.errors import BadInput, EpstackError
from epstack.pins.model import Pins
from epstack.stack import DEEP_EP_PROVIDERS

SECRET_NAME = re.compile(r"(PASSWORD|PASSWD|SECRET|TOKEN|PRIVATE_KEY|API_KEY|ACCESS_KEY|CREDENTIAL)", re.I)
SECRET_VALUES: tuple[Shape, ...] = (
    *TOKENS,
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), "a private key"),
    (re.compile(r"--password[ =]+['\"]?(?!\$)[^\s'\"-]"), "a password on a command line"),
    (re.compile(r"\blogin\b.*\s-p\s+['\"]?(?!\$)[^\s'\"-]"), "a password on a command line"),
)
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


def lint(paths: Sequence[Path], pins: Pins, *, source: Path) -> list[Finding]:
    """Every finding in every file, in file then line order."""
    findings: list[Finding] = []
    for path in paths:
        document = load_document(path)
        findings += schema_findings(document) + retry_findings(document)
        findings += rule_findings(document, pins, source=source)
    return sorted(set(findings), key=lambda f: (str(f.file), f.line, f.message))


def rule_findings(document: Document, pins: Pins, *, source: Path) -> list[Finding]:
    data = document.plain()
    return [
        *_plaintext_secrets(document, data),
        *_account_ids(document),
        *_pins_from_pins_env(document, data, pins),
        *_batch(document, data, pins, source),
        *_exported(document, data),
        *_file_set_paths(document, data, source),
    ]


def _at(document: Document, path: Sequence[str | int], message: str) -> Finding:
    return Finding(file=document.path, line=document.line(path), message=message)


def _variables(data: dict[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str, Any]]:
    """(path, name, value) of every plain variable: env.variables and each batch task's."""
    for name, value in ((data.get("env") or {}).get("variables") or {}).items():
        yield ("env", "variables", name), name, value
    batch = data.get("batch") or {}
    for kind in ("build-list", "build-graph"):
        for index, task in enumerate(batch.get(kind) or []):
            for name, value in ((task.get("env") or {}).get("variables") or {}).items():
                yield ("batch", kind, index, "env", "variables", name), name, value
    for name, value in (
        (((batch.get("build-matrix") or {}).get("dynamic") or {}).get("env") or {}).get("variables") or {}
    ).items():
        yield ("batch", "build-matrix", "dynamic", "env", "variables", name), name, value


def _commands(data: dict[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    for phase, body in (data.get("phases") or {}).items():
        for key in ("commands", "finally"):
            for index, text in enumerate((body or {}).get(key) or []):
                yield ("phases", phase, key, index), str(text)


def _plaintext_secrets(document: Document, data: dict[str, Any]) -> Iterator[Finding]:
    for path, name, value in _variables(data):
        if SECRET_NAME.search(name) and value not in (None, ""):
            yield _at(document, path, f"{name} looks like a secret in plain text; fix: {SECRET_FIX}")
    for path, text in document.strings():
        for pattern, what in SECRET_VALUES:
            if pattern.search(text):
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
                )


def _pins_from_pins_env(document: Document, data: dict[str, Any], pins: Pins) -> Iterator[Finding]:
    keys = {f.alias for f in Pins.model_fields.values() if f.alias}
    for path, name, _ in _variables(data):
        if name in keys or name.startswith("ARCH_"):
            yield _at(
                document, path, f"{name} is a pin; fix: pins come from pins.env: change it there, not here"
            )
    pinned = {*pins.base_packages, *DEEP_EP_PROVIDERS, "sglang", "deep_ep"}
    for path, text in _commands(data):
        if PINS_AS_TEXT.search(text):
            yield _at(
                document,
                path,
                "pins.env is data, never sourced or grepped; fix: use `epstack pins check --json` "
                "or the epstack command that needs the pins",
            )
        for match in PIP_PIN.finditer(text):
            if match.group(2).lower() in pinned:
                yield _at(
                    document,
                    path,
                    f"{match.group(2)} installed at a version written here; fix: pins come from pins.env "
                    "(epstack render writes the requirement files)",
                )


def _uses_docker(document: Document) -> int | None:
    """The line of the first command that runs Docker, else None."""
    for path, text in _commands(document.plain()):
        if DOCKER.search(text + " "):
            return document.line(path)
    return None


def _batch(document: Document, data: dict[str, Any], pins: Pins, source: Path) -> Iterator[Finding]:
    batch = data.get("batch") or {}
    tasks = [
        (kind, i, t) for kind in ("build-list", "build-graph") for i, t in enumerate(batch.get(kind) or [])
    ]
    place = Place.source(source)
    for kind, index, task in tasks:
        env = task.get("env") or {}
        target = (env.get("variables") or {}).get("EPSTACK_TARGET")
        path: tuple[str | int, ...] = ("batch", kind, index)
        if target is not None and str(target) not in pins.targets:
            yield _at(
                document,
                (*path, "env", "variables", "EPSTACK_TARGET"),
                f"EPSTACK_TARGET={target} is not a target of pins.env; fix: one of {', '.join(pins.targets)} "
                "(epstack codebuild batchspec renders the batch from pins.env)",
            )
        named = str(task.get("buildspec") or "")
        outside = place.leaves(source / named, named=named) if named else None
        if outside:
            yield _at(document, (*path, "buildspec"), f"batch.{kind}.{index}.buildspec: {outside}")
            continue
        spec = source / named if named else document.path
        if env.get("privileged-mode") is not True and spec.is_file():
            docker_line = _uses_docker(load_document(spec))
            if docker_line is not None:
                yield _at(
                    document,
                    path,
                    f"task {task.get('identifier', index)} runs Docker ({spec}:{docker_line}) "
                    "without privileged mode; fix: set env.privileged-mode: true",
                )
    targets = {
        str(((t.get("env") or {}).get("variables") or {}).get("EPSTACK_TARGET"))
        for _, _, t in tasks
        if ((t.get("env") or {}).get("variables") or {}).get("EPSTACK_TARGET")
    }
    if targets and not targets >= set(pins.targets):
        missing = [target for target in pins.targets if target not in targets]
        yield _at(
            document,
            ("batch",),
            f"the batch leaves out {', '.join(missing)} of pins.env's targets; "
            f"fix: epstack codebuild batchspec > {document.path}",
        )


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


def lint_or_raise(paths: Iterable[Path], pins: Pins, *, source: Path) -> None:
    """For commands that run a buildspec: any finding is bad input (the first, with a count)."""
    findings = lint(list(paths), pins, source=source)
    if findings:
        more = f" (and {len(findings) - 1} more: epstack codebuild lint)" if len(findings) > 1 else ""
        raise BadInput(f"{findings[0]}{more}")


class LintFailed(EpstackError):
    """Findings were printed; exit 1 like any failed check."""

    exit_code = 1
