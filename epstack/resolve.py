"""Resolve Python requirements the way the images install them: uv, for the image's Python and platform.

One home for the resolver's flags: `pins predict` (and the locks) call compile() here, so what resolves
here is what an image build can install. uv runs with no user or system configuration and only the
environment that says where the index is and how to reach it.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from epstack.cmd import run
from epstack.errors import CommandFailed, EnvironmentProblem
from epstack.stack import ImageTarget

TIMEOUT_S = 180
# How uv reaches the index; every other UV_* variable (UV_CONSTRAINT, UV_OVERRIDE, ...) would change
# the answer, so it is dropped.
_UV_ENV_KEPT = (
    *("UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_INDEX", "UV_CACHE_DIR", "UV_OFFLINE"),
    *("UV_HTTP_TIMEOUT", "UV_HTTP_RETRIES", "UV_NATIVE_TLS", "UV_INSECURE_HOST"),
)
_OFFLINE = re.compile(
    r"(Failed to fetch|error sending request|dns error|Connection refused|tcp connect error|"
    r"Network is unreachable|operation timed out|Could not connect)"
)
_PINNED = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)\s*(?:#\s*via\s+(?P<via>.*))?$")


@dataclass(frozen=True, kw_only=True)
class Pinned:
    """One distribution of a resolution, and the distributions that require it."""

    name: str  # canonical
    version: str
    via: tuple[str, ...]  # canonical names of its requirers; empty for a direct requirement


@dataclass(frozen=True, kw_only=True)
class Resolution:
    packages: tuple[Pinned, ...]

    def version(self, name: str) -> str | None:
        canonical = canonicalize_name(name)
        return next((p.version for p in self.packages if p.name == canonical), None)


class Unresolvable(CommandFailed):
    """The requirements cannot hold together; the message is uv's own explanation."""


def uv_bin() -> str:
    """The uv epstack depends on (pinned in pyproject.toml to the images' UV_VERSION)."""
    from uv import find_uv_bin  # noqa: PLC0415  (a binary lookup, only when a resolution is asked for)

    return find_uv_bin()


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_") or k in _UV_ENV_KEPT}
    env["UV_NO_CONFIG"] = "1"
    return env


def parse_compiled(text: str) -> Resolution:
    """`uv pip compile --annotation-style line` output -> the pinned distributions."""
    packages = []
    for line in text.splitlines():
        match = _PINNED.match(line.strip())
        if not match:
            continue
        via = [v.strip() for v in (match["via"] or "").split(",")]
        packages.append(
            Pinned(
                name=canonicalize_name(match["name"]),
                version=match["version"],
                via=tuple(canonicalize_name(v) for v in via if v and not v.startswith("-")),
            )
        )
    return Resolution(packages=tuple(packages))


def explanation(stderr: str) -> str:
    """uv's reason for a failed resolution, as one line ("Because sglang==0.5.23 depends on ...")."""
    text = " ".join(line.strip(" \u00d7\u2570\u2500\u25b6\u2502") for line in stderr.splitlines())
    text = re.sub(r"\s+", " ", text.replace("cause:", " ")).strip()
    _, found, reason = text.partition("Because ")
    return f"Because {reason}" if found else text


def compile_requirements(
    requirements: Sequence[str],
    target: ImageTarget,
    *,
    constraints: Sequence[str] = (),
    overrides: Sequence[str] = (),
    excludes: Sequence[str] = (),
    timeout: float = TIMEOUT_S,
) -> Resolution:
    """Resolve `requirements` for `target`; Unresolvable with uv's reason, EnvironmentProblem offline."""
    files: Mapping[str, Sequence[str]] = {
        "requirements.in": requirements,
        "--constraints": constraints,
        "--overrides": overrides,
        "--excludes": excludes,
    }
    with tempfile.TemporaryDirectory(prefix="epstack-resolve-") as tmp:
        argv: list[str | Path] = [uv_bin(), "pip", "compile", "--quiet", "--no-header",
                                  "--annotation-style", "line", "--python-version", target.python_version,
                                  "--python-platform", target.platform]  # fmt: skip
        for flag, lines in files.items():
            if not lines and flag != "requirements.in":
                continue
            path = Path(tmp) / flag.lstrip("-")
            path.write_text("".join(f"{line}\n" for line in lines))
            argv += [path] if flag == "requirements.in" else [flag, path]
        result = run(*argv, env=_environment(), timeout=timeout)
    if result.returncode == 0:
        return parse_compiled(result.stdout)
    offline = _OFFLINE.search(result.stderr)
    if offline:
        raise EnvironmentProblem(f"cannot reach the package index: {explanation(result.stderr)}")
    if "No solution found" in result.stderr:
        raise Unresolvable(explanation(result.stderr))
    raise CommandFailed(f"uv could not resolve {', '.join(requirements)}: {explanation(result.stderr)}")
