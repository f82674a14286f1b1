"""Credential shapes, written once: what no pin may hold (epstack.pins.values) and no buildspec may
carry in plain text (epstack.aws.lint). They follow detect-secrets' plugins (github_token.py,
gitlab_token.py, aws.py, slack.py) and the formats GitHub ("Behind GitHub's new authentication token
formats", 2021), GitLab (token prefixes), AWS (IAM unique ID prefixes) and RFC 6750 (Bearer) publish.
A reference to a variable (`Bearer $TOKEN`) is no credential. Standard library only."""

from __future__ import annotations

import re
from collections.abc import Iterable

Shape = tuple[re.Pattern[str], str]

TOKENS: tuple[Shape, ...] = (
    (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9_]{30,}|github_pat_[A-Za-z0-9_]{22,})"), "a GitHub token"),
    (re.compile(r"\bglpat-[A-Za-z0-9_-]{20}"), "a GitLab token"),
    (re.compile(r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"), "an AWS access key ID"),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), "a Slack token"),
    (re.compile(r"\bBearer\s+(?!\$)\S", re.IGNORECASE), "a bearer token"),
)
# user:password@ or token@ before a URL's host.
URL_USERINFO: Shape = (re.compile(r"[A-Za-z][\w+.-]*://[^/?#@\s]*@"), "a user or token in a URL")


def credential(text: str, shapes: Iterable[Shape] = (URL_USERINFO, *TOKENS)) -> str | None:
    """The kind of the first credential `text` holds, or None; never the credential itself."""
    return next((kind for pattern, kind in shapes if pattern.search(text)), None)
