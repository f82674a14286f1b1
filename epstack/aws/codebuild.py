"""`epstack codebuild start`: start a build (one target) or a batch (every target), then follow it.

The start carries the source version (a commit), environment overrides from the pins (the target and
the sha256 of pins.env, which build.yml checks against its own) and an idempotency token derived
from all of them: a retry after throttling, or the same command again within CodeBuild's 5 minutes,
returns the build already started instead of starting a second one.

--watch prints each phase once as it completes and the build's CloudWatch log, read with the forward
token get_log_events returns (each call starts where the previous one ended: no gap, no repeat),
then drains the log after the build ends; the exit status is the build's.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from epstack.aws.clients import Backoff, error_code
from epstack.errors import BadInput

if TYPE_CHECKING:
    from mypy_boto3_codebuild import CodeBuildClient
    from mypy_boto3_logs import CloudWatchLogsClient

DONE = frozenset({"SUCCEEDED", "FAILED", "FAULT", "TIMED_OUT", "STOPPED"})
BATCH_BUILDSPEC = "buildspecs/batch.yml"


@dataclass(frozen=True, kw_only=True)
class StartRequest:
    project: str
    source_version: str
    target: str | None  # None: a batch over every target
    pins_sha256: str

    def overrides(self) -> list[dict[str, str]]:
        values = {"EPSTACK_PINS_SHA256": self.pins_sha256}
        if self.target:
            values["EPSTACK_TARGET"] = self.target
        return [{"name": k, "value": v, "type": "PLAINTEXT"} for k, v in sorted(values.items())]

    def idempotency_token(self) -> str:
        canonical = json.dumps(
            [self.project, self.source_version, self.target, self.overrides()], sort_keys=True
        )
        return hashlib.sha256(canonical.encode()).hexdigest()[:64]


def start(client: CodeBuildClient, request: StartRequest, backoff: Backoff) -> str:
    """start_build, or start_build_batch without a target; returns the build (or batch) id."""
    common: dict[str, Any] = {
        "projectName": request.project,
        "sourceVersion": request.source_version,
        "environmentVariablesOverride": request.overrides(),
        "idempotencyToken": request.idempotency_token(),
    }
    if request.target:
        build = backoff.call("codebuild:StartBuild", lambda: client.start_build(**common))
        return str(build["build"]["id"])
    batch = backoff.call(
        "codebuild:StartBuildBatch",
        lambda: client.start_build_batch(**common, buildspecOverride=BATCH_BUILDSPEC),
    )
    return str(batch["buildBatch"]["id"])


def check_privileged(client: CodeBuildClient, project: str, backoff: Backoff) -> None:
    """The project builds Docker images: it must run in privileged mode."""
    found = backoff.call("codebuild:BatchGetProjects", lambda: client.batch_get_projects(names=[project]))
    if not found.get("projects"):
        raise BadInput(f"{project}: no such CodeBuild project; fix: check --project and AWS_REGION")
    environment = found["projects"][0].get("environment", {})
    if not environment.get("privilegedMode"):
        raise BadInput(
            f"{project}: privileged mode is off and build.yml runs Docker; fix: aws codebuild update-project "
            f"--name {project} --environment ... privilegedMode=true "
            "(docs/guides/codebuild.md#setting-up-the-codebuild-project)"
        )


@dataclass(kw_only=True)
class LogCursor:
    """One log stream read forward: `token` is where the next read starts."""

    group: str
    stream: str
    token: str | None = None
    missing: bool = False

    def read(self, client: CloudWatchLogsClient, backoff: Backoff, limit: int | None) -> list[str]:
        """Every event after the cursor, following forward tokens until one comes back unchanged."""
        messages: list[str] = []
        while True:
            kwargs: dict[str, Any] = {"logGroupName": self.group, "logStreamName": self.stream}
            kwargs["nextToken" if self.token else "startFromHead"] = self.token or True
            if limit:
                kwargs["limit"] = limit

            def get(kwargs: dict[str, Any] = kwargs) -> Any:
                try:
                    return client.get_log_events(**kwargs)
                except Exception as exc:
                    if error_code(exc) == "ResourceNotFoundException":  # not created yet
                        return None
                    raise

            page = backoff.call("logs:GetLogEvents", get)
            if page is None:
                self.missing = True
                return messages
            self.missing = False
            messages += [event["message"].rstrip("\n") for event in page.get("events", [])]
            token = page.get("nextForwardToken")
            if token is None or token == self.token:
                return messages
            self.token = token


@dataclass(kw_only=True)
class Watch:
    """Follow one build until it ends; print phases and log lines through `out`."""

    codebuild: CodeBuildClient
    logs: CloudWatchLogsClient
    backoff: Backoff
    out: Callable[[str], None]
    poll: float = 5.0
    limit: int | None = None
    quiet_reads_after_end: int = 3
    seen_phases: set[str] = field(default_factory=set)

    def build(self, build_id: str) -> str:
        cursor: LogCursor | None = None
        quiet = 0
        status = "IN_PROGRESS"
        while True:
            build = self._describe(build_id)
            status = str(build.get("buildStatus", "IN_PROGRESS"))
            self._phases(build)
            cursor = cursor or _cursor(build)
            lines = cursor.read(self.logs, self.backoff, self.limit)
            for line in lines:
                self.out(line)
            if status in DONE:  # CloudWatch may still be ingesting: stop after a few empty reads
                quiet = 0 if lines else quiet + 1
                if quiet >= self.quiet_reads_after_end:
                    break
            pause(self.poll)
        self.out(f"build {build_id}: {status}")
        return status

    def _describe(self, build_id: str) -> Any:
        found = self.backoff.call(
            "codebuild:BatchGetBuilds", lambda: self.codebuild.batch_get_builds(ids=[build_id])
        )
        if not found.get("builds"):
            raise BadInput(f"{build_id}: no such build")
        return found["builds"][0]

    def _phases(self, build: Any) -> None:
        """Each completed phase once (moto repeats the whole list on every read; AWS does not)."""
        for phase in build.get("phases", []):
            kind, status = phase.get("phaseType", ""), phase.get("phaseStatus")
            if not status or kind in self.seen_phases:
                continue
            self.seen_phases.add(kind)
            seconds = phase.get("durationInSeconds")
            detail = "; ".join(
                f"{c.get('statusCode', '')}: {c.get('message', '')}"
                for c in phase.get("contexts", [])
                if c.get("message")
            )
            self.out(
                f"phase {kind} {status}"
                + (f" in {seconds} s" if seconds is not None else "")
                + (f" ({detail})" if detail else "")
            )

    def batch(self, batch_id: str) -> str:
        """A batch: each build's status once it ends, then the batch's."""
        reported: set[str] = set()
        while True:
            found = self.backoff.call(
                "codebuild:BatchGetBuildBatches",
                lambda: self.codebuild.batch_get_build_batches(ids=[batch_id]),
            )
            batch = found["buildBatches"][0]
            for group in batch.get("buildGroups", []):
                summary = group.get("currentBuildSummary", {})
                state = summary.get("buildStatus", "")
                if state in DONE and group["identifier"] not in reported:
                    reported.add(group["identifier"])
                    self.out(f"{group['identifier']}: {state} ({summary.get('arn', '')})")
            status = str(batch.get("buildBatchStatus", "IN_PROGRESS"))
            if status in DONE:
                self.out(f"batch {batch_id}: {status}")
                return status
            pause(self.poll)


def pause(seconds: float) -> None:
    time.sleep(seconds)


def _cursor(build: Any) -> LogCursor:
    """Where CodeBuild writes the build's log: the build's own logs, else the default names
    (/aws/codebuild/<project>, stream = the build id after the colon)."""
    logs = build.get("logs", {})
    group = logs.get("groupName") or f"/aws/codebuild/{build['projectName']}"
    stream = logs.get("streamName") or str(build["id"]).split(":", 1)[1]
    return LogCursor(group=group, stream=stream)
