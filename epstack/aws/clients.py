"""boto3 clients as epstack uses them, and every AWS call through `Backoff.call`.

Throttling is retried here, with capped exponential backoff and full jitter, so each retry is
printed and can be tested (botocore's own retries are off: a Stubber answer never reaches them, and
two retry layers would multiply). Other AWS errors become one-line epstack errors. The endpoint
follows AWS_ENDPOINT_URL (botocore reads it), which is how the tests reach moto's server.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from epstack.errors import BadInput, EnvironmentProblem, EpstackError

if TYPE_CHECKING:
    from mypy_boto3_codebuild import CodeBuildClient
    from mypy_boto3_ecr import ECRClient
    from mypy_boto3_logs import CloudWatchLogsClient
    from mypy_boto3_secretsmanager import SecretsManagerClient
    from mypy_boto3_ssm import SSMClient

T = TypeVar("T")

THROTTLING = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "ProvisionedThroughputExceededException",
        "SlowDown",
    }
)
NOT_FOUND = frozenset({"ResourceNotFoundException", "RepositoryNotFoundException", "ParameterNotFound"})


class AwsError(EpstackError):
    """AWS answered with an error epstack does not handle itself."""

    exit_code = 1


def _boto3() -> Any:
    try:
        import boto3
    except ImportError:
        raise EnvironmentProblem(
            "boto3 is not installed; fix: pip install 'epstack[aws]' (make .venv/bin/epstack EXTRAS=aws)"
        ) from None
    return boto3


def region(explicit: str | None = None) -> str:
    value = explicit or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not value:
        raise EnvironmentProblem("no AWS region; fix: set AWS_REGION (CodeBuild sets it) or pass --region")
    return value


def _client(service: str, region_name: str | None) -> Any:
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError

    config = Config(retries={"total_max_attempts": 1}, user_agent_extra="epstack")
    try:
        return _boto3().session.Session().client(service, region_name=region(region_name), config=config)
    except BotoCoreError as exc:  # a profile that does not exist, a broken config file
        raise EnvironmentProblem(f"AWS {service}: {exc}; fix: check AWS_PROFILE and ~/.aws/config") from None


def codebuild_client(region_name: str | None = None) -> CodeBuildClient:
    client: CodeBuildClient = _client("codebuild", region_name)
    return client


def logs_client(region_name: str | None = None) -> CloudWatchLogsClient:
    client: CloudWatchLogsClient = _client("logs", region_name)
    return client


def ecr_client(region_name: str | None = None) -> ECRClient:
    client: ECRClient = _client("ecr", region_name)
    return client


def ssm_client(region_name: str | None = None) -> SSMClient:
    client: SSMClient = _client("ssm", region_name)
    return client


def secrets_client(region_name: str | None = None) -> SecretsManagerClient:
    client: SecretsManagerClient = _client("secretsmanager", region_name)
    return client


def error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """Retry throttled calls: attempt n waits uniform(0, min(cap, base * 2**n)) seconds."""

    attempts: int = 8
    base: float = 0.5
    cap: float = 20.0
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    log: Callable[[str], None] = lambda message: None

    def call(self, operation: str, function: Callable[[], T]) -> T:
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            EndpointConnectionError,
            NoCredentialsError,
            NoRegionError,
        )

        for attempt in range(self.attempts):
            try:
                return function()
            except ClientError as exc:
                code = error_code(exc)
                message = exc.response.get("Error", {}).get("Message", "")
                if code in THROTTLING and attempt + 1 < self.attempts:
                    delay = self.rng.uniform(0, min(self.cap, self.base * 2**attempt))
                    self.log(f"{operation}: {code}, retry {attempt + 1}/{self.attempts - 1} in {delay:.1f} s")
                    self.sleep(delay)
                    continue
                if code in THROTTLING:
                    raise AwsError(
                        f"{operation}: still throttled after {self.attempts} attempts ({code})"
                    ) from None
                if code in NOT_FOUND:
                    raise BadInput(
                        f"{operation}: {message or code}; fix: check the name and the region"
                    ) from None
                if code in ("AccessDeniedException", "AccessDenied", "UnauthorizedOperation"):
                    raise EnvironmentProblem(
                        f"{operation}: access denied ({message}); fix: grant it (docs/iam/*.json)"
                    ) from None
                raise AwsError(f"{operation}: {code}: {message}") from None
            except NoCredentialsError:
                raise EnvironmentProblem(
                    f"{operation}: no AWS credentials; fix: configure AWS credentials"
                ) from None
            except NoRegionError:
                raise EnvironmentProblem(f"{operation}: no AWS region; fix: set AWS_REGION") from None
            except EndpointConnectionError as exc:
                raise EnvironmentProblem(f"{operation}: cannot reach AWS ({exc})") from None
            except BotoCoreError as exc:  # timeouts, an expired SSO token, partial credentials, ...
                raise EnvironmentProblem(f"{operation}: {exc}; fix: check the AWS configuration") from None
        raise AssertionError("unreachable")
