"""The scheduled bump, as shipped: the GitHub Actions example (docs/examples/bump.yml) against
check-jsonschema's vendored github-workflows schema, the EventBridge rule and target
(docs/examples/outdated-*.json) against botocore's models of PutRule, PutTargets and CodeBuild's
StartBuild, and every group they name a group of epstack.bump.groups. buildspecs/outdated.yml is
linted with the other buildspecs (tests/aws/test_lint.py)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import botocore.session
import pytest
import yaml
from botocore.validate import ParamValidator

from epstack.bump.groups import GROUPS
from tests.conftest import REPO, venv_tool

EXAMPLES = REPO / "docs" / "examples"
GROUP_NAMES = {group.name for group in GROUPS}


def schema_check(path: Path) -> subprocess.CompletedProcess[str]:
    command = [venv_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path)]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def test_the_workflow_example_is_a_valid_workflow_that_bumps_real_groups(tmp_path: Path) -> None:
    workflow = EXAMPLES / "bump.yml"
    assert schema_check(workflow).returncode == 0, schema_check(workflow).stdout
    document = yaml.safe_load(workflow.read_text())
    job = document["jobs"]["bump"]
    assert set(job["strategy"]["matrix"]["group"]) <= GROUP_NAMES
    (step,) = [s for s in job["steps"] if "--open-pr" in s.get("run", "")]
    assert '--group "$GROUP"' in step["run"] and step["env"]["GITHUB_TOKEN"] == "${{ secrets.GITHUB_TOKEN }}"
    assert document["permissions"] == {"contents": "write", "pull-requests": "write"}
    broken = tmp_path / "bump.yml"
    broken.write_text(workflow.read_text().replace("runs-on:", "run-on:"))
    assert schema_check(broken).returncode == 1, "the schema check can fail"


def _errors(service: str, operation: str, params: dict[str, Any]) -> str:
    shape = botocore.session.get_session().get_service_model(service).operation_model(operation).input_shape
    assert shape is not None
    return str(ParamValidator().validate(params, shape).generate_report())


def test_the_eventbridge_rule_starts_the_outdated_buildspec_weekly() -> None:
    rule = json.loads((EXAMPLES / "outdated-rule.json").read_text())
    targets = json.loads((EXAMPLES / "outdated-targets.json").read_text())
    assert _errors("events", "PutRule", rule) == ""
    assert _errors("events", "PutTargets", targets) == ""
    assert re.fullmatch(r"cron\(\S+ \S+ \S+ \S+ \S+ \S+\)", rule["ScheduleExpression"])
    assert targets["Rule"] == rule["Name"]
    (target,) = targets["Targets"]
    start = json.loads(target["Input"])
    assert _errors("codebuild", "StartBuild", {"projectName": "epstack-images", **start}) == ""
    assert (REPO / start["buildspecOverride"]).is_file()
    (groups,) = [
        v["value"] for v in start["environmentVariablesOverride"] if v["name"] == "EPSTACK_BUMP_GROUPS"
    ]
    assert set(groups.split()) <= GROUP_NAMES
    assert not re.search(r"\d{12}", json.dumps(targets)), "no account ID"
    assert _errors("events", "PutRule", {**rule, "Schedule": rule["ScheduleExpression"]}) != "", "can fail"


def test_the_buildspec_bumps_real_groups_as_pull_requests() -> None:
    buildspec = yaml.safe_load((REPO / "buildspecs" / "outdated.yml").read_text())
    assert set(buildspec["env"]["variables"]["EPSTACK_BUMP_GROUPS"].split()) <= GROUP_NAMES
    assert "GITHUB_TOKEN" in buildspec["env"]["secrets-manager"]
    commands = " ".join(buildspec["phases"]["build"]["commands"])
    assert 'epstack pins bump --group "$group" $BUMP_MODE' in commands and "--open-pr" in commands


@pytest.mark.parametrize("name", sorted(GROUP_NAMES))
def test_every_group_is_named_in_the_guide(name: str) -> None:
    assert f"`{name}`" in (REPO / "docs" / "guides" / "pin-guards.md").read_text()
