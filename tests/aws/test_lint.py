"""The shipped buildspec schema and the project's lint rules, through `epstack codebuild lint`."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest
import yaml

from epstack.aws.batchspec import render_batchspec
from epstack.aws.buildspec import SCHEMA_PATH, load_buildspec, load_document, schema_findings
from epstack.aws.lint import lint as lint_files
from epstack.aws.lint import lint_or_raise
from epstack.commands.main import main
from epstack.errors import BadInput
from epstack.pins.model import Pins
from tests.conftest import PINS, REPO

SHIPPED = sorted((REPO / "buildspecs").glob("*.yml"))
Write = Callable[..., Path]


def lint(capsys: pytest.CaptureFixture[str], *files: Path) -> tuple[int, list[str]]:
    code = main(
        ["codebuild", "lint", "--pins", str(PINS), "--source", str(files[0].parent), *map(str, files)]
    )
    return code, [line for line in "".join(capsys.readouterr()).splitlines() if line.strip()]


def test_the_schema_is_a_valid_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA_PATH.read_text()))


def test_the_shipped_buildspecs_pass(capsys: pytest.CaptureFixture[str]) -> None:
    assert [p.name for p in SHIPPED] == ["batch.yml", "build.yml", "outdated.yml", "smoke.yml"]
    code = main(["codebuild", "lint", "--pins", str(PINS), *map(str, SHIPPED)])
    assert code == 0, capsys.readouterr().err
    assert "4 buildspecs ok" in capsys.readouterr().out


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
        f"fix: epstack codebuild batchspec --no-smoke|--smoke-fleet ARN > {path}",
    ) in messages
    assert any(
        line == 4 and "runs Docker (" in m and "docker.yml:5) without privileged mode" in m
        for line, m in messages
    )
    assert any(
        line == 14 and m.startswith("EPSTACK_TARGET=volta-efa is not a target") for line, m in messages
    )


def test_the_shipped_batch_is_the_rendering_of_pins_env(pins: Pins) -> None:
    assert (REPO / "buildspecs" / "batch.yml").read_text() == render_batchspec(pins, smoke_fleet=None)


FLEET = "arn:aws:codebuild:us-east-1:123456789012:fleet/hopper-smoke:0b6e3f2a-7c41-4d6e-9f0a-2b5c8d1e3f47"


def test_a_smoke_fleet_runs_each_smoke_there_and_lints(pins: Pins, tmp_path: Path) -> None:
    """CodeBuild's on-demand GPU types (A10G, T4) cannot run DeepEP V2: the smoke goes to a fleet."""
    path = tmp_path / "buildspecs" / "batch.yml"
    path.parent.mkdir()
    path.write_text(render_batchspec(pins, smoke_fleet=FLEET))
    text = path.read_text()
    assert text.count(f"fleet: {FLEET}") == len(pins.targets) and "LINUX_GPU_CONTAINER" not in text
    assert lint_files([path], pins, source=tmp_path, rules="aws") == []
    without = render_batchspec(pins, smoke_fleet=None)
    assert "smoke" not in without.split("version: 0.2")[1] and without.count("identifier: build_") == 8, (
        "4 targets, each engine's image"
    )


@pytest.mark.parametrize(
    "argv", [[], ["--smoke-fleet", "h100-fleet"], ["--no-smoke", "--smoke-fleet", FLEET]]
)
def test_batchspec_needs_one_answer_about_the_smoke(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["codebuild", "batchspec", "--pins", str(PINS), *argv]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "--smoke-fleet" in line


def test_the_batch_builds_each_targets_vllm_image_after_its_sglang_image(pins: Pins) -> None:
    """vLLM's build follows the default engine's (its base and deepep layers in the registry cache by
    then) and asks build.yml for the vllm image (EPSTACK_ENGINE, epstack build --engine)."""
    graph = yaml.safe_load(render_batchspec(pins, smoke_fleet=None))["batch"]["build-graph"]
    tasks = {task["identifier"]: task for task in graph}
    for target in pins.targets:
        name = target.replace("-", "_")
        vllm = tasks[f"build_{name}_vllm"]
        assert vllm["depend-on"] == [f"build_{name}"] and vllm["buildspec"] == "buildspecs/build.yml"
        assert vllm["env"]["variables"] == {"EPSTACK_TARGET": target, "EPSTACK_ENGINE": "vllm"}
        assert "EPSTACK_ENGINE" not in tasks[f"build_{name}"]["env"]["variables"], "build.yml's default"
    build = (REPO / "buildspecs" / "build.yml").read_text()
    assert "EPSTACK_ENGINE: sglang" in build and '--engine "$EPSTACK_ENGINE"' in build


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
        main(["codebuild", "run-local", str(path), "--pins", str(PINS), "--out-dir", str(tmp_path / "out")])
        == 2
    )
    assert "did you mean build?" in capsys.readouterr().err
    assert not marker.exists() and not (tmp_path / "out").exists()


SOURCE_FIX = (
    "fix: name a path inside the source directory, relative to it (no '..', no absolute path, "
    "no symlink that leads out)"
)


def test_artifacts_and_reports_paths_that_leave_the_source_are_findings_at_their_line(
    buildspec: Write, pins: Pins
) -> None:
    path = buildspec(
        """
        version: 0.2
        phases:
          build:
            commands: [make]
        artifacts:
          base-directory: ../out
          files: ['**/*']
          secondary-artifacts:
            logs:
              files:
                - ok.txt
                - ../../etc/passwd
        reports:
          unit:
            base-directory: out
            files: [ok.xml, ../x.xml]
          other:
            base-directory: /etc
            files: [x.xml]
        """
    )
    src = path.parent
    assert [(f.line, f.rules, f.message) for f in lint_files([path], pins, source=src)] == [
        (
            6,
            "aws",
            f"artifacts.base-directory: '../out' leads to {src.parent / 'out'}, outside the source "
            f"directory {src}; {SOURCE_FIX}",
        ),
        (
            12,
            "aws",
            "artifacts.secondary-artifacts.logs.files: '../../etc/passwd' leads to "
            f"{src.parent.parent / 'etc' / 'passwd'}, outside the source directory {src}; {SOURCE_FIX}",
        ),
        (
            16,
            "aws",
            f"reports.unit.files: '../x.xml' leads to {src / 'x.xml'}, outside base-directory out "
            f"{src / 'out'}; {SOURCE_FIX}",
        ),
        (
            18,
            "aws",
            f"reports.other.base-directory: '/etc' leads to /etc, outside the source directory {src}; "
            f"{SOURCE_FIX}",
        ),
    ]


def test_a_single_glob_and_paths_inside_the_source_pass(buildspec: Write, pins: Pins) -> None:
    path = buildspec(
        """
        version: 0.2
        phases:
          build:
            commands: [make]
        artifacts:
          files: '../*'
          secondary-artifacts:
            logs:
              base-directory: logs
              files: [build.log, 'sub/../*.txt']
        reports:
          unit:
            files: [reports/*.xml]
        """
    )
    src = path.parent
    assert [(f.line, f.message) for f in lint_files([path], pins, source=src)] == [
        (  # the glob is read though the schema wants a list
            6,
            f"artifacts.files: '../*' leads to {src.parent / '*'}, outside the source directory {src}; "
            f"{SOURCE_FIX}",
        ),
        (6, "artifacts.files: expected array, got str '../*'"),
    ]


def test_a_batch_task_buildspec_outside_the_source_is_a_finding_and_not_read(
    buildspec: Write, pins: Pins
) -> None:
    (buildspec("x", "unused.yml").parent.parent / "docker.yml").write_text(
        "version: 0.2\nphases:\n  build:\n    commands: [docker build .]\n"
    )
    path = buildspec(
        """
        version: 0.2
        batch:
          build-graph:
            - identifier: escapes
              buildspec: ../docker.yml
            - identifier: absolute
              buildspec: /etc/hosts
        """,
        "batch.yml",
    )
    src = path.parent
    assert [(f.line, f.message) for f in lint_files([path], pins, source=src)] == [
        (
            5,
            f"batch.build-graph.0.buildspec: '../docker.yml' leads to {src.parent / 'docker.yml'}, "
            f"outside the source directory {src}; {SOURCE_FIX}",
        ),
        (
            7,
            f"batch.build-graph.1.buildspec: '/etc/hosts' leads to /etc/hosts, outside the source "
            f"directory {src}; {SOURCE_FIX}",
        ),
    ]


def test_a_task_without_a_buildspec_runs_the_batch_s_own_and_needs_privileged_mode_for_docker(
    buildspec: Write, pins: Pins
) -> None:
    path = buildspec(
        """
        version: 0.2
        batch:
          build-list:
            - identifier: plain
            - identifier: privileged
              env:
                privileged-mode: true
            - identifier: named_no
              buildspec: quiet.yml
        phases:
          build:
            commands:
              - make
              - ./configure && epstack publish --target x
        """
    )
    buildspec(
        "version: 0.2\nphases:\n  build:\n    commands:\n      - dockerd-rootless --help\n", "quiet.yml"
    )
    assert [(f.line, f.message) for f in lint_files([path], pins, source=path.parent)] == [
        (
            4,
            f"task plain runs Docker ({path}:14) without privileged mode; fix: set env.privileged-mode: true",
        ),
    ]


SECRET = (
    "looks like a secret in plain text; fix: move it to env.secrets-manager (or env.parameter-store "
    "as a SecureString) and refer to the variable"
)


def test_secrets_in_batch_task_and_build_matrix_variables_are_found_at_their_line(
    buildspec: Write, pins: Pins
) -> None:
    path = buildspec(
        """
        version: 0.2
        batch:
          build-matrix:
            static:
              env:
                variables:
                  DB_PASSWORD: hunter2hunter2
            dynamic:
              env:
                variables:
                  SECRET_KEY:
                    - "$FROM_STORE"
                    - plain_value
                  REGION: [us-east-1]
        phases:
          build:
            commands:
              - make
        """
    )
    assert [(f.line, f.message) for f in lint_files([path], pins, source=path.parent)] == [
        (7, f"DB_PASSWORD {SECRET}"),
        (13, f"SECRET_KEY {SECRET}"),
    ]
    tasks = buildspec(
        """
        version: 0.2
        batch:
          build-list:
            - identifier: a
              env:
                variables:
                  REGION: us-east-1
            - identifier: b
              env:
                variables:
                  API_TOKEN: hunter2hunter2
        """,
        "tasks.yml",
    )
    assert [(f.line, f.message) for f in lint_files([tasks], pins, source=tasks.parent)] == [
        (11, f"API_TOKEN {SECRET}")
    ]


def test_a_secret_assigned_in_a_command_is_found_once(buildspec: Write, pins: Pins) -> None:
    path = buildspec(
        """
        version: 0.2
        env:
          variables:
            API_TOKEN: "$FROM_STORE"
        phases:
          build:
            commands:
              - make
              - export DB_PASSWORD=hunter2hunter2
            finally:
              - echo API_TOKEN
        """
    )
    assert [(f.line, f.message) for f in lint_files([path], pins, source=path.parent)] == [
        (
            9,
            "DB_PASSWORD looks like a secret in plain text; fix: move it to env.secrets-manager (or "
            "env.parameter-store as a SecureString) and refer to the variable",
        ),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("version: 0.2\nphases:\n  build:\n    commands: [make]\n", None),
        (
            "version: 0.2\nphases:\n  biuld:\n    commands: [make]\n",
            "{path}:3: [aws] phases.biuld: unknown key 'biuld'; did you mean build?",
        ),
        (
            "version: 0.2\nphases:\n  biuld:\n    commands: [make]\nartifacts:\n  name: x\n",
            "{path}:3: [aws] phases.biuld: unknown key 'biuld'; did you mean build? "
            "(and 1 more: epstack codebuild lint)",
        ),
    ],
)
def test_lint_or_raise_refuses_with_the_first_finding_and_a_count(
    buildspec: Write, pins: Pins, text: str, expected: str | None
) -> None:
    path = buildspec(text)
    if expected is None:
        lint_or_raise([path], pins, source=path.parent)
        return
    with pytest.raises(BadInput) as raised:
        lint_or_raise([path], pins, source=path.parent)
    assert str(raised.value) == expected.format(path=path)


def test_lint_or_raise_applies_epstack_s_rules_to_its_own_buildspecs_and_reads_pins_once(
    tmp_path: Path, pins: Pins
) -> None:
    (tmp_path / "buildspecs").mkdir()
    shutil.copy(PINS, tmp_path / "pins.env")
    paths = []
    for name in ("a.yml", "b.yml"):
        paths.append(tmp_path / "buildspecs" / name)
        paths[-1].write_text("version: 0.2\nphases:\n  build:\n    commands:\n      - . pins.env\n")
    calls = []

    def read() -> Pins:
        calls.append(1)
        return pins

    with pytest.raises(BadInput) as raised:
        lint_or_raise(paths, read, source=tmp_path)
    assert str(raised.value) == (
        f"{paths[0]}:5: [epstack] pins.env is data, never sourced or grepped; fix: use `epstack pins "
        "check --json -` or the epstack command that needs the pins (and 1 more: epstack codebuild lint)"
    )
    assert calls == [1]


def test_epstack_s_rules_name_the_pin_the_package_and_the_account_id_with_their_fix(
    buildspec: Write, pins: Pins
) -> None:
    path = buildspec(
        """
        version: 0.2
        env:
          variables:
            ARCH_LIST: "9.0"
            IMAGE: arn:aws:ecr:us-east-1:123456789012:repository/x
        phases:
          build:
            commands:
              - pip install sglang==0.5.0
              - uv pip install deep_ep==1.0 requests==2.0
            finally:
              - grep TORCH pins.env
        """
    )
    findings = lint_files([path], pins, source=path.parent, rules="epstack")
    assert [(f.line, f.rules, f.message) for f in findings] == [
        (4, "epstack", "ARCH_LIST is a pin; fix: pins come from pins.env: change it there, not here"),
        (
            5,
            "epstack",
            "an AWS account ID in the repository; fix: read it at build time (parameter-store, or the "
            "registry host in EPSTACK_REGISTRY) instead of writing it here",
        ),
        (
            9,
            "epstack",
            "sglang installed at a version written here; fix: pins come from pins.env (epstack render "
            "writes the requirement files)",
        ),
        (
            10,
            "epstack",
            "deep_ep installed at a version written here; fix: pins come from pins.env (epstack render "
            "writes the requirement files)",
        ),
        (
            12,
            "epstack",
            "pins.env is data, never sourced or grepped; fix: use `epstack pins check --json -` or the "
            "epstack command that needs the pins",
        ),
    ]


def test_a_batch_of_every_target_passes_and_a_wrong_or_missing_one_is_named(
    buildspec: Write, pins: Pins
) -> None:
    def batch(targets: list[str]) -> Path:
        tasks = "".join(
            f"    - identifier: t{i}\n      env:\n        variables:\n          EPSTACK_TARGET: {t}\n"
            for i, t in enumerate(targets)
        )
        return buildspec(f"version: 0.2\nbatch:\n  build-list:\n    - identifier: docs\n{tasks}")

    every = batch(list(pins.targets))
    assert lint_files([every], pins, source=every.parent, rules="epstack") == []
    wrong = batch([*pins.targets[:-1], "volta-efa"])
    assert [
        (f.line, f.rules, f.message) for f in lint_files([wrong], pins, source=wrong.parent, rules="epstack")
    ] == [
        (
            2,
            "epstack",
            f"the batch leaves out {pins.targets[-1]} of pins.env's targets; "
            f"fix: epstack codebuild batchspec --no-smoke|--smoke-fleet ARN > {wrong}",
        ),
        (
            4 + 4 * len(pins.targets),
            "epstack",
            f"EPSTACK_TARGET=volta-efa is not a target of pins.env; fix: one of {', '.join(pins.targets)} "
            "(epstack codebuild batchspec renders the batch from pins.env)",
        ),
    ]


def test_a_task_running_docker_is_named_by_its_index_without_an_identifier(
    buildspec: Write, pins: Pins
) -> None:
    path = buildspec(
        """
        version: 0.2
        batch:
          build-graph:
            - env:
                image: x
        phases:
          build:
            commands:
              - make
            finally:
              - docker
        """
    )
    assert [(f.line, f.message) for f in lint_files([path], pins, source=path.parent)] == [
        (4, "batch.build-graph.0: 'identifier' is a required property"),
        (4, f"task 0 runs Docker ({path}:11) without privileged mode; fix: set env.privileged-mode: true"),
    ]


def test_exporting_a_secrets_manager_variable_is_a_finding(buildspec: Write, pins: Pins) -> None:
    path = buildspec(
        """
        version: 0.2
        env:
          secrets-manager:
            HF_TOKEN: epstack/hf:token
          exported-variables: [HF_TOKEN]
        phases:
          build:
            commands: [make]
        """
    )
    assert [(f.line, f.message) for f in lint_files([path], pins, source=path.parent)] == [
        (5, "HF_TOKEN comes from a secret store and cannot be exported; fix: export a plain variable")
    ]


def test_a_variable_is_read_by_its_name_and_value_once_not_again_as_text(
    buildspec: Write, pins: Pins
) -> None:
    path = buildspec(
        """
        version: 0.2
        env:
          variables:
            AWS_ACCESS_KEY_ID: AKIAABCDEFGHIJKLMNOP
        phases:
          build:
            commands: [make]
        """
    )
    assert [(f.line, f.message.split(";")[0]) for f in lint_files([path], pins, source=path.parent)] == [
        (4, "AWS_ACCESS_KEY_ID holds an AWS access key ID in plain text")
    ]


def test_findings_of_several_files_are_all_kept_in_file_then_line_order(buildspec: Write, pins: Pins) -> None:
    b = buildspec("version: 0.2\nphases:\n  build:\n    commands: [make]\n  biuld: {}\n", "b.yml")
    a = buildspec("version: 0.3\nphases:\n  build:\n    commands: [make]\n", "a.yml")
    findings = lint_files([b, a], pins, source=b.parent)
    assert [(f.file.name, f.line) for f in findings] == [("a.yml", 1), ("b.yml", 5)]
