"""`cluster render -f FILE`: a site's job settings as a values file (YAML, as helm's), the flags it
stands for written as groups (site, storage, secrets by reference, scheduling, router). Each key is a
flag's own name (KEYS); the file is checked against the shipped schema (values.schema.json, written
from KEYS and the flags' choices by `make schema`), then each value by its flag's own check, and
becomes that flag, before the command line's: a flag given on the command line wins over the file (a
map's key or a list's item is added to the file's). Every problem is one line naming the file, the
line and the fix.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

import jsonschema
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from epstack.aws.buildspec import Document
from epstack.errors import BadInput, shown
from epstack.inputs import read_text
from epstack.suggest import did_you_mean

SCHEMA_PATH = Path(__file__).with_name("values.schema.json")
MAX_BYTES = 1 << 20  # a site's values file is a page or two
MAX_DEPTH = 8
Kind = Literal["text", "count", "switch", "map", "list"]


@dataclass(frozen=True, kw_only=True)
class Key:
    """One key of the values file: where it sits, the flag it stands for, how its value is written."""

    group: str  # "" for the top level
    name: str
    flag: str
    kind: Kind = "text"

    @property
    def path(self) -> str:
        return f"{self.group}.{self.name}" if self.group else self.name


def _keys(group: str, *specs: tuple[str, str, Kind] | str) -> list[Key]:
    """Keys of a group: a bare name is a text key of the same-named flag."""
    keys = []
    for spec in specs:
        kind: Kind
        name, flag, kind = (spec, f"--{spec}", "text") if isinstance(spec, str) else spec
        keys.append(Key(group=group, name=name, flag=flag, kind=kind))
    return keys


# Every key, in the order the flags are written (the file's order does not matter).
KEYS: tuple[Key, ...] = (
    *_keys(
        "",
        "platform",
        "job",
        "engine",
        ("nodes", "--nodes", "count"),
        ("gpus-per-node", "--gpus-per-node", "count"),
        "profile",
        "a2a",
        "model-path",
        "model-revision",
        "name",
        "k8s-kind",
        "image",
        "manifest",
        "arch",
        "fabric",
        ("disaggregation", "--disaggregation", "switch"),
        "serve-smoke",
        ("replicas", "--replicas", "count"),
        ("startup-timeout", "--startup-timeout", "count"),
    ),
    *_keys(
        "site",
        "namespace",
        ("env", "--env", "map"),
        "env-file",
        "squashfs-dir",
        ("pod-monitor", "--pod-monitor", "switch"),
        ("pod-monitor-labels", "--pod-monitor-label", "map"),
        ("kustomization", "--kustomization", "switch"),
    ),
    *_keys(
        "storage",
        ("model", "--model-storage", "text"),
        "model-mount",
        ("cache", "--cache-storage", "text"),
        "cache-mount",
        ("results", "--results-storage", "text"),
        "results-mount",
        "storage-class",
    ),
    *_keys(
        "secrets",
        ("env", "--secret-env", "map"),
        ("env-from", "--secret-env-from", "list"),
        ("files", "--secret-file", "map"),
    ),
    *_keys(
        "scheduling",
        ("node-selector", "--node-selector", "map"),
        ("tolerations", "--toleration", "list"),
        "topology-key",
        "instance-type",
        ("cpus-per-gpu", "--cpus-per-gpu", "count"),
        "memory",
        "shm-size",
        "rdma-resource",
        ("fabric-devices", "--fabric-devices", "count"),
        ("host-network", "--host-network", "switch"),
        ("privileged", "--privileged", "switch"),
        ("annotations", "--annotation", "map"),
    ),
    *_keys("router", ("image", "--router-image", "text")),
)
GROUPS: dict[str, str] = {
    "site": "the site's own settings: namespace, environment, monitoring",
    "storage": "where the model, the JIT caches and the results live (host:/DIR, pvc:CLAIM, ephemeral:SIZE, "
    "shared:SIZE or none), and where the container sees them",
    "secrets": "secrets by reference only: a Kubernetes Secret's key, or a Slurm node's file; never a value",
    "scheduling": "where the pods go and what each asks for",
    "router": "SGLang's router in front of the serving groups",
}
# How a map key's entry is written as its flag's value (NAME=SECRET:KEY, KEY=VALUE, NAME=/PATH).
_PAIR = "{}={}"


@dataclass(frozen=True, kw_only=True)
class Flag:
    """What the command line knows of a flag: its check of a value (ValueError with the fix), its
    choices, its help (epstack.commands.cluster reads them from the parser)."""

    check: Callable[[str], object] | None = None
    choices: tuple[str, ...] = ()
    help: str = ""


def _value_schema(key: Key, flag: Flag) -> dict[str, Any]:
    text: dict[str, Any] = {"type": "string", "minLength": 1}
    if flag.choices:
        text = {"enum": list(flag.choices)}
    described = {"description": " ".join(flag.help.split()) + f" ({key.flag})"}
    if key.kind == "count":
        return {"type": "integer", "minimum": 1, **described}
    if key.kind == "switch":
        return {"type": "boolean", **described}
    if key.kind == "map":
        return {"type": "object", "additionalProperties": {"type": ["string", "number"]}, **described}
    if key.kind == "list":
        return {"type": "array", "items": {"type": "string", "minLength": 1}, **described}
    return {**text, **described}


def _closed(properties: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "additionalProperties": False,
        "properties": properties,
    }


def values_schema(flags: Mapping[str, Flag]) -> str:
    """The JSON schema of the values file, from KEYS and `flags` (cluster render's, by name): types,
    choices, help. `make schema` writes it; a test keeps the shipped one equal."""
    top = {key.name: _value_schema(key, flags[key.flag]) for key in KEYS if not key.group}
    for group, description in GROUPS.items():
        inside = {key.name: _value_schema(key, flags[key.flag]) for key in KEYS if key.group == group}
        top[group] = _closed(inside, description)
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "epstack cluster render values",
        **_closed(top, "a job's settings for `epstack cluster render -f FILE`; flags given too win"),
    }
    return json.dumps(schema, indent=2) + "\n"


@cache
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
    return loaded


def _error(document: Document, path: list[str | int], problem: str) -> BadInput:
    return BadInput(f"{document.path}:{document.line(path)}: {problem}")


def _load(path: Path) -> Document:
    text = read_text(path, what="a values file", limit=MAX_BYTES)
    yaml = YAML()  # round-trip: nodes keep their lines
    yaml.max_depth = MAX_DEPTH
    try:
        root = yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = (exc.problem or exc.context or "invalid YAML").strip()
        raise BadInput(f"{path}:{mark.line + 1 if mark else 1}: {problem}; fix: correct the YAML") from None
    except YAMLError as exc:
        raise BadInput(f"{path}:1: {str(exc).splitlines()[0]}; fix: correct the YAML") from None
    if root is None:
        root = CommentedMap()
    if not isinstance(root, CommentedMap):
        raise BadInput(f"{path}:1: a values file is a mapping; fix: start with e.g. 'platform: k8s'")
    return Document(path=path, root=root)  # the buildspec's: the same YAML, its lines kept


def _schema_error(document: Document, error: jsonschema.ValidationError) -> BadInput:
    where = list(error.absolute_path)
    dotted = ".".join(map(str, where)) or "the file"
    holder: Any = error.schema
    instance: Any = error.instance
    if error.validator == "additionalProperties":
        allowed = sorted(holder.get("properties", {}))
        key = next(k for k in instance if k not in allowed)
        hint = did_you_mean(key, allowed) or f"use one of {', '.join(allowed)}"
        inside = f" in {dotted}" if where else ""
        return _error(document, [*where, key], f"{shown(key)}: not a key{inside}; fix: {hint}")
    if error.validator == "enum":
        listed: Any = error.validator_value
        choices = [str(c) for c in listed]
        hint = did_you_mean(str(instance), choices) or f"one of {', '.join(choices)}"
        return _error(document, where, f"{dotted}: {shown(str(instance))} is not a choice; fix: {hint}")
    return _error(
        document,
        where,
        f"{dotted}: {error.message}; fix: see the schema (docs/guides/clusters.md#values-files)",
    )


def _entries(document: Document, values: dict[str, Any]) -> Iterator[tuple[Key, list[str | int], Any]]:
    for key in KEYS:
        holder = values.get(key.group, {}) if key.group else values
        if key.name in holder:
            yield key, [*([key.group] if key.group else []), key.name], holder[key.name]


def _flag_values(key: Key, value: Any) -> list[tuple[str | int, str]]:
    """(where under the key, the flag's value) for each time the flag is given."""
    if key.kind == "switch":
        return [("", "")] if value else []
    if key.kind == "map":
        return [(name, _PAIR.format(name, item)) for name, item in value.items()]
    if key.kind == "list":
        return [(index, str(item)) for index, item in enumerate(value)]
    return [("", str(value))]


def flags(path: Path, known: Mapping[str, Flag]) -> list[str]:
    """The flags `path` stands for, each value checked as its flag checks it; BadInput (file:line)."""
    document = _load(path)
    values = document.plain()
    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(values), key=lambda e: document.line(list(e.absolute_path)))
    if errors:
        raise _schema_error(document, errors[0])
    argv: list[str] = []
    for key, where, value in _entries(document, values):
        check = known[key.flag].check
        for part, text in _flag_values(key, value):
            at = [*where, part] if part != "" else where
            if check is not None and key.kind != "switch":
                try:
                    check(text)
                except ValueError as exc:
                    raise _error(document, at, f"{'.'.join(map(str, at))} ({key.flag}): {exc}") from None
            argv += [key.flag] if key.kind == "switch" else [key.flag, text]
    return argv
