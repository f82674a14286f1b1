"""Secrets written into a buildspec in plain text, found by value and by name.

AWS's buildspec reference (build-spec-ref.html, env/variables) strongly discourages sensitive values
in plain-text variables, since the console and the CLI show them; they belong in env.parameter-store
or env.secrets-manager, which CodeBuild reads at build time and hides in its logs.

By value: the credential shapes of epstack/credentials.py (shared with pins.env) with a password in a
URL and the AWS secret access key beside its name, passwords on a command line, detect-secrets'
regex plugins for the rest (private keys, JWTs, Stripe, Twilio, SendGrid, OpenAI, PyPI, ...), and
values whose Shannon entropy passes detect-secrets' Base64 limit (4.5 bits a character, 20
characters at least) less its heuristic filters (UUIDs, sequences, templates, `$REFERENCES`).
By name: a variable named like a secret (DOCKERHUB_PASS, DB_PASSWORD, API_KEY) that holds a literal.
A number, a boolean, a path, an ARN, a reference or a command substitution is no secret
(TOKEN_TTL_SECONDS: 3600, TOKEN=$(aws secretsmanager get-secret-value ...)), and a
name whose last word says what it holds about the secret is not one (PASSWORD_MIN_LENGTH, TOKEN_FILE,
SECRET_ARN, AWS_ACCESS_KEY_ID: its value is checked by shape). NAME=VALUE in a command is read the
same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from epstack.credentials import AWS_SECRET_KEY, TOKENS, URL_PASSWORD, Shape, credential
from epstack.errors import EnvironmentProblem

if TYPE_CHECKING:
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString

SHAPES: tuple[Shape, ...] = (
    URL_PASSWORD,
    AWS_SECRET_KEY,
    *TOKENS,
    (re.compile(r"--password[ =]+['\"]?(?!\$)[^\s'\"-]"), "a password on a command line"),
    (re.compile(r"\blogin\b.*\s-p\s+['\"]?(?!\$)[^\s'\"-]"), "a password on a command line"),
)
SECRET_WORD = re.compile(
    r"(?:^|_)(?:PASS|PASSWORD|PASSWD|PASSPHRASE|PWD|SECRETS?|TOKEN|CREDENTIALS?|APIKEY"
    r"|(?:API|ACCESS|AUTH|PRIVATE|SECRET|SIGNING|CLIENT)_?KEY)(?:_|$)",
    re.IGNORECASE,
)
# The last word of a name that holds something about a secret, not the secret.
ABOUT_A_SECRET = re.compile(
    r"_(?:TTL|SECONDS|SECS|MINUTES|HOURS|DAYS|LENGTH|LEN|MIN|MAX|COUNT|SIZE|FILE|PATH|DIR|NAME|ID|ARN"
    r"|URL|URI|ENDPOINT|HOST|HEADER|TYPE|ENABLED|DISABLED|EXPIRY|EXPIRES|REGION|PARAM|PARAMETER|VERSION"
    r"|POLICY|ROLE|USER|USERNAME|EMAIL|FORMAT)$",
    re.IGNORECASE,
)
SHELL_NAMES = frozenset({"PWD", "OLDPWD"})  # the shell's working directories, named like a password
# A command substitution, $(...) (parentheses nested three deep) or `...`: what the build reads when it
# runs (`aws secretsmanager get-secret-value ...`), not a value written in the buildspec.
SUBSTITUTION = r"\$\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)|`[^`]*`"
NOT_A_SECRET = re.compile(
    r"(?:[-+]?\d+(?:\.\d+)?[smhd]?|true|false|yes|no|on|off|none|null"  # numbers, booleans
    r"|\.{0,2}/\S*|~/\S*|arn:\S+"  # paths and ARNs
    rf"|\$\w+|\$\{{[^}}]*\}}|{SUBSTITUTION})",  # references, command substitutions
    re.IGNORECASE,
)
# NAME=VALUE in a command: `export NAME=VALUE`, `NAME=VALUE cmd`, `--build-arg NAME=VALUE`; an unquoted
# VALUE is one word, command substitutions (spaces and all) included; a double-quoted one may hold command
# substitutions with quotes of their own (TOKEN="$(aws ... --query "SecretString" --output text)"). A `$`
# or a backtick starts a substitution or is a lone `$`, never both: no two ways to read one character.
ASSIGNMENT = re.compile(
    r"(?:^|[\s;&|(])([A-Za-z_][A-Za-z0-9_]*)="
    rf"(\"(?:{SUBSTITUTION}|\$(?!\()|[^\"\\$`]|\\.)*\"|'[^']*'|(?:{SUBSTITUTION}|[^\s;&|()`])+)"
)
ENTROPY_LIMIT = 4.5  # detect-secrets' default for Base64HighEntropyString
ENTROPY_LENGTH = 20


def in_variable(name: str, value: object) -> str | None:
    """What makes NAME: VALUE a secret in plain text (`NAME holds a GitHub token`), or None."""
    if value is None or isinstance(value, bool | int | float):
        return None
    text = str(value).strip().strip("'\"")
    if not text or NOT_A_SECRET.fullmatch(text):
        return None
    kind = credential(f"{name}={text}", SHAPES) or _detected(text) or _high_entropy(text, f"{name}={text}")
    if kind:
        return f"{name} holds {kind}"
    if _named_like_a_secret(name):
        return f"{name} looks like a secret"
    return None


def in_text(text: str) -> str | None:
    """What secret a command or other string holds in plain text, or None."""
    kind = credential(text, SHAPES) or _detected(text)
    if kind:
        return kind
    quoted = _library().entropy.analyze_string(text)
    kind = next((found for value in quoted if (found := _high_entropy(value, text))), None)
    if kind:
        return kind
    return next(
        (found for name, value in ASSIGNMENT.findall(text) if (found := in_variable(name, value))), None
    )


def _named_like_a_secret(name: str) -> bool:
    return (
        name.upper() not in SHELL_NAMES
        and SECRET_WORD.search(name) is not None
        and ABOUT_A_SECRET.search(name) is None
    )


def _detected(text: str) -> str | None:
    """The secret type of the first detect-secrets plugin that finds one in `text`."""
    found = (d for d in _library().detectors if any(True for _ in d.analyze_string(text)))
    return next((f"a {d.secret_type}" for d in found), None)


def _high_entropy(value: str, line: str) -> str | None:
    """`a high-entropy value` when `value` is one word of base64 characters, random enough."""
    library = _library()
    if len(value) < ENTROPY_LENGTH or not all(c in library.entropy.charset for c in value):
        return None
    if any(unlikely(value, line) for unlikely in library.filters):
        return None
    return (
        "a high-entropy value" if library.entropy.calculate_shannon_entropy(value) > ENTROPY_LIMIT else None
    )


@dataclass(frozen=True, kw_only=True)
class _Library:
    """What lint takes from detect-secrets."""

    # Its regex plugins that need no keyword beside the value (those are SECRET_WORD's).
    detectors: tuple[RegexBasedDetector, ...]
    entropy: Base64HighEntropyString
    # Its heuristic filters, as (value, line) -> the value is no secret.
    filters: tuple[Callable[[str, str], bool], ...]


@cache
def _library() -> _Library:
    """detect-secrets, imported when a buildspec is first scanned (it comes with the aws extra)."""
    try:
        from detect_secrets.filters import heuristic  # noqa: PLC0415
        from detect_secrets.plugins import (  # noqa: PLC0415
            artifactory,
            azure_storage_key,
            discord,
            high_entropy_strings,
            jwt,
            mailchimp,
            openai,
            private_key,
            pypi_token,
            sendgrid,
            square_oauth,
            stripe,
            telegram_token,
            twilio,
        )
    except ImportError:
        raise EnvironmentProblem(
            "codebuild lint: detect-secrets is not installed (it finds secrets by value); "
            "fix: pip install 'epstack[aws]' (make .venv/bin/epstack EXTRAS=aws)"
        ) from None
    return _Library(
        detectors=(
            private_key.PrivateKeyDetector(),
            jwt.JwtTokenDetector(),
            artifactory.ArtifactoryDetector(),
            azure_storage_key.AzureStorageKeyDetector(),
            discord.DiscordBotTokenDetector(),
            mailchimp.MailchimpDetector(),
            openai.OpenAIDetector(),
            pypi_token.PypiTokenDetector(),
            sendgrid.SendGridDetector(),
            square_oauth.SquareOAuthDetector(),
            stripe.StripeDetector(),
            telegram_token.TelegramBotTokenDetector(),
            twilio.TwilioKeyDetector(),
        ),
        entropy=high_entropy_strings.Base64HighEntropyString(limit=ENTROPY_LIMIT),
        filters=(
            lambda value, _: heuristic.is_potential_uuid(value),
            lambda value, _: heuristic.is_sequential_string(value),
            lambda value, _: heuristic.is_templated_secret(value),
            lambda value, _: heuristic.is_prefixed_with_dollar_sign(value),
            heuristic.is_likely_id_string,
        ),
    )
