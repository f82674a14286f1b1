"""docs/iam/*.json: valid policies, real actions, no account ID, and every AWS call epstack makes
is allowed by the policy of the command that makes it (calls found in the source)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

import boto3
import pytest

from tests.conftest import REPO

IAM = REPO / "docs" / "iam"
# Literal service names: boto3-stubs types boto3.client per service name.
Service = Literal["codebuild", "ecr", "logs", "ssm", "secretsmanager", "s3"]
SERVICES: tuple[Service, ...] = ("codebuild", "ecr", "logs", "ssm", "secretsmanager", "s3")
# module -> the policies a user of its commands attaches
MODULE_POLICIES = {
    "codebuild.py": ["codebuild-start.json"],
    "ecr.py": ["ecr-login.json", "ecr-digest.json", "ecr-promote.json"],
    "secrets.py": ["run-local.json"],
}


def actions(*names: str) -> set[str]:
    found: set[str] = set()
    for name in names:
        for statement in json.loads((IAM / name).read_text())["Statement"]:
            found |= set(statement["Action"])
    return found


# IAM actions that are permissions without an API of the same name (CodeBuild's test reports).
PERMISSION_ONLY = {"codebuild:CreateReport", "codebuild:UpdateReport", "codebuild:BatchPutTestCases"}


@pytest.fixture(scope="module")
def operations() -> dict[str, dict[str, str]]:
    """snake_case method -> API name, per service, from botocore's models."""
    return {s: boto3.client(s, region_name="us-east-1").meta.method_to_api_mapping for s in SERVICES}


def calls_in(module: Path, operations: dict[str, dict[str, str]]) -> set[str]:
    names = set(re.findall(r"\.([a-z_]+)\(", module.read_text()))
    return {f"{s}:{ops[n]}" for s, ops in operations.items() if s != "s3" for n in names if n in ops}


def test_every_policy_is_valid_and_names_real_actions(operations: dict[str, dict[str, str]]) -> None:
    files = sorted(IAM.glob("*.json"))
    assert [f.name for f in files] == sorted(
        ["codebuild-service-role.json", "codebuild-start.json", "ecr-digest.json", "ecr-login.json",
         "ecr-promote.json", "run-local.json"]
    )  # fmt: skip
    for path in files:
        text = path.read_text()
        assert not re.search(r"\d{12}", text), f"{path.name}: an account ID"
        policy = json.loads(text)
        assert policy["Version"] == "2012-10-17" and policy["Statement"]
        for statement in policy["Statement"]:
            assert statement["Effect"] == "Allow" and statement["Resource"]
            for action in statement["Action"]:
                service, _, api = action.partition(":")
                known = api in operations[service].values() or action in PERMISSION_ONLY
                assert known, f"{path.name}: {action} is not an operation"


@pytest.mark.parametrize("module", sorted(MODULE_POLICIES))
def test_each_commands_calls_are_allowed(module: str, operations: dict[str, dict[str, str]]) -> None:
    calls = calls_in(REPO / "epstack" / "aws" / module, operations)
    assert calls, f"no AWS call found in {module}"
    assert calls <= actions(*MODULE_POLICIES[module]), calls - actions(*MODULE_POLICIES[module])


def test_the_build_role_allows_publish_and_dockers_push(operations: dict[str, dict[str, str]]) -> None:
    role = actions("codebuild-service-role.json")
    registry_calls = calls_in(REPO / "epstack" / "aws" / "ecr.py", operations) - {"ecr:PutImage"}
    assert registry_calls <= role
    push = {"ecr:InitiateLayerUpload", "ecr:UploadLayerPart", "ecr:CompleteLayerUpload", "ecr:PutImage"}
    assert push | {"ssm:GetParameters", "ecr:BatchCheckLayerAvailability"} <= role
