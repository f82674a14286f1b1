"""env.parameter-store and env.secrets-manager for run-local, read the way CodeBuild reads them:
ssm:GetParameters with decryption, secretsmanager:GetSecretValue with the optional json-key,
version-stage and version-id of `secret-id:json-key:version-stage:version-id`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from epstack.aws.clients import Backoff, secrets_client, ssm_client
from epstack.errors import BadInput, shown

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager import SecretsManagerClient
    from mypy_boto3_ssm import SSMClient


def split_reference(reference: str) -> tuple[str, str, str, str]:
    """secret-id (a name, or an ARN with its own colons), json-key, version-stage, version-id."""
    if reference.startswith("arn:"):
        parts = reference.split(":")
        secret_id, rest = ":".join(parts[:7]), parts[7:]
    else:
        secret_id, *rest = reference.split(":")
    rest += [""] * (3 - len(rest))
    return secret_id, rest[0], rest[1], rest[2]


@dataclass(frozen=True, kw_only=True)
class AwsSecrets:
    ssm: SSMClient
    secretsmanager: SecretsManagerClient
    backoff: Backoff

    def parameters(self, names: list[str]) -> dict[str, str]:
        values: dict[str, str] = {}
        for start in range(0, len(names), 10):  # GetParameters takes at most 10 names
            chunk = names[start : start + 10]

            def get(chunk: list[str] = chunk) -> Any:
                return self.ssm.get_parameters(Names=chunk, WithDecryption=True)

            response = self.backoff.call("ssm:GetParameters", get)
            values.update({p["Name"]: p["Value"] for p in response.get("Parameters", [])})
            if response.get("InvalidParameters"):
                missing = response["InvalidParameters"][0]
                raise BadInput(
                    f"parameter-store: {missing} does not exist; fix: create it or pass --env NAME=VALUE"
                )
        return values

    def secret(self, reference: str) -> str:
        secret_id, json_key, stage, version = split_reference(reference)
        kwargs: dict[str, Any] = {"SecretId": secret_id}
        if stage:
            kwargs["VersionStage"] = stage
        if version:
            kwargs["VersionId"] = version
        response = self.backoff.call(
            "secretsmanager:GetSecretValue", lambda: self.secretsmanager.get_secret_value(**kwargs)
        )
        text = str(response.get("SecretString", ""))
        if not json_key:
            return text
        try:
            value = json.loads(text)[json_key]
        except (ValueError, KeyError, TypeError):
            raise BadInput(
                f"secrets-manager: {secret_id} has no JSON key {shown(json_key)}; fix: check the reference"
            ) from None
        return str(value)


def aws_secrets(backoff: Backoff) -> AwsSecrets:
    return AwsSecrets(ssm=ssm_client(), secretsmanager=secrets_client(), backoff=backoff)
