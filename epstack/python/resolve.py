"""Resolve Python requirements the way the images install them: uv, for the image's Python and platform.

One home for uv's flags: `pins predict` and `epstack pins lock` resolve with RESOLVE_FLAGS here, and every
image installs its locks with INSTALL_FLAGS (rendered into the Dockerfiles), so a resolution that
succeeds is an install that succeeds: wheels only on both sides, every distribution pinned with its
hashes, nothing resolved again at build time. uv runs with no user or system configuration and only
the environment that says where the index is and how to reach it.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from epstack.cmd import run
from epstack.errors import CommandFailed, EnvironmentProblem
from epstack.stack import ImageTarget

TIMEOUT_S = 180
# Every resolution: hashes for the lock, and wheels only (an sdist would run a build backend, with
# build requirements of its own, in the middle of an image build).
RESOLVE_FLAGS = ("--generate-hashes", "--no-build")
# Every install of a lock in an image: each distribution pinned with hashes, none of its requirements
# resolved again, and wheels only, as resolved.
INSTALL_FLAGS = ("--require-hashes", "--no-deps", "--no-build")
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
_PINNED = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s\\]+)\s*\\?\s*(?:#\s*via\s+(?P<via>.*))?$"
)
_HASH = re.compile(r"^--hash=(?P<hash>\S+?)\s*\\?$")
_VIA = re.compile(r"^#\s*via\s+(?P<via>.*)$")


@dataclass(frozen=True, kw_only=True)
class Pinned:
    """One distribution of a resolution, and the distributions that require it."""

    name: str  # canonical
    version: str
    via: tuple[str, ...]  # canonical names of its requirers; empty for a direct requirement
    hashes: tuple[str, ...] = ()  # sha256:<hex> of every file of this version (--generate-hashes)

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True, kw_only=True)
class Resolution:
    packages: tuple[Pinned, ...]
    text: str = ""  # uv's output as written (a requirements file with hashes)

    def version(self, name: str) -> str | None:
        canonical = canonicalize_name(name)
        return next((p.version for p in self.packages if p.name == canonical), None)

    @property
    def versions(self) -> dict[str, str]:
        return {p.name: p.version for p in self.packages}


class Unresolvable(CommandFailed):
    """The requirements cannot hold together; the message is uv's own explanation."""


def uv_bin() -> str:
    """The uv epstack depends on (pinned in pyproject.toml to the images' UV_VERSION)."""
    from uv import find_uv_bin  # noqa: PLC0415  (a binary lookup, only when a resolution is asked for)

    return find_uv_bin()


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_") or k in _UV_ENV_KEPT}
    env["UV_NO_CONFIG"] = "1"
    # Wheels only: no build needs an interpreter of the image's Python, so uv must not fetch one (where
    # GitHub is unreachable, each attempt cost 6-7 s of every resolution).
    env["UV_PYTHON_DOWNLOADS"] = "never"
    return env


def _requirers(via: str | None) -> tuple[str, ...]:
    names = [v.strip() for v in (via or "").split(",")]
    return tuple(canonicalize_name(v) for v in names if v and not v.startswith("-"))


@dataclass(kw_only=True)
class _Row:
    """A pin being read: its --hash and `# via` lines follow it."""

    name: str
    version: str
    via: tuple[str, ...]
    hashes: list[str] = field(default_factory=list)


def parse_compiled(text: str) -> Resolution:
    """`uv pip compile --annotation-style line` output, with or without --generate-hashes (then each
    pin is followed by its --hash lines and a `# via` line) -> the pinned distributions."""
    rows: list[_Row] = []
    for line in text.splitlines():
        stripped = line.strip()
        indented = line[:1].isspace()
        pinned = None if indented else _PINNED.match(stripped)
        if pinned:
            rows.append(_Row(name=pinned["name"], version=pinned["version"], via=_requirers(pinned["via"])))
        elif rows and (hashed := _HASH.match(stripped)):
            rows[-1].hashes.append(hashed["hash"])
        elif rows and indented and (via := _VIA.match(stripped)):
            rows[-1].via = _requirers(via["via"])
    packages = tuple(
        Pinned(name=canonicalize_name(row.name), version=row.version, via=row.via, hashes=tuple(row.hashes))
        for row in rows
    )
    return Resolution(packages=packages, text=text)


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
    preferences: str = "",
    upgrade: Sequence[str] = (),
    name: str = "requirements",
    offline: bool = False,
    timeout: float = TIMEOUT_S,
    workdir: Path | None = None,
) -> Resolution:
    """Resolve `requirements` for `target`; Unresolvable with uv's reason, EnvironmentProblem offline.

    `preferences`: a previous output (a lock); uv keeps its versions wherever they still hold, except
    for the `upgrade` packages (NAME or NAME==VERSION). The input files are named after `name`
    (`-r NAME.in`), as the `# via` lines of the output say. `offline`: from uv's cache alone (what it
    lacks is Unresolvable). `workdir`: where uv's files are made (default TMPDIR)."""
    files: Mapping[str, Sequence[str]] = {
        f"{name}.in": requirements,
        "constraints.txt": constraints,
        "overrides.txt": overrides,
        "excludes.txt": excludes,
    }
    flags = {"constraints.txt": "--constraint", "overrides.txt": "--override", "excludes.txt": "--excludes"}
    with tempfile.TemporaryDirectory(prefix="epstack-resolve-", dir=workdir) as tmp:
        argv: list[str | Path] = [uv_bin(), "pip", "compile", "--quiet", "--no-header",
                                  "--annotation-style", "line", "--python-version", target.python_version,
                                  "--python-platform", target.platform, *RESOLVE_FLAGS]  # fmt: skip
        for filename, lines in files.items():
            if lines or filename == f"{name}.in":
                (Path(tmp) / filename).write_text("".join(f"{line}\n" for line in lines))
                argv += [filename] if filename == f"{name}.in" else [flags[filename], filename]
        for package in upgrade:
            argv += ["--upgrade-package", package]
        argv += ["--offline"] if offline else []
        output = Path(tmp) / f"{name}.txt"
        output.write_text(preferences)
        argv += ["--output-file", output.name]
        result = run(*argv, env=_environment(), cwd=Path(tmp), timeout=timeout, own_group=True)
        text = output.read_text() if result.returncode == 0 else ""
    if result.returncode == 0:
        return parse_compiled(text)
    if _OFFLINE.search(result.stderr):
        raise EnvironmentProblem(f"cannot reach the package index: {explanation(result.stderr)}")
    if "No solution found" in result.stderr:
        raise Unresolvable(explanation(result.stderr))
    raise CommandFailed(f"uv could not resolve {', '.join(requirements)}: {explanation(result.stderr)}")


def check_installable(
    lock_text: str, target: ImageTarget, *, timeout: float = TIMEOUT_S, workdir: Path | None = None
) -> None:
    """`uv pip install --dry-run` of a lock with the images' INSTALL_FLAGS, for `target`, into an empty
    folder (in `workdir`, default TMPDIR): every entry has hashes and a wheel for the image.
    CommandFailed with uv's reason if not."""
    with tempfile.TemporaryDirectory(prefix="epstack-install-", dir=workdir) as tmp:
        lock = Path(tmp) / "lock.txt"
        lock.write_text(lock_text)
        result = run(uv_bin(), "pip", "install", "--dry-run", "--quiet", *INSTALL_FLAGS,
                     "--python-version", target.python_version, "--python-platform", target.platform,
                     "--target", Path(tmp) / "target", "--requirement", lock,
                     env=_environment(), timeout=timeout, own_group=True)  # fmt: skip
    if result.returncode != 0:
        raise CommandFailed(f"the images could not install this lock: {explanation(result.stderr)}")
