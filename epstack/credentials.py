"""Credential shapes, written once: what no pin may hold (epstack.pins.values) and no buildspec may
carry in plain text (epstack.aws.secretscan, which adds detect-secrets' other plugins and entropy).
They follow detect-secrets' plugins (github_token.py, gitlab_token.py, aws.py, slack.py,
basic_auth.py) and the formats GitHub ("Behind GitHub's new authentication token formats", 2021),
GitLab (token prefixes), npm (`npm_` access tokens), Docker Hub (`dckr_pat_` personal and `dckr_oat_`
organization access tokens), Hugging Face (`hf_` user access tokens), Slack (tokens, incoming
webhooks), AWS (IAM unique ID prefixes; a secret access key is 40 characters of base64) and RFC 6750
(Bearer) publish. A reference to a variable (`Bearer $TOKEN`, `user:$PASS@host`) is no credential.
Standard library only: pins are read inside the images, which carry no detect-secrets."""

from __future__ import annotations

import re
from collections.abc import Iterable

Shape = tuple[re.Pattern[str], str]

TOKENS: tuple[Shape, ...] = (
    (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9_]{30,}|github_pat_[A-Za-z0-9_]{22,})"), "a GitHub token"),
    (re.compile(r"\bgl(?:pat|dt|ft|soat|rt|ptt)-[A-Za-z0-9_-]{20,}"), "a GitLab token"),
    (re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), "an npm token"),
    (re.compile(r"\bdckr_(?:pat|oat)_[A-Za-z0-9_-]{20,}"), "a Docker Hub access token"),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), "a Hugging Face token"),
    (re.compile(r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"), "an AWS access key ID"),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), "a Slack token"),
    (
        re.compile(r"\bhooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_]+/"),
        "a Slack webhook URL",
    ),
    (re.compile(r"\bBearer\s+(?!\$)\S", re.IGNORECASE), "a bearer token"),
)
# user:password@ or token@ before a URL's host. A scheme of at most 32 characters (every registered one
# is shorter): an unbounded one made a search of a 100 KB value quadratic (30 s).
URL_USERINFO: Shape = (re.compile(r"[A-Za-z][\w+.-]{0,31}://[^/?#@\s]*@"), "a user or token in a URL")
# user:password@ with a literal password (`git@` or `user:$PASS@` is none).
URL_PASSWORD: Shape = (
    re.compile(r"[A-Za-z][\w+.-]{0,31}://[^/?#@\s:]+:(?!\$)[^/?#@\s]+@"),
    "a password in a URL",
)
# A secret access key beside the name that says so (detect-secrets' aws.py, without its quotes):
# AWS_SECRET_ACCESS_KEY=..., aws_secret_access_key ..., "awsSecretKey": "...".
AWS_SECRET_KEY: Shape = (
    re.compile(
        r"aws.{0,20}?(?:secret|key|pass|token).{0,20}?[\s=:'\"]+([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        re.IGNORECASE,
    ),
    "an AWS secret access key",
)


def credential(text: str, shapes: Iterable[Shape] = (URL_USERINFO, *TOKENS)) -> str | None:
    """The kind of the first credential `text` holds, or None; never the credential itself."""
    return next((kind for pattern, kind in shapes if pattern.search(text)), None)
