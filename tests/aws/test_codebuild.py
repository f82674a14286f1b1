"""`epstack codebuild start`: against moto's server over HTTP where moto can (projects, builds,
CloudWatch logs), through botocore's Stubber where it cannot (FAILED builds, throttling, batches).

Where moto differs from AWS (and what these tests do about it):
- a build is SUCCEEDED at its first BatchGetBuilds and never fails: FAILED runs through Stubber;
- every BatchGetBuilds appends all nine phases again: the watcher prints each phase once;
- builds carry no logs.groupName/streamName: the watcher uses CodeBuild's defaults
  (/aws/codebuild/<project>, the build id after the colon), and the tests write the log there;
- StartBuild ignores environmentVariablesOverride and idempotencyToken, and StartBuildBatch does
  not exist: what epstack sends is checked through Stubber's expected parameters.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.exceptions import ReadTimeoutError
from botocore.stub import ANY, Stubber

from epstack.aws import codebuild
from epstack.aws.clients import Backoff
from epstack.aws.codebuild import BATCH_BUILDSPEC, LogCursor, StartRequest
from epstack.commands import aws as aws_cli
from epstack.commands.main import main
from epstack.errors import EnvironmentProblem
from tests.conftest import PINS, REPO

if TYPE_CHECKING:
    from mypy_boto3_logs.type_defs import InputLogEventTypeDef

PROJECT = "epstack-cb-images"
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def head() -> str:
    git = ["git", "-C", str(REPO), "rev-parse", "HEAD"]
    return subprocess.run(git, capture_output=True, text=True, check=True).stdout.strip()


def create_project(privileged: bool = True) -> None:
    boto3.client("codebuild").create_project(
        name=PROJECT,
        source={
            "type": "GITHUB",
            "location": "https://github.com/example/epstack.git",
            "buildspec": "buildspecs/build.yml",
        },
        artifacts={"type": "NO_ARTIFACTS"},
        environment={
            "type": "LINUX_CONTAINER",
            "image": "aws/codebuild/standard:7.0",
            "computeType": "BUILD_GENERAL1_2XLARGE",
            "privilegedMode": privileged,
        },
        serviceRole="arn:aws:iam::123456789012:role/epstack-cb",
    )


def put_log(stream: str, *messages: str) -> None:
    logs = boto3.client("logs")
    group = f"/aws/codebuild/{PROJECT}"
    if not logs.describe_log_groups(logGroupNamePrefix=group)["logGroups"]:
        logs.create_log_group(logGroupName=group)
    if not logs.describe_log_streams(logGroupName=group, logStreamNamePrefix=stream)["logStreams"]:
        logs.create_log_stream(logGroupName=group, logStreamName=stream)
    base = int(datetime.now(UTC).timestamp() * 1000)
    events: list[InputLogEventTypeDef] = [
        {"timestamp": base + i, "message": m} for i, m in enumerate(messages)
    ]
    logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events)


@pytest.mark.aws
def test_start_watch_prints_each_phase_once_and_every_log_line_once(
    aws: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """CodeBuild writes its log while epstack waits between reads: three batches of lines."""
    create_project()
    batches = iter(
        [["[Container] Entering phase INSTALL", "make .venv/bin/epstack"], ["epstack build", "built"], []]
    )

    def codebuild_writes_while_we_wait(seconds: float) -> None:
        build_id = boto3.client("codebuild").list_builds_for_project(projectName=PROJECT)["ids"][0]
        lines = next(batches, [])
        if lines:
            put_log(build_id.split(":", 1)[1], *lines)

    monkeypatch.setattr(codebuild, "pause", codebuild_writes_while_we_wait)
    code = main(
        ["codebuild", "start", "--project", PROJECT, "--target", "hopper-ib", "--watch", "--pins", str(PINS)]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = [*out.splitlines(), *err.splitlines()]  # what started, then how it went
    assert lines[0].startswith(f"started {PROJECT}:") and f"source {head()[:12]}" in lines[0]
    phases = [line for line in lines if line.startswith("phase ")]
    assert [p.split()[1] for p in phases] == [
        "SUBMITTED",
        "QUEUED",
        "PROVISIONING",
        "DOWNLOAD_SOURCE",
        "INSTALL",
        "PRE_BUILD",
        "BUILD",
        "POST_BUILD",
        "UPLOAD_ARTIFACTS",
        "FINALIZING",
        "COMPLETED",
    ]
    logged = [line for line in lines if not line.startswith(("phase ", "started ", "build "))]
    assert logged == [
        "[Container] Entering phase INSTALL",
        "make .venv/bin/epstack",
        "epstack build",
        "built",
    ]
    assert lines[-1].endswith(": SUCCEEDED")


@pytest.mark.aws
def test_the_log_cursor_pages_forward_without_gaps_or_repeats(aws: str) -> None:
    put_log("stream-1", *(f"line {i}" for i in range(7)))
    cursor = LogCursor(group=f"/aws/codebuild/{PROJECT}", stream="stream-1")
    logs = boto3.client("logs")
    assert cursor.read(logs, Backoff(), limit=3) == [f"line {i}" for i in range(7)]
    assert cursor.read(logs, Backoff(), limit=3) == []
    put_log("stream-1", "line 7", "line 8")
    assert cursor.read(logs, Backoff(), limit=3) == ["line 7", "line 8"]


@pytest.mark.aws
def test_start_refuses_a_project_without_privileged_mode(
    aws: str, capsys: pytest.CaptureFixture[str]
) -> None:
    create_project(privileged=False)
    assert main(["codebuild", "start", "--project", PROJECT, "--pins", str(PINS)]) == 2
    assert f"{PROJECT}: privileged mode is off and build.yml runs Docker; fix:" in capsys.readouterr().err
    assert boto3.client("codebuild").list_builds_for_project(projectName=PROJECT)["ids"] == []


@pytest.fixture
def stubbed(fake_credentials: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Stubber, Stubber]]:
    """`epstack codebuild start` with Stubber-backed codebuild and logs clients and no real sleeping."""
    client = boto3.client("codebuild")
    logs = boto3.client("logs")
    monkeypatch.setattr(aws_cli, "codebuild_client", lambda region=None: client)
    monkeypatch.setattr(aws_cli, "logs_client", lambda region=None: logs)
    monkeypatch.setattr(codebuild, "pause", lambda seconds: None)
    monkeypatch.setattr("epstack.aws.clients.time.sleep", lambda seconds: None)
    with Stubber(client) as cb, Stubber(logs) as lg:
        yield cb, lg
        cb.assert_no_pending_responses()
        lg.assert_no_pending_responses()


def build(status: str, phases: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "builds": [
            {
                "id": f"{PROJECT}:b1",
                "projectName": PROJECT,
                "buildStatus": status,
                "phases": phases,
                "logs": {"groupName": "g", "streamName": "s"},
            }
        ]
    }


def test_a_failed_build_exits_1_with_the_failing_phase_and_its_log(
    stubbed: tuple[Stubber, Stubber], capsys: pytest.CaptureFixture[str]
) -> None:
    cb, lg = stubbed
    cb.add_response(
        "batch_get_projects",
        {
            "projects": [
                {
                    "name": PROJECT,
                    "environment": {
                        "type": "LINUX_CONTAINER",
                        "image": "i",
                        "computeType": "BUILD_GENERAL1_SMALL",
                        "privilegedMode": True,
                    },
                }
            ]
        },
        {"names": [PROJECT]},
    )
    cb.add_response(
        "start_build",
        {"build": {"id": f"{PROJECT}:b1"}},
        {
            "projectName": PROJECT,
            "sourceVersion": head(),
            "idempotencyToken": ANY,
            "environmentVariablesOverride": [
                {"name": "EPSTACK_PINS_SHA256", "value": ANY, "type": "PLAINTEXT"},
                {"name": "EPSTACK_TARGET", "value": "blackwell-ib", "type": "PLAINTEXT"},
            ],
        },
    )
    done = {"phaseStatus": "SUCCEEDED", "durationInSeconds": 3}
    cb.add_response(
        "batch_get_builds", build("IN_PROGRESS", [{"phaseType": "INSTALL", **done}, {"phaseType": "BUILD"}])
    )
    lg.add_response(
        "get_log_events",
        {"events": [{"timestamp": 1, "message": "epstack build\n"}], "nextForwardToken": "f/1"},
    )
    lg.add_response(
        "get_log_events",
        {"events": [], "nextForwardToken": "f/1"},
        {"logGroupName": "g", "logStreamName": "s", "nextToken": "f/1"},
    )
    failed = {
        "phaseType": "BUILD",
        "phaseStatus": "FAILED",
        "durationInSeconds": 41,
        "contexts": [
            {
                "statusCode": "COMMAND_EXECUTION_ERROR",
                "message": "Error while executing command: epstack build",
            }
        ],
    }
    cb.add_response("batch_get_builds", build("FAILED", [{"phaseType": "INSTALL", **done}, failed]))
    lg.add_response(
        "get_log_events",
        {"events": [{"timestamp": 2, "message": "error: guard failed"}], "nextForwardToken": "f/2"},
        {"logGroupName": "g", "logStreamName": "s", "nextToken": "f/1"},
    )
    lg.add_response("get_log_events", {"events": [], "nextForwardToken": "f/2"})
    for _ in range(3):
        cb.add_response("batch_get_builds", build("FAILED", [failed]))
        lg.add_response("get_log_events", {"events": [], "nextForwardToken": "f/2"})
    assert (
        main(
            [
                "codebuild",
                "start",
                "--project",
                PROJECT,
                "--target",
                "blackwell-ib",
                "--watch",
                "--pins",
                str(PINS),
            ]
        )
        == 1
    )
    lines = [*(captured := capsys.readouterr()).out.splitlines(), *captured.err.splitlines()]
    assert lines[1:] == [
        "phase INSTALL SUCCEEDED in 3 s",
        "epstack build",
        "phase BUILD FAILED in 41 s (COMMAND_EXECUTION_ERROR: Error while executing command: epstack build)",
        "error: guard failed",
        f"build {PROJECT}:b1: FAILED",
    ]


def test_throttling_is_retried_with_backoff_and_the_same_idempotency_token(fake_credentials: None) -> None:
    client = boto3.client("codebuild")
    request = StartRequest(
        project=PROJECT, source_version="abc123", target="hopper-efa", pins_sha256="0" * 64
    )
    expected = {
        "projectName": PROJECT,
        "sourceVersion": "abc123",
        "environmentVariablesOverride": request.overrides(),
        "idempotencyToken": request.idempotency_token(),
    }
    slept: list[float] = []
    messages: list[str] = []
    backoff = Backoff(sleep=slept.append, log=messages.append, base=1.0, cap=3.0)
    with Stubber(client) as stub:
        stub.add_client_error(
            "start_build", "ThrottlingException", "Rate exceeded", 400, expected_params=expected
        )
        stub.add_client_error(
            "start_build", "TooManyRequestsException", "slow down", 400, expected_params=expected
        )
        stub.add_client_error(
            "start_build", "ThrottlingException", "Rate exceeded", 400, expected_params=expected
        )
        stub.add_response("start_build", {"build": {"id": f"{PROJECT}:b2"}}, expected)
        assert codebuild.start(client, request, backoff) == f"{PROJECT}:b2"
        stub.assert_no_pending_responses()
    assert len(slept) == 3 and all(0 <= s <= cap for s, cap in zip(slept, (1.0, 2.0, 3.0), strict=True))
    assert (
        messages[1] == "codebuild:StartBuild: TooManyRequestsException, retry 2/7 in " + f"{slept[1]:.1f} s"
    )
    # the token is a function of what is built: same request, same token; another target, another
    other = StartRequest(project=PROJECT, source_version="abc123", target="hopper-ib", pins_sha256="0" * 64)
    assert request.idempotency_token() == expected["idempotencyToken"] != other.idempotency_token()


def test_throttling_that_does_not_stop_is_an_error(fake_credentials: None) -> None:
    client = boto3.client("codebuild")
    request = StartRequest(project=PROJECT, source_version="abc", target="hopper-efa", pins_sha256="0" * 64)
    with Stubber(client) as stub:
        for _ in range(3):
            stub.add_client_error("start_build", "ThrottlingException", "Rate exceeded", 400)
        with pytest.raises(Exception, match="codebuild:StartBuild: still throttled after 3 attempts"):
            codebuild.start(client, request, Backoff(attempts=3, sleep=lambda s: None))


def test_a_batch_starts_the_batch_buildspec_and_reports_each_build(
    stubbed: tuple[Stubber, Stubber], capsys: pytest.CaptureFixture[str]
) -> None:
    cb, _ = stubbed
    cb.add_response(
        "start_build_batch",
        {"buildBatch": {"id": f"{PROJECT}:batch1"}},
        {
            "projectName": PROJECT,
            "sourceVersion": head(),
            "idempotencyToken": ANY,
            "buildspecOverride": BATCH_BUILDSPEC,
            "environmentVariablesOverride": [
                {"name": "EPSTACK_PINS_SHA256", "value": ANY, "type": "PLAINTEXT"}
            ],
        },
    )
    groups = [
        {"identifier": "build_hopper_efa", "currentBuildSummary": {"arn": "a1", "buildStatus": "SUCCEEDED"}},
        {"identifier": "smoke_hopper_efa", "currentBuildSummary": {"arn": "a2", "buildStatus": "FAILED"}},
    ]
    cb.add_response(
        "batch_get_build_batches",
        {"buildBatches": [{"id": "x", "buildBatchStatus": "IN_PROGRESS", "buildGroups": groups[:1]}]},
    )
    cb.add_response(
        "batch_get_build_batches",
        {"buildBatches": [{"id": "x", "buildBatchStatus": "FAILED", "buildGroups": groups}]},
    )
    assert main(["codebuild", "start", "--project", PROJECT, "--batch", "--watch", "--pins", str(PINS)]) == 1
    lines = [*(captured := capsys.readouterr()).out.splitlines(), *captured.err.splitlines()]
    assert "batch over hopper-efa, hopper-ib, blackwell-efa, blackwell-ib" in lines[0]
    assert lines[1:] == [
        "build_hopper_efa: SUCCEEDED (a1)",
        "smoke_hopper_efa: FAILED (a2)",
        f"batch {PROJECT}:batch1: FAILED",
    ]


def test_start_refuses_pins_that_differ_from_the_commit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    pins = repo / "pins.env"
    pins.write_bytes(PINS.read_bytes())
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "pins.env"], check=True)
    subprocess.run([*git, "commit", "-qm", "pins"], check=True)
    pins.write_text(PINS.read_text().replace("SGLANG_VERSION=0.5.23", "SGLANG_VERSION=0.5.24"))
    assert main(["codebuild", "start", "--project", PROJECT, "--pins", str(pins)]) == 2
    assert "differs from commit" in capsys.readouterr().err
    outside = tmp_path / "pins.env"  # in no git checkout: the source root falls back to the cwd
    outside.write_bytes(PINS.read_bytes())
    assert main(["codebuild", "start", "--project", PROJECT, "--pins", str(outside)]) == 2
    assert f"{outside}: not in the checkout" in capsys.readouterr().err


def test_other_botocore_errors_are_one_line_environment_problems(
    fake_credentials: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A read timeout, an expired SSO token or a missing profile: exit 3 in one line, not a traceback."""

    def timed_out() -> None:
        raise ReadTimeoutError(endpoint_url="https://codebuild.us-east-1.amazonaws.com/")

    with pytest.raises(EnvironmentProblem, match="codebuild:StartBuild: Read timeout on endpoint URL"):
        Backoff().call("codebuild:StartBuild", timed_out)
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    assert main(["codebuild", "start", "--project", PROJECT, "--pins", str(PINS)]) == 3
    err = capsys.readouterr().err
    assert "no-such-profile" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
