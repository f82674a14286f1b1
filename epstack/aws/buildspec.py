"""A buildspec (version 0.1 or 0.2) as epstack reads it: YAML that keeps its line numbers, checked
against the shipped JSON Schema, then a typed model for the runner (0.2 only).

The schema (buildspec.schema.json) is written from the AWS reference (build-spec-ref,
batch-build-buildspec); AWS publishes none. Every error names file:line and, where a key is
misspelt, the key it was probably meant to be.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

import jsonschema
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.composer import Composer, MaxDepthExceededError
from ruamel.yaml.constructor import RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError
from ruamel.yaml.events import AliasEvent
from ruamel.yaml.nodes import ScalarNode
from ruamel.yaml.reader import ReaderError

from epstack.aws.retry import Retry, parse_retry
from epstack.errors import BadInput, printable, shown
from epstack.inputs import read_text

SCHEMA_PATH = Path(__file__).with_name("buildspec.schema.json")
PHASES = ("install", "pre_build", "build", "post_build")
# Linux shells CodeBuild knows (env/shell); the runner runs the same binaries.
SHELLS = {"bash": "bash", "/bin/sh": "/bin/sh"}
# What a buildspec may make the loader, lint and the runner walk (the repository's largest is 3 KiB,
# 7 levels deep, about 150 nodes): a billion-laughs alias bomb expands to 10^9 nodes from 500 bytes.
MAX_BYTES = 256 << 10
MAX_DEPTH = 64
MAX_NODES = 10_000  # counted with every alias expanded, as every walk over the document sees them
MAX_SCALAR = 8 << 10  # characters in one key or value (lint's rules read each one whole)
# Characters of every key and value with aliases expanded: lint scans each string it meets (secrets by
# value and entropy), so 9000 aliases of an 8 KiB command were 72 MB to scan (87 s). Without aliases a
# buildspec holds at most MAX_BYTES.
MAX_TEXT = 1 << 20
# aws: what CodeBuild's documentation asks of any buildspec; epstack: this project's own rules.
RuleSet = Literal["aws", "epstack"]


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One problem in a buildspec, at a line (1-based), and the rule set that found it."""

    file: Path
    line: int
    message: str
    rules: RuleSet = "aws"

    def __str__(self) -> str:
        """The finding as printed: a buildspec's keys and values in it with their controls escaped."""
        return printable(f"{self.file}:{self.line}: [{self.rules}] {self.message}")


@dataclass(frozen=True, kw_only=True)
class Document:
    """The parsed YAML (ruamel round-trip nodes, which carry positions) and its file."""

    path: Path
    root: CommentedMap

    def line(self, path: Sequence[str | int]) -> int:
        """1-based line of the deepest key or item of `path` that exists (a key a merge (<<) brought in:
        where its anchor's mapping writes it)."""
        node: Any = self.root
        line = node.lc.line
        for key in path:
            if isinstance(node, CommentedMap) and key in node:
                line = _key_line(node, key, line)
            elif isinstance(node, CommentedSeq) and isinstance(key, int) and 0 <= key < len(node):
                line = node.lc.item(key)[0]
            else:
                break
            node = node[key]
        return int(line) + 1

    def plain(self) -> Any:
        return _plain(self.root)

    def strings(self) -> Iterator[tuple[tuple[str | int, ...], str]]:
        """Every key and string value with its path (keys too: report groups are named by ARN)."""
        yield from _strings(self.root, ())


def _key_line(mapping: CommentedMap, key: Any, default: int) -> int:
    """The 0-based line of `key` in `mapping`, or in the mapping a merge key brought it from; `default`
    (the line reached so far) when neither knows it."""
    position = (mapping.lc.data or {}).get(key)
    if position is not None:
        return int(position[0])
    for merged in mapping.merge:  # ruamel 0.19: the mappings merged in, first wins
        if isinstance(merged, CommentedMap) and key in merged:
            return _key_line(merged, key, default)
    return default


def _plain(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    return str(node)


def _strings(node: Any, path: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield (*path, str(key)), str(key)
            yield from _strings(value, (*path, str(key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _strings(value, (*path, index))
    elif isinstance(node, str):
        yield path, node


class _Refused(MarkedYAMLError):
    """A bound of the loader, crossed at a mark, with what to write instead."""

    def __init__(self, problem: str, mark: Any, fix: str) -> None:
        super().__init__(problem=problem, problem_mark=mark)
        self.fix = fix


class _BoundedComposer(Composer):
    """ruamel's composer, also sizing each node as a walk over the loaded document meets it (every
    alias expanded): a document past MAX_NODES or MAX_TEXT, a scalar past MAX_SCALAR or an alias inside
    its own anchor (a cycle) is refused at its line. Depth is ruamel's own bound (YAML.max_depth)."""

    def __init__(self, loader: Any = None) -> None:
        super().__init__(loader)
        self.warn_double_anchors = False  # YAML lets an anchor be redefined; an alias takes the last
        self._sizes: dict[int, tuple[int, int]] = {}  # id of each finished node: (nodes, characters)
        self._open: list[list[int]] = []  # [nodes, characters] so far of each node being composed

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.parser.peek_event()
        self._open.append([1, 0])
        node = super().compose_node(parent, index)
        nodes, chars = self._open.pop()
        if isinstance(event, AliasEvent):
            if id(node) not in self._sizes:
                raise _Refused(
                    f"alias *{event.anchor} is inside the node it names (a cycle)",
                    event.start_mark,
                    "write the values out instead of the alias",
                )
            nodes, chars = self._sizes[id(node)]
        elif isinstance(node, ScalarNode):
            if len(node.value) > MAX_SCALAR:
                raise _Refused(
                    f"a value of {len(node.value)} characters, over {MAX_SCALAR}",
                    event.start_mark,
                    "put a long script in a file in the source and run that",
                )
            chars += len(node.value)
        self._sizes.setdefault(id(node), (nodes, chars))
        if self._open:
            self._open[-1][0] += nodes
            self._open[-1][1] += chars
        total = self._open[-1] if self._open else [nodes, chars]
        if max(nodes, total[0]) > MAX_NODES:
            raise _Refused(
                f"over {MAX_NODES} nodes with aliases expanded",
                event.start_mark,
                "use fewer aliases (a buildspec needs a few hundred nodes)",
            )
        if max(chars, total[1]) > MAX_TEXT:
            raise _Refused(
                f"over {MAX_TEXT:,} characters of keys and values with aliases expanded",
                event.start_mark,
                "use fewer aliases of long values (put a long script in a file in the source)",
            )
        return node


class _CheckedConstructor(RoundTripConstructor):
    """ruamel's round-trip constructor; a scalar its tag cannot read (`!!int abc`, `2020-13-01`, a
    5000-digit number, `!!bool maybe`) is a YAML error at its line, not the exception it raised."""

    def construct_non_recursive_object(self, node: Any, tag: str | None = None) -> Any:
        try:
            return super().construct_non_recursive_object(node, tag)
        except (ValueError, LookupError, ArithmeticError, TypeError):
            raise _Refused(
                f"{shown(str(node.value))} cannot be read as "
                f"{str(tag or node.tag).replace('tag:yaml.org,2002:', '!!')}",
                node.start_mark,
                "quote it to keep it a string, or correct the value",
            ) from None


def _yaml_line(exc: MarkedYAMLError) -> int:
    mark = exc.problem_mark or exc.context_mark
    return mark.line + 1 if mark is not None else 1


def load_document(path: Path) -> Document:
    """Read YAML keeping positions; unreadable files, YAML errors and documents past the bounds above
    are BadInput with file:line."""
    text = read_text(path, what="a buildspec", limit=MAX_BYTES)
    yaml = YAML()  # round-trip, ruamel's default: nodes keep their lines
    yaml.Composer = _BoundedComposer
    yaml.Constructor = _CheckedConstructor
    yaml.max_depth = MAX_DEPTH
    try:
        root = yaml.load(text)
    except _Refused as exc:
        raise BadInput(f"{path}:{_yaml_line(exc)}: {exc.problem}; fix: {exc.fix}") from None
    except MaxDepthExceededError as exc:
        raise BadInput(
            f"{path}:{_yaml_line(exc)}: nested over {MAX_DEPTH} levels deep; "
            "fix: flatten it (a buildspec needs 8 levels)"
        ) from None
    except ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise BadInput(
            f"{path}:{line}: character U+{exc.character:04X} is not allowed in YAML; "
            "fix: remove it, or write it as an escape in a double-quoted string"
        ) from None
    except MarkedYAMLError as exc:
        problem = (exc.problem or exc.context or "invalid YAML").strip()
        raise BadInput(
            f"{path}:{_yaml_line(exc)}: {problem}; fix: correct the YAML (quote commands with ': ')"
        ) from None
    if not isinstance(root, CommentedMap):
        raise BadInput(
            f"{path}:1: a buildspec is a mapping (version, phases, ...); fix: start with 'version: 0.2'"
        )
    return Document(path=path, root=root)


@cache
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
    return loaded


def schema_findings(document: Document) -> list[Finding]:
    """Validate against the shipped schema; one finding per error, at the offending key's line."""
    validator = jsonschema.Draft202012Validator(schema())
    findings = [_finding(document, error) for error in validator.iter_errors(document.plain())]
    return sorted(set(findings), key=lambda f: (f.line, f.message))


def retry_findings(document: Document) -> list[Finding]:
    """Each phase's on-failure retry that parse_retry refuses, at its line."""
    phases = document.root.get("phases")
    findings = []
    for name, body in phases.items() if isinstance(phases, Mapping) else ():
        try:
            parse_retry(body.get("on-failure") if isinstance(body, Mapping) else None)
        except ValueError as exc:
            line = document.line(["phases", name, "on-failure"])
            message = f"phases.{name}.on-failure: {exc}"
            findings.append(Finding(file=document.path, line=line, message=message))
    return findings


def _where(path: Sequence[str | int]) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def _finding(document: Document, error: jsonschema.ValidationError) -> Finding:
    path = list(error.absolute_path)
    where = _where(path)
    # A mapping: the schema's only boolean subschemas are `additionalProperties: false`, which fails
    # as that keyword of the mapping holding it.
    holder: Any = error.schema
    fix = holder.get("x-fix")
    if error.validator == "additionalProperties":
        # only `additionalProperties: false` fails as itself: the instance is an object with a key
        # the schema does not name
        allowed = sorted(holder["properties"])
        instance: Any = error.instance
        key = next(k for k in instance if k not in allowed)
        line = document.line([*path, key])
        near = difflib.get_close_matches(key, allowed)  # best first
        hint = f"did you mean {near[0]}?" if near else f"expected one of {', '.join(allowed)}"
        return Finding(
            file=document.path, line=line, message=f"{_where([*path, key])}: unknown key {shown(key)}; {hint}"
        )
    if "propertyNames" in error.absolute_schema_path and isinstance(error.instance, str):
        path.append(error.instance)  # the offending key itself, not the mapping holding it
        where = _where(path)
    line = document.line(path)
    if error.validator == "oneOf" and fix:  # the one anyOf (phases or batch) has no fix
        return Finding(file=document.path, line=line, message=f"{where}: needs {fix}")
    if error.validator == "enum":  # the schema has no const
        choices: Any = error.validator_value
        got = shown(repr(error.instance), quote=False)
        message = f"{where}: {got} is not one of {', '.join(map(repr, choices))}"
    elif error.validator == "not":
        what = (
            "these keys together"
            if isinstance(error.instance, dict)
            else shown(repr(error.instance), quote=False)
        )
        message = f"{where}: {what} not allowed"
    elif error.validator == "type":
        got = f"{type(error.instance).__name__} {shown(repr(error.instance), quote=False)}"
        message = f"{where}: expected {error.validator_value}, got {got}"
    else:
        message = f"{where}: {error.message}"
    if fix:
        message += f"; fix: {fix}"
    return Finding(file=document.path, line=line, message=message)


# ---- the typed model the runner uses ------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Command:
    text: str
    line: int


@dataclass(frozen=True, kw_only=True)
class Phase:
    name: str
    commands: tuple[Command, ...]
    finally_: tuple[Command, ...]
    on_failure: str | None  # ABORT | CONTINUE | RETRY[-count][-regex]; None: CodeBuild's transitions
    line: int
    retry: Retry | None = None


@dataclass(frozen=True, kw_only=True)
class FileSet:
    """An artifacts or reports block: globs under a base directory."""

    files: tuple[str, ...]
    base_directory: str = ""
    discard_paths: bool = False
    exclude_paths: tuple[str, ...] = ()
    name: str = ""
    file_format: str = "JUNITXML"  # reports only
    line: int = 0  # of the block's key, for messages


@dataclass(frozen=True, kw_only=True)
class Buildspec:
    path: Path
    shell: str
    variables: dict[str, str]
    parameter_store: dict[str, str]
    secrets_manager: dict[str, str]
    exported_variables: tuple[str, ...]
    phases: tuple[Phase, ...]
    reports: dict[str, FileSet] = field(default_factory=dict)
    artifacts: FileSet | None = None
    secondary_artifacts: dict[str, FileSet] = field(default_factory=dict)
    run_as: bool = False  # run-as somewhere (not supported locally)
    batch: bool = False


def _yes(value: Any) -> bool:
    return value is True or value == "yes"  # the schema's yes/no: yes, no, true or false


def _tuple(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return (str(value),) if isinstance(value, str) else tuple(str(v) for v in value)


def _file_set(block: Mapping[str, Any], line: int) -> FileSet:
    return FileSet(
        line=line,
        files=_tuple(block.get("files")),
        base_directory=str(block.get("base-directory", "")),
        discard_paths=_yes(block.get("discard-paths")),
        exclude_paths=_tuple(block.get("exclude-paths")),
        name=str(block.get("name", "")),
        file_format=str(block["file-format"]).upper() if "file-format" in block else "JUNITXML",
    )


def _commands(document: Document, name: str, key: str) -> tuple[Command, ...]:
    items = document.root["phases"][name].get(key) or []
    return tuple(
        Command(text=str(text), line=document.line(["phases", name, key, index]))
        for index, text in enumerate(items)
    )


def load_buildspec(path: Path) -> Buildspec:
    """Load and validate; any schema finding is BadInput (the first, with how many more), and so is
    version 0.1, whose commands each run in their own shell (build-env-ref-cmd): the runner has one."""
    document = load_document(path)
    findings = schema_findings(document) + retry_findings(document)
    if findings:
        more = f" (and {len(findings) - 1} more: epstack codebuild lint {path})" if len(findings) > 1 else ""
        raise BadInput(f"{findings[0]}{more}")
    data = document.plain()
    if str(data["version"]) == "0.1":
        raise BadInput(
            f"{path}:{document.line(['version'])}: run-local runs buildspec 0.2 (one shell for the whole "
            "build); 0.1 runs each command in its own shell; fix: write version: 0.2"
        )
    env = data.get("env") or {}
    phases = data.get("phases") or {}
    artifacts = data.get("artifacts")
    return Buildspec(
        path=path,
        shell=SHELLS.get(str(env.get("shell")), "/bin/sh"),
        variables={str(k): _scalar(v) for k, v in (env.get("variables") or {}).items()},
        parameter_store={str(k): str(v) for k, v in (env.get("parameter-store") or {}).items()},
        secrets_manager={str(k): str(v) for k, v in (env.get("secrets-manager") or {}).items()},
        exported_variables=_tuple(env.get("exported-variables")),
        phases=tuple(
            Phase(
                name=name,
                commands=_commands(document, name, "commands"),
                finally_=_commands(document, name, "finally"),
                on_failure=phases[name].get("on-failure"),
                retry=parse_retry(phases[name].get("on-failure")),
                line=document.line(["phases", name]),
            )
            for name in PHASES
            if name in phases and phases[name] is not None
        ),
        reports={
            str(k): _file_set(v, document.line(["reports", k]))
            for k, v in (data.get("reports") or {}).items()
        },
        artifacts=_file_set(artifacts, document.line(["artifacts"])) if artifacts else None,
        secondary_artifacts={
            str(k): _file_set(v, document.line(["artifacts", "secondary-artifacts", k]))
            for k, v in ((artifacts or {}).get("secondary-artifacts") or {}).items()
        },
        run_as="run-as" in data or any("run-as" in (p or {}) for p in phases.values()),
        batch="batch" in data,
    )


def _scalar(value: Any) -> str:
    """YAML scalars as CodeBuild passes them to the shell: literal text, booleans lower-case."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)
