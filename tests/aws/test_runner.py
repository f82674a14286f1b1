"""run-local on small real buildspecs: one shell per build, phase transitions, finally, on-failure,
exported variables, reports and artifacts, secrets from moto's SSM and Secrets Manager."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import boto3
import pytest

from epstack.aws.buildspec import load_buildspec
from epstack.aws.runner import RunResult, run_local
from epstack.commands.main import main
from tests.conftest import PINS

Write = Callable[..., Path]


def run(path: Path, tmp_path: Path, **overrides: str) -> tuple[RunResult, str]:
    out = tmp_path / "out"
    result = run_local(
        load_buildspec(path),
        source=path.parent,
        out=out,
        overrides=overrides,
        secrets=None,
        echo=lambda line: None,
    )
    return result, (out / "build.log").read_text()


def statuses(result: RunResult) -> dict[str, str]:
    return {phase.name: phase.status for phase in result.phases}


def test_state_carries_between_commands_and_phases(buildspec: Write, tmp_path: Path) -> None:
    path = buildspec(
        """
        version: 0.2
        env:
          shell: bash
          variables:
            LITERAL: "$HOME/x"
          exported-variables: [IMAGE_URI, PLAIN]
        phases:
          install:
            commands:
              - mkdir -p sub && cd sub
              - PLAIN=not-exported; export IMAGE_URI=registry/epstack:tag
              - shout() { echo "SHOUT $1"; }
          build:
            commands:
              - echo "cwd=$(basename "$PWD") plain=$PLAIN literal=$LITERAL"
              - shout carried
        """
    )
    result, log = run(path, tmp_path)
    assert result.status == "SUCCEEDED"
    assert "cwd=sub plain=not-exported literal=$HOME/x" in log.splitlines()
    assert "SHOUT carried" in log.splitlines()
    assert result.exported_variables == {"IMAGE_URI": "registry/epstack:tag", "PLAIN": "not-exported"}


def test_a_build_failure_skips_the_rest_runs_finally_and_post_build(buildspec: Write, tmp_path: Path) -> None:
    path = buildspec(
        """
        version: 0.2
        phases:
          build:
            commands:
              - echo first
              - exit_status() { return 7; }; exit_status
              - echo skipped
            finally:
              - echo "finally succeeding=$CODEBUILD_BUILD_SUCCEEDING"
          post_build:
            commands:
              - echo "post succeeding=$CODEBUILD_BUILD_SUCCEEDING"
        """
    )
    result, log = run(path, tmp_path)
    assert result.status == "FAILED"
    assert statuses(result) == {"build": "FAILED", "post_build": "SUCCEEDED"}
    build = result.phase("build")
    assert (build.failed_line, build.exit_code) == (6, 7)
    lines = log.splitlines()
    assert "skipped" not in lines
    assert lines.index("first") < lines.index("finally succeeding=1") < lines.index("post succeeding=0")
    assert json.loads((tmp_path / "out" / "run.json").read_text())["status"] == "FAILED"


@pytest.mark.parametrize(
    ("failing", "on_failure", "expected"),
    [
        (
            "install",
            "",
            {"install": "FAILED", "pre_build": "SKIPPED", "build": "SKIPPED", "post_build": "SKIPPED"},
        ),
        (
            "pre_build",
            "",
            {"install": "SUCCEEDED", "pre_build": "FAILED", "build": "SKIPPED", "post_build": "SKIPPED"},
        ),
        (
            "install",
            "CONTINUE",
            {"install": "FAILED", "pre_build": "SUCCEEDED", "build": "SUCCEEDED", "post_build": "SUCCEEDED"},
        ),
        (
            "build",
            "ABORT",
            {"install": "SUCCEEDED", "pre_build": "SUCCEEDED", "build": "FAILED", "post_build": "SKIPPED"},
        ),
    ],
)
def test_phase_transitions(
    buildspec: Write, tmp_path: Path, failing: str, on_failure: str, expected: dict[str, str]
) -> None:
    phases = []
    for name in ("install", "pre_build", "build", "post_build"):
        command = "test 1 = 2" if name == failing else f"echo {name}"
        extra = f"\n    on-failure: {on_failure}" if name == failing and on_failure else ""
        phases.append(f"  {name}:{extra}\n    commands:\n      - {command}")
    path = buildspec("version: 0.2\nphases:\n" + "\n".join(phases) + "\n")
    result, _ = run(path, tmp_path)
    assert statuses(result) == expected and result.status == "FAILED"


def test_retry_runs_the_phase_again_until_it_passes(buildspec: Write, tmp_path: Path) -> None:
    path = buildspec(
        """
        version: 0.2
        phases:
          build:
            on-failure: RETRY-3-flaky
            commands:
              - n=$(( ${n:-0} + 1 )); echo "attempt $n"
              - if [ "$n" -lt 3 ]; then echo flaky; return 1; fi
        """
    )
    result, log = run(path, tmp_path)
    assert result.status == "SUCCEEDED" and result.phase("build").attempts == 3
    assert [line for line in log.splitlines() if line.startswith("attempt")] == [
        "attempt 1",
        "attempt 2",
        "attempt 3",
    ]


def test_retry_stops_when_the_output_does_not_match(buildspec: Write, tmp_path: Path) -> None:
    path = buildspec(
        "version: 0.2\nphases:\n  build:\n    on-failure: RETRY-5-timeout\n    commands: [test 1 = 2]\n"
    )
    result, _ = run(path, tmp_path)
    assert result.status == "FAILED" and result.phase("build").attempts == 1


def test_a_command_that_exits_the_shell_fails_and_the_build_carries_on(
    buildspec: Write, tmp_path: Path
) -> None:
    path = buildspec(
        """
        version: 0.2
        phases:
          build:
            commands:
              - export KEPT=yes; cd /tmp
              - exit 4
          post_build:
            commands:
              - echo "kept=$KEPT in $PWD"
        """
    )
    result, log = run(path, tmp_path)
    assert result.phase("build").exit_code == 4 and result.phase("post_build").status == "SUCCEEDED"
    assert "kept=yes in /tmp" in log.splitlines()


def test_overrides_win_and_stdin_is_not_the_shell(buildspec: Write, tmp_path: Path) -> None:
    path = buildspec(
        """
        version: 0.2
        env:
          variables:
            TARGET: from-buildspec
        phases:
          build:
            commands:
              - cat
              - echo "target=$TARGET src=$CODEBUILD_SRC_DIR"
        """
    )
    result, log = run(path, tmp_path, TARGET="from-override")
    assert result.status == "SUCCEEDED"
    assert f"target=from-override src={path.parent}" in log.splitlines()


def test_reports_and_artifacts_are_collected(buildspec: Write, tmp_path: Path) -> None:
    path = buildspec(
        """
        version: 0.2
        phases:
          build:
            commands:
              - mkdir -p out/logs
              - echo ok > out/manifest.json
              - echo log > out/logs/a.log
              - echo skip > out/logs/b.tmp
              - printf '<testsuites><testsuite><testcase name="a"/>' > out/junit.xml
              - printf '<testcase name="b"><failure/></testcase>' >> out/junit.xml
              - printf '<testcase name="c"><skipped/></testcase></testsuite></testsuites>' >> out/junit.xml
        reports:
          guard:
            files: [junit.xml]
            base-directory: out
        artifacts:
          files: ['**/*']
          base-directory: out
          exclude-paths: ['**/*.tmp', junit.xml]
          secondary-artifacts:
            flat:
              files: ['logs/*']
              base-directory: out
              discard-paths: yes
        """
    )
    result, _ = run(path, tmp_path)
    assert result.status == "SUCCEEDED"
    report = result.reports[0]
    assert (report.group, report.tests, report.failures, report.skipped, report.status) == (
        "guard",
        3,
        1,
        1,
        "FAILED",
    )
    assert result.artifacts == {"primary": ["logs/a.log", "manifest.json"], "flat": ["a.log", "b.tmp"]}
    assert (tmp_path / "out" / "artifacts" / "logs" / "a.log").read_text() == "log\n"
    assert (tmp_path / "out" / "artifacts" / "flat" / "a.log").is_file()


def test_no_matching_artifact_fails_the_build(buildspec: Write, tmp_path: Path) -> None:
    path = buildspec(
        "version: 0.2\nphases:\n  build:\n    commands: [echo]\nartifacts:\n  files: [missing.txt]\n"
    )
    result, _ = run(path, tmp_path)
    assert result.status == "FAILED" and "no matching artifact paths found" in result.upload_error


def test_the_cli_exits_with_the_build_status_and_names_the_failed_command(
    buildspec: Write, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = buildspec(
        "version: 0.2\nphases:\n  build:\n    commands:\n      - echo fine\n      - test 1 = 2\n"
    )
    args = ["codebuild", "run-local", str(path), "--pins", str(PINS), "--out-dir", str(tmp_path / "out")]
    assert main(args) == 1
    assert f"build: FAILED at {path}:6: test 1 = 2" in capsys.readouterr().out
    assert main([*args, "--env", "not-a-pair"]) == 2


@pytest.mark.aws
def test_parameter_store_and_secrets_manager_come_from_aws_and_are_masked(
    aws: str, buildspec: Write, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    boto3.client("ssm").put_parameter(Name="/epstack/registry", Value="registry.test", Type="String")
    boto3.client("ssm").put_parameter(Name="/epstack/token", Value="s3cr3t-param", Type="SecureString")
    boto3.client("secretsmanager").create_secret(
        Name="epstack/hf", SecretString=json.dumps({"token": "s3cr3t-json"})
    )
    path = buildspec(
        """
        version: 0.2
        env:
          parameter-store:
            EPSTACK_REGISTRY: /epstack/registry
            TOKEN: /epstack/token
          secrets-manager:
            HF_TOKEN: epstack/hf:token
        phases:
          build:
            commands:
              - echo "registry=$EPSTACK_REGISTRY token=$TOKEN hf=$HF_TOKEN"
              - test "$HF_TOKEN" = s3cr3t-json
        """
    )
    args = ["codebuild", "run-local", str(path), "--pins", str(PINS), "--out-dir", str(tmp_path / "out")]
    assert main(args) == 0, capsys.readouterr().err
    log = (tmp_path / "out" / "build.log").read_text()
    assert "registry=*** token=*** hf=***" in log.splitlines()
    assert "s3cr3t" not in log + capsys.readouterr().err
    assert main([*args, "--env", "EPSTACK_REGISTRY=override"]) == 0


def test_run_local_writes_only_where_epstack_may(
    buildspec: Write, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--out follows render's rules: a directory of the user's files is refused untouched, exit 2; its
    own output is replaced whole on the next run, and no staging directory is left beside it."""
    path = buildspec("version: 0.2\nphases:\n  build:\n    commands:\n      - echo fine\n")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    args = ["codebuild", "run-local", str(path), "--pins", str(PINS), "--out-dir"]
    assert main([*args, str(mine)]) == 2
    assert f"{mine} is a non-empty directory epstack did not make" in capsys.readouterr().err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    out = tmp_path / "out"
    assert main([*args, str(out)]) == 0
    (out / "build.log").unlink()  # what epstack wrote may go; an edit is refused (test_output_ownership)
    assert main([*args, str(out)]) == 0
    assert "echo fine" in (out / "build.log").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "out", "src"]
    # Allowed by the rules (a new path), but nothing can be made there: one line, not a traceback.
    assert main([*args, "/proc/epstack-run-local"]) == 2
    assert "/proc/epstack-run-local: cannot write there" in capsys.readouterr().err
