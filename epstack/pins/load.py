"""load_pins() is the only way in: parse pins.env (pins.file), validate every value (the Pins model),
then check the rules between values (pins.rules). Every failure is one BadInput line naming file, line
and fix. Layer pins files (what render puts in each image) are read here with the same value rules.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, cast

from pydantic import TypeAdapter, ValidationError

from epstack.credentials import credential
from epstack.pins import values as v
from epstack.pins.file import PinsFile, Problem, parse_pins_file
from epstack.pins.model import Pins
from epstack.pins.rules import RULES
from epstack.stack import arch_problem
from epstack.suggest import did_you_mean


def load_pins(path: Path) -> Pins:
    """Parse, validate and rule-check a pins file. BadInput lists every problem, each with
    file:line and fix; the rules between pins run once every value is valid."""
    pins_file, problems = _screened(path)
    known = known_keys()
    for problem in pins_file.problems:  # a bad line's key may be misspelt too
        if problem.key and problem.key not in known and not problem.key.startswith("ARCH_"):
            hint = did_you_mean(problem.key, known) or "remove it (see docs/reference/pins.md#keys)"
            problems.append(
                Problem(line=problem.line, key=problem.key, text=f"unknown key {problem.key}; fix: {hint}")
            )
    raw, arch_problems = _raw_values(pins_file)
    problems += arch_problems
    try:
        pins = Pins.model_validate(raw)
    except ValidationError as exc:
        skip = {p.key for p in problems if p.key}
        problems += [p for p in _value_problems(pins_file, exc) if p.key not in skip]
        raise pins_file.report(problems) from None
    if problems:
        raise pins_file.report(problems)
    problems = [problem for rule in RULES for problem in rule(pins, pins_file)]
    if problems:
        raise pins_file.report(problems)
    return pins


# Every pin is written into the image labels and layer pins files: none may hold a credential.
CREDENTIAL_FIX = (
    "remove it: give git the credential through a credential helper (git config credential.helper) "
    "or the build a BuildKit secret (docker build --secret), which no image keeps"
)


def _screened(path: Path) -> tuple[PinsFile, list[Problem]]:
    """The pins file without its entries that hold a credential, and its problems: the malformed lines
    and one per credential, naming its kind. No problem repeats a credential and no value rule sees one
    (its message would quote the value)."""
    pins_file = parse_pins_file(path)
    problems = [
        _credential(problem.line, problem.key, kind) if (kind := credential(problem.text)) else problem
        for problem in pins_file.problems
    ]
    secrets = {key: kind for key, entry in pins_file.entries.items() if (kind := credential(entry.value))}
    problems += [_credential(pins_file.line_of(key), key, kind) for key, kind in secrets.items()]
    kept = {key: entry for key, entry in pins_file.entries.items() if key not in secrets}
    return replace(pins_file, entries=kept), problems


def _credential(line: int, key: str, kind: str) -> Problem:
    return Problem(line=line, key=key, text=f"{key or 'this line'} holds {kind}; fix: {CREDENTIAL_FIX}")


def _raw_values(pins_file: PinsFile) -> tuple[dict[str, Any], list[Problem]]:
    """The entries as the model takes them: ARCH_<NAME> keys gathered into archs."""
    raw: dict[str, Any] = {k: e.value for k, e in pins_file.entries.items() if not k.startswith("ARCH_")}
    archs: dict[str, tuple[str, ...]] = {}
    problems = []
    for key, entry in pins_file.entries.items():
        if key.startswith("ARCH_"):
            try:
                archs[v.arch_name(key)] = v.arch_list(entry.value)
            except ValueError as exc:
                message, _, fix = str(exc).partition("; fix: ")
                problems.append(pins_file.problem(key, f"{key}: {message}", fix))
    raw["archs"] = archs
    return raw, problems


def known_keys() -> list[str]:
    """Every pins.env key (ARCH_<NAME> by its two shipped examples)."""
    return [f.alias for f in Pins.model_fields.values() if f.alias] + ["ARCH_HOPPER", "ARCH_BLACKWELL"]


def _value_problems(pins_file: PinsFile, exc: ValidationError) -> Iterator[Problem]:
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        if error["type"] == "extra_forbidden":
            hint = did_you_mean(field, known_keys()) or "remove it (see docs/reference/pins.md#keys)"
            yield pins_file.problem(field, f"unknown key {field}", hint)
            continue
        alias = Pins.model_fields[field].alias if field in Pins.model_fields else field
        if error["type"] == "missing":
            yield Problem(
                line=0,
                key=alias or "",
                text=f"missing key {alias}; fix: add a line {alias}=<value> "
                "(see docs/reference/pins.md#keys)",
            )
            continue
        message, _, fix = str(error.get("ctx", {}).get("error", error["msg"])).partition("; fix: ")
        yield pins_file.problem(alias, f"{alias}: {message}", fix or f"correct {alias}")


# ---- layer pins files: what render puts in each image, validated with the same value rules ----

# Keys a layer pins file holds besides the pins.env keys: what the target decides.
LAYER_FILE_VALIDATORS: dict[str, Callable[[str], object]] = {
    "FABRIC": v.fabric_name,
    "TORCH_CUDA_ARCH_LIST": lambda text: v.arch_list(text.replace(" ", ",")),
}


def read_layer_pins(path: Path) -> dict[str, str]:
    """A layer pins file (targets/<target>/<layer>.pins.env): every key known, every value valid by the
    rule pins.env's value has, every arch buildable by its CUDA_VERSION. BadInput lists all problems."""
    pins_file, problems = _screened(path)
    fields = {f.alias: f for f in Pins.model_fields.values() if f.alias}
    known = [*fields, *LAYER_FILE_VALIDATORS]
    for key, entry in pins_file.entries.items():
        if key in LAYER_FILE_VALIDATORS:
            check: Callable[[str], object] = LAYER_FILE_VALIDATORS[key]
        elif key in fields:
            field = fields[key]
            check = TypeAdapter(cast(Any, Annotated)[(field.annotation, *field.metadata)]).validate_python
        else:
            hint = did_you_mean(key, known) or "remove it; render writes only known keys"
            problems.append(pins_file.problem(key, f"unknown key {key}", hint))
            continue
        try:
            check(entry.value)
        except (ValueError, ValidationError) as exc:
            text = (
                exc.errors()[0]["msg"].removeprefix("Value error, ")
                if isinstance(exc, ValidationError)
                else str(exc)
            )
            message, _, fix = text.partition("; fix: ")
            problems.append(pins_file.problem(key, f"{key}: {message}", fix or f"correct {key}"))
    values = {key: entry.value for key, entry in pins_file.entries.items()}
    if not problems and "CUDA_VERSION" in values and "TORCH_CUDA_ARCH_LIST" in values:
        for arch in values["TORCH_CUDA_ARCH_LIST"].split():
            problem = arch_problem(arch, values["CUDA_VERSION"])
            if problem:
                problems.append(
                    pins_file.problem(
                        "TORCH_CUDA_ARCH_LIST",
                        problem,
                        f"build for the archs CUDA {values['CUDA_VERSION']} has",
                    )
                )
    if problems:
        raise pins_file.report(problems)
    return values


def pin_values(path: Path) -> dict[str, str]:
    """The validated values, by key, of pins.env (every rule) or of a layer pins file (the value rules)."""
    if "DEFAULT_TARGET" in parse_pins_file(path).entries:
        return load_pins(path).as_env()
    return read_layer_pins(path)


SCHEMA_PATH = Path(__file__).with_name("schema.json")


def pins_json_schema() -> str:
    """JSON schema of `epstack pins check --json -` output; committed as epstack/pins.schema.json."""
    schema = Pins.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "epstack pins (pins.env, as `epstack pins check --json -` prints it)"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
