"""`epstack codebuild run-local FILE`: a buildspec's phases on this machine, the way CodeBuild runs them.

- Environment, lowest precedence first: this process's environment, CodeBuild's own variables
  (CODEBUILD_SRC_DIR, CODEBUILD_BUILD_ID, CODEBUILD_RESOLVED_SOURCE_VERSION, ...), env.variables,
  env.parameter-store and env.secrets-manager (read through boto3), then `--env NAME=VALUE`, which
  wins like a start-build override and skips the lookup of that name. Values are literal: `$PATH`
  in a value stays `$PATH`. Secret values are masked (***) in the log.
- One shell for the whole build (shell.py); env.shell picks bash or /bin/sh.
- Phases in order install, pre_build, build, post_build. A failing command skips the rest of its
  phase's commands, then the phase's `finally` runs; the phase fails if any of its commands did.
  Without on-failure, CodeBuild's transitions: an install or pre_build failure ends the build,
  a build failure still runs post_build, a post_build failure still uploads. on-failure: CONTINUE
  goes on to the next phase; ABORT ends the build; RETRY[-count][-regex] runs the phase again (3
  times by default, 100 at most) while the end of its output matches the regex (searched in a child
  Python stopped after PATTERN_SECONDS: Python's re has no timeout). CODEBUILD_BUILD_SUCCEEDING
  turns 0 at the first failure.
- The build has a time limit (--timeout, like the project's timeoutInMinutes; CodeBuild's default
  60 minutes): each command and phase waits at most the time left, then the shell and its process
  group are killed, the phase and the build are TIMED_OUT and the rest is skipped.
- After the phases: exported-variables are read from the shell, reports are read (JUnit XML
  counted) and artifacts copied, unless the build ended early; no matching artifact fails the build;
  a path that leaves its place (places.py: a symlink out of the source) is BadInput, nothing written.
- Everything lands in --out (run.json, build.log, artifacts/), written aside and swapped in whole.

Not run locally: run-as (commands run as the current user, with a warning), runtime-versions,
cache, proxy, batch (lint checks a batch; `epstack codebuild start --batch` runs it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from epstack import cmd
from epstack.aws.buildspec import PHASES, Buildspec, Command, Phase
from epstack.aws.checkout import git
from epstack.aws.outputs import Report, copy_artifacts, read_report
from epstack.aws.retry import Retry
from epstack.aws.shell import KEPT_OUTPUT, Shell
from epstack.errors import BadInput, CommandFailed
from epstack.httpclient import is_loopback
from epstack.image.registry import LoopbackRegistry
from epstack.output import install_output, staging_beside

DEFAULT_TIMEOUT = 60 * 60.0  # seconds: CodeBuild's default build timeout (timeoutInMinutes 5 to 2160)
PATTERN_SECONDS = 2.0  # an on-failure pattern still searching the output then does not retry
_SEARCH = "import json, re, sys; p, t = json.load(sys.stdin); sys.exit(0 if re.search(p, t) else 1)"


class SecretSource(Protocol):
    """Where parameter-store and secrets-manager references are read (boto3 in aws/secrets.py)."""

    def parameters(self, names: list[str]) -> dict[str, str]: ...

    def secret(self, reference: str) -> str: ...


@dataclass(kw_only=True)
class PhaseResult:
    name: str
    status: str  # SUCCEEDED | FAILED | TIMED_OUT | SKIPPED
    seconds: float = 0.0
    attempts: int = 0
    failed_command: str = ""
    failed_line: int = 0
    exit_code: int = 0


@dataclass(kw_only=True)
class RunResult:
    buildspec: str
    status: str = "SUCCEEDED"
    phases: list[PhaseResult] = field(default_factory=list)
    exported_variables: dict[str, str] = field(default_factory=dict)
    reports: list[Report] = field(default_factory=list)
    artifacts: dict[str, list[str]] = field(default_factory=dict)
    upload_error: str = ""

    def phase(self, name: str) -> PhaseResult:
        return next(p for p in self.phases if p.name == name)

    def to_json(self) -> str:
        data = asdict(self)
        for entry, report in zip(data["reports"], self.reports, strict=True):
            entry["status"] = report.status
        return json.dumps(data, indent=2) + "\n"


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y/%m/%d %H:%M:%S.%f")


class _Log:
    """CodeBuild-like log lines to `echo` and build.log, secret values masked."""

    def __init__(self, echo: Callable[[str], None], path: Path, secrets: list[str]) -> None:
        self._echo = echo
        self._file = path.open("w")
        self._secrets = sorted((s for s in secrets if s), key=len, reverse=True)

    def mask(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def line(self, text: str) -> None:
        text = self.mask(text)
        self._file.write(text + "\n")
        self._file.flush()
        self._echo(text)

    def container(self, text: str) -> None:
        self.line(f"[Container] {_stamp()} {text}")

    def close(self) -> None:
        self._file.close()


def _builtins(source: Path) -> dict[str, str]:
    revision = git(source, "rev-parse", "HEAD")
    build_id = f"local:{uuid.uuid4()}"
    return {
        "CODEBUILD_SRC_DIR": str(source),
        "CODEBUILD_BUILD_ID": build_id,
        "CODEBUILD_BUILD_ARN": "",
        "CODEBUILD_BUILD_NUMBER": "1",
        "CODEBUILD_INITIATOR": "epstack-run-local",
        "CODEBUILD_RESOLVED_SOURCE_VERSION": revision,
        "CODEBUILD_SOURCE_VERSION": revision,
        "CODEBUILD_BUILD_SUCCEEDING": "1",
        "EPSTACK_RUN_LOCAL": "1",
    }


def build_environment(
    spec: Buildspec, *, source: Path, overrides: Mapping[str, str], secrets: SecretSource | None
) -> tuple[dict[str, str], list[str]]:
    """The build's environment and the secret values to mask, in CodeBuild's precedence."""
    env = {**os.environ, **_builtins(source), **spec.variables}
    wanted = {k: v for k, v in spec.parameter_store.items() if k not in overrides}
    references = {k: v for k, v in spec.secrets_manager.items() if k not in overrides}
    hidden: list[str] = []
    if (wanted or references) and secrets is None:
        name = next(iter(wanted or references))
        raise BadInput(
            f"{spec.path}: {name} comes from a secret store and run-local has no AWS access; "
            f"fix: --env {name}=VALUE"
        )
    if wanted and secrets is not None:
        values = secrets.parameters(sorted(set(wanted.values())))
        for key, name in wanted.items():
            env[key] = values[name]
            hidden.append(values[name])
    for key, reference in references.items():
        assert secrets is not None
        env[key] = secrets.secret(reference)
        hidden.append(env[key])
    env.update(overrides)
    return env, hidden


class _Build:
    def __init__(self, spec: Buildspec, shell: Shell, log: _Log) -> None:
        self.spec = spec
        self.shell = shell
        self.log = log
        self.succeeding = True

    def commands(self, block: tuple[Command, ...], result: PhaseResult) -> tuple[bool, str]:
        """Run commands until one fails: whether all passed, and the end of their output. A command
        stopped at the build's time limit makes the phase TIMED_OUT."""
        output = ""
        for command in block:
            self.log.container(f"Running command {command.text}")
            ran = self.shell.run(command.text)
            output = (output + ran.output)[-KEPT_OUTPUT:]
            if ran.code != 0:
                reason = "timed out" if ran.timed_out else f"exit status {ran.code}"
                self.log.container(f"Command did not exit successfully {command.text} {reason}")
                if ran.timed_out:
                    result.status = "TIMED_OUT"
                if not result.failed_command:
                    result.failed_command, result.failed_line, result.exit_code = (
                        command.text,
                        command.line,
                        ran.code,
                    )
                return False, output
        return True, output

    def runs_again(self, retry: Retry | None, result: PhaseResult, output: str) -> bool:
        """Whether a failed attempt runs again: on-failure RETRY, attempts left, its pattern found."""
        if retry is None or result.attempts > retry.count:
            return False
        return retry.pattern == ".*" or self.found(retry.pattern, output)

    def found(self, pattern: str, text: str) -> bool:
        """re.search in a child Python, stopped after PATTERN_SECONDS (not found then)."""
        try:
            searched = cmd.run(
                sys.executable,
                "-I",
                "-c",
                _SEARCH,
                stdin=json.dumps([pattern, text]).encode(),
                timeout=PATTERN_SECONDS,
                echo=False,
            )
        except CommandFailed:
            self.log.container(f"on-failure pattern still searching after {PATTERN_SECONDS:g} s: no retry")
            return False
        return searched.returncode == 0

    def phase(self, phase: Phase) -> PhaseResult:
        retries = phase.retry.count if phase.retry else 0
        start = time.monotonic()
        result = PhaseResult(name=phase.name, status="SUCCEEDED")
        while True:
            result.attempts += 1
            result.failed_command, result.failed_line, result.exit_code = "", 0, 0
            self.log.container(f"Entering phase {phase.name.upper()}")
            ok, output = self.commands(phase.commands, result)
            if result.status == "TIMED_OUT":
                break
            final_ok, final_output = self.commands(phase.finally_, result)
            ok, output = ok and final_ok, output + final_output
            if ok or result.status == "TIMED_OUT" or not self.runs_again(phase.retry, result, output):
                break
            self.log.container(f"Retrying phase {phase.name.upper()} ({result.attempts}/{retries})")
        if result.status != "TIMED_OUT":
            result.status = "SUCCEEDED" if ok else "FAILED"
        result.seconds = round(time.monotonic() - start, 3)
        if not ok:
            self.log.container(
                f"Phase context status code: COMMAND_EXECUTION_ERROR Message: Error while executing command: "
                f"{result.failed_command}. Reason: exit status {result.exit_code}"
            )
        self.log.container(f"Phase complete: {phase.name.upper()} State: {result.status}")
        return result


def _ends_build(phase: Phase) -> bool:
    """After this phase failed, does the build skip the remaining phases and the upload?"""
    if phase.on_failure == "CONTINUE":
        return False
    if phase.on_failure == "ABORT":
        return True
    return phase.name in ("install", "pre_build")


def run_phases(spec: Buildspec, shell: Shell, log: _Log) -> RunResult:
    build = _Build(spec, shell, log)
    result = RunResult(buildspec=str(spec.path))
    by_name = {phase.name: phase for phase in spec.phases}
    ended = False
    for name in PHASES:
        phase = by_name.get(name)
        if phase is None:
            continue
        if ended:
            result.phases.append(PhaseResult(name=name, status="SKIPPED"))
            continue
        outcome = build.phase(phase)
        result.phases.append(outcome)
        if outcome.status == "TIMED_OUT":
            result.status, ended = "TIMED_OUT", True
        elif outcome.status == "FAILED":
            result.status = "FAILED"
            if build.succeeding:
                build.succeeding = False
                shell.set("CODEBUILD_BUILD_SUCCEEDING", "0")
            ended = _ends_build(phase)
    result.upload_error = "skipped: the build ended early" if ended else ""
    for name in spec.exported_variables if result.status != "TIMED_OUT" else ():
        value = shell.value(name)
        result.exported_variables[name] = log.mask(value or "")
        log.container(f"Exported variable {name}={result.exported_variables[name]}")
    return result


def collect(spec: Buildspec, source: Path, out: Path, result: RunResult, log: _Log) -> None:
    """Reports and artifacts (UPLOAD_ARTIFACTS), unless the build ended before them."""
    if result.upload_error:
        return
    for group, file_set in spec.reports.items():
        report = read_report(group, file_set, source, at=f"{spec.path}:{file_set.line}: reports.{group}")
        result.reports.append(report)
        log.container(
            f"Report {group} ({report.file_format}): {report.status}, {len(report.files)} files, "
            f"{report.tests} tests, {report.failures} failed, {report.skipped} skipped"
            + (f"; {report.error}" if report.error else "")
        )
    blocks = {"": spec.artifacts} if spec.artifacts else {}
    blocks.update(spec.secondary_artifacts)
    for name, file_set in blocks.items():
        assert file_set is not None
        key = f"artifacts.secondary-artifacts.{name}" if name else "artifacts"
        at = f"{spec.path}:{file_set.line}: {key}"
        copied = copy_artifacts(file_set, source, out / "artifacts", name=name, at=at)
        result.artifacts[name or "primary"] = copied
        log.container(f"Artifacts {name or 'primary'}: {len(copied)} files")
        if not copied:
            result.upload_error = f"CLIENT_ERROR: no matching artifact paths found ({name or 'primary'})"
            result.status = "FAILED"
            log.container(f"Phase complete: UPLOAD_ARTIFACTS State: FAILED: {result.upload_error}")


def run_local(
    spec: Buildspec,
    *,
    source: Path,
    out: Path,
    overrides: Mapping[str, str],
    secrets: SecretSource | None,
    echo: Callable[[str], None],
    timeout: float = DEFAULT_TIMEOUT,
) -> RunResult:
    """Run the buildspec in `source` within `timeout` seconds, each log line also to `echo`; the
    result (also out/run.json) says SUCCEEDED, FAILED or TIMED_OUT. `out` (allowed by
    epstack.output.check_output) is replaced whole when the run ends."""
    env, hidden = build_environment(spec, source=source, overrides=overrides, secrets=secrets)
    staging = staging_beside(out, prefix=f".{out.name}.")
    log = _Log(echo, staging / "build.log", hidden)
    workdir = Path(tempfile.mkdtemp(prefix="epstack-shell-"))
    deadline = time.monotonic() + timeout
    shell = Shell(shell=spec.shell, env=env, cwd=source, workdir=workdir, log=log.line, deadline=deadline)
    try:
        if spec.run_as:
            log.container("run-as is not applied locally: commands run as the current user")
        result = run_phases(spec, shell, log)
        shell.close()
        collect(spec, source, staging, result, log)
        log.container(f"Build {result.status}")
        log.close()
        (staging / "run.json").write_text(result.to_json())
        install_output(staging, out)
        return result
    finally:
        shell.close()
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)


def reads_secret_stores(spec: Buildspec, overrides: Mapping[str, str]) -> bool:
    """Whether a variable comes from Parameter Store or Secrets Manager (no override names it)."""
    return bool((set(spec.parameter_store) | set(spec.secrets_manager)) - set(overrides))


def loopback_registry(address: str) -> str:
    """`address` (HOST:PORT[/NAMESPACE]), once it is a loopback registry that answers."""
    host = address.split("/", 1)[0]
    if not is_loopback(host):
        raise BadInput(f"--registry {address}: only loopback for run-local; fix: 127.0.0.1:PORT")
    LoopbackRegistry(host=host).ping()
    return address


def parse_overrides(values: list[str], *, on_error: Callable[[str], BadInput]) -> dict[str, str]:
    """--env NAME=VALUE pairs."""
    overrides = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise on_error(item)
        overrides[name] = value
    return overrides
