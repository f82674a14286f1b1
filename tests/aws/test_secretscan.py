"""Secrets in a buildspec found by value as well as by name, and values that only look like secrets.

Every token below is made up for this test and assembled from two parts, so that no scanner takes
this file for a leak: the prefix a vendor publishes and a random body of the published length.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from epstack.aws import secretscan
from epstack.aws.lint import SECRET_FIX, lint
from epstack.commands.main import main
from epstack.pins.model import Pins
from tests.conftest import PINS

Write = Callable[..., Path]

GITHUB_CLASSIC = "ghp_" + "lhQCvpm8FOFlEsD4qmq5ShuHRWYl398Zpkpm"
GITHUB_FINE_GRAINED = "github_pat_" + "11AQZ3KXY0_VxKGmZR53W1FnTtqavzoXUzIwLKHr0rMTtJhsEK7GjFRYOYkmnPRZBiAGEK"
GITLAB = "glpat-" + "g6TmLqI2vYZ10QIEfFjE"
NPM = "npm_" + "jFfpPfIwn76YOzYL0IRWHaiXS24fEz0zlyAi"
DOCKER_HUB = "dckr_pat_" + "rTzRSxjvvU2Nt6iBSI3b5KBjXkN"
SLACK_BOT = "xoxb-" + "2940167358-5830147296013-LxewvfMr7wUkzSA1GAVHTar7"
SLACK_WEBHOOK = "https://hooks.slack.com/services/" + "T04QF7Z2K/B06R1M8XJ3P/UOtFdX0f7wWIVl2Hj7nq8ek1"
AWS_KEY_ID = "AKIA" + "SKXI2FGUQ937FOE3"
AWS_SESSION_KEY_ID = "ASIA" + "UKFOX8576YZT3B6M"
AWS_SECRET = "AckYUibJBFrOcqD5Jc2vI1r+FJ8hSh6LKbyBcvME"
RANDOM = "VZP5BaGJJ0DJgaXMXqBVzENJE3A1415Yjol2Yl9x"


@pytest.mark.parametrize(
    ("variable", "value", "what"),
    [
        ("GH_TOKEN_VALUE", GITHUB_CLASSIC, "GH_TOKEN_VALUE holds a GitHub token"),
        ("RELEASE_BOT", GITHUB_FINE_GRAINED, "RELEASE_BOT holds a GitHub token"),
        ("CI_JOB", GITLAB, "CI_JOB holds a GitLab token"),
        ("NPM_CONFIG_REGISTRY_AUTH", NPM, "NPM_CONFIG_REGISTRY_AUTH holds an npm token"),
        ("DOCKERHUB", DOCKER_HUB, "DOCKERHUB holds a Docker Hub access token"),
        ("SLACK_BOT", SLACK_BOT, "SLACK_BOT holds a Slack token"),
        ("NOTIFY", SLACK_WEBHOOK, "NOTIFY holds a Slack webhook URL"),
        ("AWS_ACCESS_KEY_ID", AWS_KEY_ID, "AWS_ACCESS_KEY_ID holds an AWS access key ID"),
        ("AWS_ACCESS_KEY_ID", AWS_SESSION_KEY_ID, "AWS_ACCESS_KEY_ID holds an AWS access key ID"),
        ("AWS_SECRET_ACCESS_KEY", AWS_SECRET, "AWS_SECRET_ACCESS_KEY holds an AWS secret access key"),
        (
            "DATABASE_URL",
            "postgres://app:Rt8Wn4Bs@db.internal:5432/app",
            "DATABASE_URL holds a password in a URL",
        ),
        ("SIGNATURE_SEED", RANDOM, "SIGNATURE_SEED holds a high-entropy value"),
        ("DOCKERHUB_PASS", "hunter2", "DOCKERHUB_PASS looks like a secret"),
        ("db_password", "changeme", "db_password looks like a secret"),
    ],
)
def test_a_secret_in_a_variable_is_found_by_value_or_name_at_its_line(
    buildspec: Write, pins: Pins, variable: str, value: str, what: str
) -> None:
    path = buildspec(
        f"""
        version: 0.2
        env:
          variables:
            REGION: us-east-1
            {variable}: "{value}"
        phases:
          build:
            commands:
              - make
        """
    )
    findings = lint([path], pins, source=path.parent)
    assert [(f.line, f.rules, f.message) for f in findings] == [
        (5, "aws", f"{what} in plain text; fix: {SECRET_FIX}")
    ]
    assert value not in str(findings[0])


@pytest.mark.parametrize(
    ("command", "what"),
    [
        (f"aws configure set aws_secret_access_key {AWS_SECRET}", "an AWS secret access key"),
        (f"curl -X POST -d @message.json {SLACK_WEBHOOK}", "a Slack webhook URL"),
        ("psql postgres://app:Rt8Wn4Bs@db.internal:5432/app -f migrate.sql", "a password in a URL"),
        ("export DOCKERHUB_PASS=hunter2", "DOCKERHUB_PASS looks like a secret"),
        (f"docker build --build-arg NPM_TOKEN={NPM} .", "an npm token"),
        (f"echo '{DOCKER_HUB}' | docker login -u bot --password-stdin", "a Docker Hub access token"),
        (f'printf "%s" "{RANDOM}" > signing.seed', "a high-entropy value"),
        ("docker login -u bot -p hunter2 registry.example", "a password on a command line"),
        ("echo '-----BEGIN OPENSSH PRIVATE KEY-----' > id", "a Private Key"),
    ],
)
def test_a_secret_in_a_command_is_found_at_its_line(
    buildspec: Write, pins: Pins, command: str, what: str
) -> None:
    path = buildspec(f"version: 0.2\nphases:\n  build:\n    commands:\n      - make\n      - {command}\n")
    findings = lint([path], pins, source=path.parent)
    assert [(f.line, f.message) for f in findings] == [(6, f"{what} in plain text; fix: {SECRET_FIX}")]


def test_values_that_only_look_like_secrets_pass(buildspec: Write, pins: Pins) -> None:
    path = buildspec(
        """
        version: 0.2
        env:
          variables:
            TOKEN_TTL_SECONDS: 3600
            PASSWORD_MIN_LENGTH: 12
            SESSION_TOKEN_REFRESH: true
            SECRET_ROTATION_DAYS: "30"
            API_KEY_HEADER: X-Api-Key
            GITHUB_TOKEN_FILE: /run/secrets/github
            DB_SECRET_ARN: arn:aws:secretsmanager:us-east-1:000000000000:secret:db
            DB_PASSWORD: ${DB_PASSWORD_FROM_VAULT}
            SOURCE_COMMIT: 3f2a9c1d4e5b6a7980c1d2e3f4a5b6c7d8e9f0a1
            BUILD_UUID: 7d444840-9dc0-11d1-b245-5ffdce74fad2
            JAVA_HOME: /usr/lib/jvm/java-17-amazon-corretto
            PACKAGE: github.com/example/container-agent/agent
          parameter-store:
            DOCKERHUB_PASS: /ci/dockerhub/password
          secrets-manager:
            GITHUB_TOKEN: ci/github:token
          exported-variables:
            - CODEBUILD_BUILD_ID
        phases:
          build:
            commands:
              - echo "$DOCKERHUB_PASS" | docker login -u bot --password-stdin
              - export PASSWORD_MIN_LENGTH=12 DB_PASSWORD="$(cat /run/secrets/db)"
              - psql "postgres://app:$DB_PASSWORD@db.internal:5432/app" -f migrate.sql
              - git clone git@github.com:example/container-agent.git
              - docker pull golang@sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945
              - echo "built $CODEBUILD_BUILD_ID at $CODEBUILD_RESOLVED_SOURCE_VERSION"
        """
    )
    assert lint([path], pins, source=path.parent) == []


FROM_A_STORE = "aws secretsmanager get-secret-value --secret-id ci/token --query SecretString --output text"


@pytest.mark.parametrize(
    "value",
    [
        f'"$({FROM_A_STORE})"',
        f"$({FROM_A_STORE})",
        f"`{FROM_A_STORE}`",
        "$(aws ssm get-parameter --name /ci/token --with-decryption --query 'Parameter.Value' --output text)",
        "$(jq -r '.token | select(length > 0)' \"$(mktemp)\")",
        "$CI_TOKEN",
        "${CI_TOKEN}",
        '"${CI_TOKEN}"',
    ],
)
@pytest.mark.parametrize(
    "command", ["TOKEN={value}", "export API_KEY={value}", "DB_PASSWORD={value} ./migrate"]
)
def test_a_variable_assigned_from_a_store_or_another_variable_in_a_command_is_no_secret(
    buildspec: Write, pins: Pins, command: str, value: str
) -> None:
    """A command substitution or a variable reference is what the build reads at run time, not a secret
    written in the buildspec."""
    line = command.format(value=value)
    path = buildspec(f"version: 0.2\nphases:\n  build:\n    commands:\n      - {json.dumps(line)}\n")
    assert lint([path], pins, source=path.parent) == []


@pytest.mark.parametrize("value", ["hunter2hunter2", f'"{GITHUB_CLASSIC}"', f"$(echo {GITHUB_CLASSIC})"])
@pytest.mark.parametrize(
    "command", ["TOKEN={value}", "export API_KEY={value}", "DB_PASSWORD={value} ./migrate"]
)
def test_a_literal_secret_in_the_same_place_is_still_found(
    buildspec: Write, pins: Pins, command: str, value: str
) -> None:
    line = command.format(value=value)
    path = buildspec(f"version: 0.2\nphases:\n  build:\n    commands:\n      - {json.dumps(line)}\n")
    (finding,) = lint([path], pins, source=path.parent)
    assert finding.line == 5 and finding.message.endswith(f"in plain text; fix: {SECRET_FIX}")


@pytest.mark.parametrize(
    ("name", "value"),
    [("TOKEN_TTL_SECONDS", 3600), ("PASSWORD_MIN_LENGTH", 12), ("PASSWORD_MIN_LENGTH", "12"), ("PWD", "x")],
)
def test_names_like_secrets_holding_no_secret_are_not_flagged(name: str, value: object) -> None:
    assert secretscan.in_variable(name, value) is None
    assert secretscan.in_variable("DOCKERHUB_PASS", "x") == "DOCKERHUB_PASS looks like a secret"


def test_without_detect_secrets_lint_says_how_to_install_it(
    buildspec: Write, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = buildspec("version: 0.2\nphases:\n  build:\n    commands: [make]\n")
    secretscan._library.cache_clear()
    monkeypatch.setitem(sys.modules, "detect_secrets.plugins", None)
    try:
        assert main(["codebuild", "lint", "--pins", str(PINS), str(path)]) == 3
    finally:
        secretscan._library.cache_clear()
    err = capsys.readouterr().err
    assert "detect-secrets is not installed" in err and "fix: pip install 'epstack[aws]'" in err


# How a public DeepEP-on-EFA buildspec reads its token: inside an `if`, in a multi-line `|` block, the
# command substitution quoted, with quotes of its own inside it.
READ = 'aws secretsmanager get-secret-value --secret-id "$HF_SECRET_ID" --query SecretString --output text'
RUN_TIME_READ = f"""\
version: 0.2
phases:
  build:
    commands:
      - |
        if [ -n "${{HF_SECRET_ID:-}}" ]; then
          HF_TOKEN="$({READ})"
          export HF_TOKEN
        fi
"""


def test_a_secret_read_at_run_time_in_a_quoted_substitution_is_no_secret(
    buildspec: Write, pins: Pins
) -> None:
    path = buildspec(RUN_TIME_READ)
    assert lint([path], pins, source=path.parent) == []


@pytest.mark.parametrize(
    "value", [f'"{GITHUB_CLASSIC}"', '"$(echo x)hunter2hunter2"', f'"$(cat "$F")" GH="{GITHUB_CLASSIC}"']
)
def test_a_literal_beside_or_after_a_quoted_substitution_is_still_found(
    buildspec: Write, pins: Pins, value: str
) -> None:
    path = buildspec(RUN_TIME_READ.replace('"$(aws secretsmanager', f"{value} #", 1))
    (finding,) = lint([path], pins, source=path.parent)
    assert finding.line == 5 and finding.message.endswith(f"in plain text; fix: {SECRET_FIX}")
