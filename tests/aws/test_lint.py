"""The shipped buildspec schema and the project's lint rules, through `epstack codebuild lint`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest

from epstack.aws.batchspec import render_batchspec
from epstack.aws.buildspec import SCHEMA_PATH, load_buildspec, load_document, schema_findings
from epstack.aws.lint import lint as lint_files
from epstack.cli import main
from epstack.errors import BadInput
from epstack.pins.model import Pins
from tests.conftest import PINS, REPO

SHIPPED = sorted((REPO / "buildspecs").glob("*.yml"))
Write = Callable[..., Path]


def lint(capsys: pytest.CaptureFixture[str], *files: Path) -> tuple[int, list[str]]:
    code = main(
        ["codebuild", "lint", "--pins", str(PINS), "--source", str(files[0].parent), *map(str, files)]
    )
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_the_schema_is_a_valid_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA_PATH.read_text()))


def test_the_shipped_buildspecs_pass(capsys: pytest.CaptureFixture[str]) -> None:
    assert [p.name for p in SHIPPED] == ["batch.yml", "build.yml", "outdated.yml", "smoke.yml"]
    code = main(["codebuild", "lint", "--pins", str(PINS), *map(str, SHIPPED)])
    assert code == 0, capsys.readouterr().err
    assert "4 buildspecs ok" in capsys.readouterr().err


def test_a_bad_phase_name_names_its_line_and_the_near_miss(
    buildspec: Write, capsys: pytest.CaptureFixture[str]
) -> None:
    path = buildspec(
        """
        version: 0.2
        phases:
          install:
            commands:
              - echo hi
          biuld:
            commands:
              - make
        """
    )
    code, lines = lint(capsys, path)
    assert code == 1
    assert lines[0] == f"{path}:6: [aws] phases.biuld: unknown key 'biuld'; did you mean build?"


def test_a_plaintext_secret_names_its_line_and_the_fix(
    buildspec: Write, capsys: pytest.CaptureFixture[str]
) -> None:
    path = buildspec(
        """
        version: 0.2
        env:
          variables:
            REGION: us-east-1
            HF_TOKEN: hf_abcdefghijklmnop
        phases:
          build:
            commands:
              - docker login -u bot -p hunter2 registry.example
              - echo AKIAABCDEFGHIJKLMNOP
        """
    )
    code, lines = lint(capsys, path)
    assert code == 1
    assert lines[:3] == [
        f"{path}:5: [aws] HF_TOKEN looks like a secret in plain text; fix: move it to env.secrets-manager "
        "(or env.parameter-store as a SecureString) and refer to the variable",
        f"{path}:9: [aws] a password on a command line in plain text; fix: move it to env.secrets-manager "
        "(or env.parameter-store as a SecureString) and refer to the variable",
        f"{path}:10: [aws] an AWS access key ID in plain text; fix: move it to env.secrets-manager "
        "(or env.parameter-store as a SecureString) and refer to the variable",
    ]


def test_secrets_from_the_stores_and_variables_in_commands_pass(buildspec: Write, pins: Pins) -> None:
    path = buildspec(
        """
        version: 0.2
        env:
          variables:
            TOKEN_FILE: ""
          parameter-store:
            REGISTRY_TOKEN: /epstack/token
          secrets-manager:
            HF_TOKEN: epstack/hf:token
        phases:
          build:
            commands:
              - mkdir -p out
              - echo "$REGISTRY_TOKEN" | docker login -u bot --password-stdin example.org
              - docker login -u bot -p "$HF_TOKEN" example.org
        """
    )
    assert lint_files([path], pins, source=path.parent) == []


@pytest.mark.parametrize(
    ("yaml", "line", "message"),
    [
        (
            "version: 0.3\nphases:\n  build:\n    commands: [make]\n",
            1,
            "version: 0.3 is not one of 0.1, '0.1', 0.2, '0.2'",
        ),
        (
            "version: 0.2\nphases:\n  build:\n    commands: [make]\n    on-failure: STOP\n",
            5,
            "on-failure: 'STOP'",
        ),
        ("version: 0.2\nphases:\n  build:\n    finally: [make]\n", 3, "'commands' is a required property"),
        (
            "version: 0.2\nphases:\n  install:\n    runtime-versions: {}\n    commands: [make]\n",
            4,
            "runtime-versions",
        ),
        (
            "version: 0.2\nphases:\n  build:\n    runtime-versions: {python: 3.12}\n    commands: [make]\n",
            4,
            "unknown key 'runtime-versions'",
        ),
        (
            "version: 0.2\nenv:\n  variables:\n    CODEBUILD_X: y\nphases:\n  build:\n    commands: [make]\n",
            4,
            "env.variables.CODEBUILD_X: ",
        ),
        (
            "version: 0.2\nenv:\n  exported-variables: [AWS_X]\nphases:\n  build:\n    commands: [make]\n",
            3,
            "cannot be exported",
        ),
        (
            "version: 0.2\nphases:\n  build:\n    commands: [make]\nreports:\n  r:\n    files: [a.xml]\n"
            "    file-format: junitxml\n",
            0,
            "",
        ),
        (
            "version: 0.2\nphases:\n  build:\n    commands: [make]\nreports:\n  r:\n    files: [a.xml]\n"
            "    file-format: XUNIT\n",
            8,
            "file-format",
        ),
        (
            "version: 0.2\nphases:\n  build:\n    commands: [make]\nartifacts:\n  base-directory: out\n",
            5,
            "'files' is a required property",
        ),
        (
            "version: 0.2\nbatch:\n  build-list: [{}]\n  build-graph: [{identifier: a}]\n",
            2,
            "batch: needs exactly one of build-list, build-graph",
        ),
        ("version: 0.2\nphases:\n  build:\n    commands:\n      - echo a: b\n", 5, "quote the command"),
    ],
)
def test_schema_errors_name_their_line(buildspec: Write, yaml: str, line: int, message: str) -> None:
    findings = schema_findings(load_document(buildspec(yaml)))
    if not message:
        assert findings == []
        return
    assert findings, yaml
    assert findings[0].line == line and message in findings[0].message, findings


def test_account_ids_and_pins_in_a_buildspec_are_findings(buildspec: Write, pins: Pins) -> None:
    path = buildspec(
        """
        version: 0.2
        env:
          variables:
            NCCL_VERSION: 2.30.7
            REGISTRY: 123456789012.dkr.ecr.us-east-1.amazonaws.com
        phases:
          build:
            commands:
              - . ./pins.env
              - pip install torch==2.14.1
        """
    )
    findings = lint_files([path], pins, source=path.parent, rules="epstack")
    messages = [(f.line, f.message.split(";")[0]) for f in findings]
    assert messages == [
        (4, "NCCL_VERSION is a pin"),
        (5, "an AWS account ID in the repository"),
        (9, "pins.env is data, never sourced or grepped"),
        (10, "torch installed at a version written here"),
    ]


def test_a_batch_must_build_every_target_and_run_docker_privileged(buildspec: Write, pins: Pins) -> None:
    buildspec("version: 0.2\nphases:\n  build:\n    commands:\n      - docker build .\n", "docker.yml")
    path = buildspec(
        f"""
        version: 0.2
        batch:
          build-graph:
            - identifier: build_one
              buildspec: docker.yml
              env:
                variables:
                  EPSTACK_TARGET: {pins.targets[0]}
            - identifier: build_nowhere
              buildspec: docker.yml
              env:
                privileged-mode: true
                variables:
                  EPSTACK_TARGET: volta-efa
        """,
        "batch.yml",
    )
    messages = [(f.line, f.message) for f in lint_files([path], pins, source=path.parent, rules="epstack")]
    assert (
        2,
        f"the batch leaves out {', '.join(pins.targets[1:])} of pins.env's targets; "
        f"fix: epstack codebuild batchspec > {path}",
    ) in messages
    assert any(
        line == 4 and "runs Docker (" in m and "docker.yml:5) without privileged mode" in m
        for line, m in messages
    )
    assert any(
        line == 14 and m.startswith("EPSTACK_TARGET=volta-efa is not a target") for line, m in messages
    )


def test_the_shipped_batch_is_the_rendering_of_pins_env(pins: Pins) -> None:
    assert (REPO / "buildspecs" / "batch.yml").read_text() == render_batchspec(pins)


def test_a_yaml_error_is_bad_input_with_its_line(
    buildspec: Write, capsys: pytest.CaptureFixture[str]
) -> None:
    path = buildspec('version: 0.2\nphases:\n  build:\n    commands:\n      - "echo" done\n')
    with pytest.raises(BadInput, match=rf"^{path}:5: expected <block end>, but found '<scalar>'; fix: "):
        load_buildspec(path)
    assert main(["codebuild", "run-local", str(path), "--pins", str(PINS)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:5:" in err and "Traceback" not in err


def test_run_local_refuses_a_buildspec_with_findings_and_runs_nothing(
    buildspec: Write, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"
    path = buildspec(
        f"version: 0.2\nphases:\n  build:\n    commands:\n      - touch {marker}\n  biuld: {{}}\n"
    )
    assert (
        main(["codebuild", "run-local", str(path), "--pins", str(PINS), "--out", str(tmp_path / "out")]) == 2
    )
    assert "did you mean build?" in capsys.readouterr().err
    assert not marker.exists() and not (tmp_path / "out").exists()
