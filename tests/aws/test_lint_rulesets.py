"""`codebuild lint` on constructs public buildspecs use and CodeBuild documents, and its two rule sets.

Each buildspec here is written for the test, after constructs found in public repositories: a Go
agent's PR build with an empty post_build, a signing build exporting CODEBUILD_BUILD_ID, a 0.1
buildspec, batch builds on a reserved-capacity fleet. CodeBuild's behaviour on each is the AWS
CodeBuild User Guide's: build-spec-ref.html and batch-build-buildspec.html.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from epstack.aws.buildspec import load_buildspec
from epstack.aws.lint import lint, rules_for
from epstack.commands.main import main
from epstack.pins.model import Pins
from tests.conftest import PINS

Write = Callable[..., Path]

GO_AGENT_PR_BUILD = """
version: 0.2
env:
  variables:
    GOPATH: /go
    AGENT_PACKAGE: github.com/example/container-agent
phases:
  install:
    runtime-versions:
      golang: 1.x
    commands:
      - mkdir -p "$GOPATH/src/github.com/example"
      - ln -s "$CODEBUILD_SRC_DIR" "$GOPATH/src/$AGENT_PACKAGE"
  build:
    commands:
      - cd "$GOPATH/src/$AGENT_PACKAGE" && make test
  post_build:
    commands:
"""

SIGNING_BUILD = """
version: 0.2
env:
  exported-variables:
    - CODEBUILD_BUILD_ID
    - SIGNED_ARTIFACT
phases:
  build:
    commands:
      - export SIGNED_ARTIFACT="agent-$CODEBUILD_RESOLVED_SOURCE_VERSION.tar.sig"
      - echo "signed in $CODEBUILD_BUILD_ID"
"""


def cli_lint(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    code = main(["codebuild", "lint", "--pins", str(PINS), *args])
    return code, [line for line in "".join(capsys.readouterr()).splitlines() if line.strip()]


def test_an_empty_commands_in_a_phase_is_accepted_and_runs_nothing(
    buildspec: Write, capsys: pytest.CaptureFixture[str]
) -> None:
    path = buildspec(GO_AGENT_PR_BUILD)
    code, lines = cli_lint(capsys, str(path))
    assert code == 0, lines
    post_build = [phase for phase in load_buildspec(path).phases if phase.name == "post_build"]
    assert [(p.commands, p.line) for p in post_build] == [((), 16)]


def test_a_phase_without_commands_at_all_is_still_refused(buildspec: Write, pins: Pins) -> None:
    path = buildspec("version: 0.2\nphases:\n  post_build:\n    finally:\n      - echo done\n")
    assert [(f.line, f.message) for f in lint([path], pins, source=path.parent)] == [
        (3, "phases.post_build: 'commands' is a required property")
    ]


def test_exporting_codebuild_variables_is_allowed_and_aws_ones_or_secrets_are_not(
    buildspec: Write, pins: Pins
) -> None:
    assert lint([buildspec(SIGNING_BUILD)], pins, source=buildspec(SIGNING_BUILD).parent) == []
    path = buildspec(
        """
        version: 0.2
        env:
          parameter-store:
            SIGNING_KEY: /signing/key
          exported-variables:
            - CODEBUILD_BUILD_ID
            - AWS_REGION
            - SIGNING_KEY
        phases:
          build:
            commands:
              - sign --key-env SIGNING_KEY agent.tar
        """
    )
    findings = [(f.line, f.rules, f.message.split(";")[0]) for f in lint([path], pins, source=path.parent)]
    assert findings == [
        (7, "aws", "env.exported-variables.1: 'AWS_REGION' not allowed"),
        (8, "aws", "SIGNING_KEY comes from a secret store and cannot be exported"),
    ]


def test_version_0_1_is_linted_and_run_local_names_its_shell_semantics(
    buildspec: Write, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = buildspec("version: 0.1\nphases:\n  build:\n    commands:\n      - cd src && make\n")
    code, lines = cli_lint(capsys, str(path))
    assert code == 0, lines
    out = tmp_path / "out"
    assert main(["codebuild", "run-local", str(path), "--pins", str(PINS), "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:1: run-local runs buildspec 0.2 (one shell for the whole build)" in err
    assert "0.1 runs each command in its own shell; fix: write version: 0.2" in err
    assert not out.exists()


def test_batch_tasks_on_a_fleet_are_accepted(buildspec: Write, pins: Pins) -> None:
    path = buildspec(
        """
        version: 0.2
        batch:
          fast-fail: false
          build-graph:
            - identifier: unit_linux
              env:
                fleet: reserved-arm-fleet
            - identifier: integ_linux
              depend-on: [unit_linux]
              env:
                compute-type: BUILD_GENERAL1_LARGE
                privileged-mode: true
        phases:
          build:
            commands:
              - make test
        """
    )
    assert lint([path], pins, source=path.parent) == []
    matrix = buildspec(
        """
        version: 0.2
        batch:
          build-matrix:
            static:
              env:
                fleet: reserved-x86-fleet
            dynamic:
              env:
                fleet: [reserved-x86-fleet, reserved-arm-fleet]
                variables:
                  GO_VERSION: ["1.21", "1.22"]
        phases:
          build:
            commands:
              - make test
        """,
        "matrix.yml",
    )
    assert lint([matrix], pins, source=matrix.parent) == []


def test_a_task_naming_both_a_compute_type_and_a_fleet_is_refused(buildspec: Write, pins: Pins) -> None:
    path = buildspec(
        """
        version: 0.2
        batch:
          build-list:
            - identifier: both
              env:
                compute-type: BUILD_GENERAL1_SMALL
                fleet: reserved-fleet
        phases:
          build:
            commands: [make]
        """
    )
    [finding] = lint([path], pins, source=path.parent)
    assert finding.line == 5 and finding.message.startswith("batch.build-list.0.env: these keys together not")
    assert finding.message.endswith("fix: compute-type or fleet, not both (a fleet brings its own compute)")


@pytest.mark.parametrize("kind", ["build-list", "build-graph"])
def test_a_batch_task_without_identifier_is_refused(buildspec: Write, pins: Pins, kind: str) -> None:
    path = buildspec(
        f"""
        version: 0.2
        batch:
          {kind}:
            - identifier: linux_small
              env:
                compute-type: BUILD_GENERAL1_SMALL
            - env:
                compute-type: BUILD_GENERAL1_MEDIUM
        phases:
          build:
            commands: [make]
        """
    )
    assert [(f.line, f.message) for f in lint([path], pins, source=path.parent)] == [
        (7, f"batch.{kind}.1: 'identifier' is a required property")
    ]


ECR_PUSH = """
version: 0.2
env:
  variables:
    REPOSITORY_URI: 123456789012.dkr.ecr.us-west-2.amazonaws.com/agent
    NCCL_VERSION: 2.30.7
phases:
  pre_build:
    commands:
      - . ./pins.env
  build:
    commands:
      - docker build -t "$REPOSITORY_URI:latest" .
"""


def test_project_rules_are_epstack_s_and_aws_rules_alone_pass_another_project_s_file(
    buildspec: Write, capsys: pytest.CaptureFixture[str]
) -> None:
    path = buildspec(ECR_PUSH)
    code, lines = cli_lint(capsys, str(path))
    assert code == 0, lines
    assert lines[-1].endswith(f"({path} [aws])")
    code, lines = cli_lint(capsys, "--rules", "epstack", str(path))
    assert code == 1
    assert [line.split(";")[0].removeprefix(f"{path}:") for line in lines[:-1]] == [
        "4: [epstack] an AWS account ID in the repository",
        "5: [epstack] NCCL_VERSION is a pin",
        "9: [epstack] pins.env is data, never sourced or grepped",
    ]


def test_epstack_s_own_buildspecs_get_its_rules_by_default_and_another_repo_s_do_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ours, theirs = tmp_path / "epstack", tmp_path / "agent"
    for root in (ours, theirs):
        (root / "buildspecs").mkdir(parents=True)
        (root / "buildspecs" / "push.yml").write_text(ECR_PUSH.lstrip())
    shutil.copy(PINS, ours / "pins.env")
    assert (rules_for(ours / "buildspecs" / "push.yml", ours), rules_for(ours / "push.yml", ours)) == (
        "epstack",
        "aws",
    )
    assert rules_for(theirs / "buildspecs" / "push.yml", theirs) == "aws"
    code, lines = cli_lint(capsys, "--source", str(theirs), str(theirs / "buildspecs" / "push.yml"))
    assert code == 0, lines
    code, lines = cli_lint(capsys, "--source", str(ours), str(ours / "buildspecs" / "push.yml"))
    assert code == 1 and len(lines) == 4 and all(": [epstack] " in line for line in lines[:3]), lines
    code, lines = cli_lint(
        capsys, "--source", str(ours), "--rules", "aws", str(ours / "buildspecs" / "push.yml")
    )
    assert code == 0, lines


def test_aws_rules_never_read_pins_and_epstack_rules_need_them(
    buildspec: Write, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = buildspec(SIGNING_BUILD)
    missing = tmp_path / "no-pins.env"
    assert main(["codebuild", "lint", "--pins", str(missing), str(path)]) == 0
    capsys.readouterr()
    assert main(["codebuild", "lint", "--pins", str(missing), "--rules", "epstack", str(path)]) == 2
    assert str(missing) in capsys.readouterr().err
