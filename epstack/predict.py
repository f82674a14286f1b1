"""`epstack pins predict`: ask pip's resolver, before any build, what installing SGLang would move.

pip resolves `sglang==SGLANG_VERSION` unconstrained, for the image's platform (manylinux x86_64,
CPython PYTHON_VERSION), and writes an installation report; every pinned package it would install
at another version is printed with the requirement that forces it, and so is any distribution that
would bring its own deep_ep over the one the DeepEP layer built from DEEPEP_REF.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from rich.console import Console

from epstack.errors import CommandFailed, EnvironmentProblem
from epstack.pins import Pins, load_pins, pins_path

TIMEOUT_S = 120
# Ubuntu 24.04 has glibc 2.39: every manylinux tag up to it installs (sglang ships manylinux_2_34).
PLATFORMS = (*(f"manylinux_2_{minor}_x86_64" for minor in range(39, 16, -1)), "manylinux2014_x86_64")
# Distributions known to install a top-level deep_ep package (PROTECTED_PACKAGES in render.py).
DEEP_EP_PROVIDERS = frozenset({"sgl-deep-ep", "deep-ep"})
# Environment kept for pip: where the index is and how to reach it. Everything else (config files,
# PIP_CONSTRAINT, PIP_FIND_LINKS, ...) is dropped: a machine's own constraints or local wheels (this
# CI machine's /etc/xdg/pip/pip.conf caps torch<=2.14.1) would distort the prediction.
_PIP_ENV_KEPT = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CERT", "PIP_CLIENT_CERT", "PIP_TRUSTED_HOST",
                 "PIP_PROXY", "PIP_CACHE_DIR")  # fmt: skip
_OFFLINE = re.compile(
    r"(from versions: none|NewConnectionError|Max retries exceeded|Temporary failure in name resolution"
    r"|Name or service not known|Network is unreachable|ProxyError|SSLError|Read timed out)"
)


@dataclass(frozen=True, kw_only=True)
class Resolved:
    """One distribution pip would install."""

    name: str  # canonical
    version: str
    requires: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Move:
    package: str
    pinned: str
    resolved: str
    forced_by: tuple[str, ...]  # "sglang==0.5.23: torch==2.14.1"

    def __str__(self) -> str:
        return f"{self.package} {self.pinned} -> {self.resolved} (required by {'; '.join(self.forced_by)})"


@dataclass(frozen=True, kw_only=True)
class Prediction:
    requested: str
    installs: int
    moves: tuple[Move, ...]
    deep_ep: tuple[Move, ...]  # distributions that would install their own deep_ep; pinned is DEEPEP_REF

    @property
    def drifts(self) -> bool:
        return bool(self.moves or self.deep_ep)


def target_environment(python_version: str) -> dict[str, str]:
    """Marker environment of the image. Not the report's "environment": pip writes the host's there."""
    return {
        "python_version": python_version,
        "python_full_version": f"{python_version}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "extra": "",
    }


def parse_report(report: Mapping[str, Any]) -> tuple[Resolved, ...]:
    """pip's installation report (version 1) -> what it would install."""
    if str(report.get("version")) != "1" or not isinstance(report.get("install"), list):
        raise CommandFailed(
            f"pip wrote an installation report epstack cannot read (version {report.get('version')})"
        )
    return tuple(
        Resolved(
            name=canonicalize_name(item["metadata"]["name"]),
            version=item["metadata"]["version"],
            requires=tuple(item["metadata"].get("requires_dist", ())),
        )
        for item in report["install"]
    )


def _requirements_on(
    package: str, pinned: str, resolved: tuple[Resolved, ...], environment: Mapping[str, str]
) -> tuple[str, ...]:
    """Who requires `package`: those whose specifier excludes the pinned version, else every requirer."""
    requirers: list[tuple[bool, str]] = []
    for item in resolved:
        for line in item.requires:
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                continue
            if canonicalize_name(requirement.name) != package:
                continue
            if requirement.marker and not requirement.marker.evaluate(dict(environment)):
                continue
            excludes = not requirement.specifier.contains(pinned, prereleases=True)
            spelled = f"{requirement.name}{requirement.specifier}"
            requirers.append((excludes, f"{item.name}=={item.version}: {spelled}"))
    forcing = tuple(text for excludes, text in requirers if excludes)
    return forcing or tuple(text for _, text in requirers)


def predict(pins: Pins, report: Mapping[str, Any]) -> Prediction:
    """Compare pip's resolution with the pins."""
    resolved, environment = parse_report(report), target_environment(pins.python_version)
    by_name = {item.name: item for item in resolved}
    pinned = {"torch": pins.torch_version, "nvidia-nccl-cu13": pins.nccl_version,
              "nvidia-nvshmem-cu13": pins.nvshmem_version}  # fmt: skip
    moves = tuple(
        Move(
            package=name,
            pinned=version,
            resolved=by_name[name].version,
            forced_by=_requirements_on(name, version, resolved, environment),
        )
        for name, version in pinned.items()
        if name in by_name and Version(by_name[name].version).public != Version(version).public
    )
    deep_ep = tuple(
        Move(
            package=item.name,
            pinned=f"deep_ep@{pins.deepep_ref[:7]}",
            resolved=item.version,
            forced_by=_requirements_on(item.name, "0", resolved, environment),
        )
        for item in resolved
        if item.name in DEEP_EP_PROVIDERS
    )
    return Prediction(
        requested=f"sglang=={pins.sglang_version}", installs=len(resolved), moves=moves, deep_ep=deep_ep
    )


def resolve(requirement: str, python_version: str, *, timeout: int = TIMEOUT_S) -> dict[str, Any]:
    """`pip install --dry-run --report` for the image's platform, in a clean pip environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in _PIP_ENV_KEPT}
    env["PIP_CONFIG_FILE"] = os.devnull  # no pip.conf at all: no global constraints, find-links or caps
    with tempfile.TemporaryDirectory(prefix="epstack-predict-") as tmp:
        report = Path(tmp) / "report.json"
        # fast-deps: read each wheel's METADATA with HTTP range requests instead of downloading
        # it whole (the index here serves no PEP 658 metadata): 24 s instead of 32 s for SGLang.
        argv = [sys.executable, "-m", "pip", "install", "--use-feature=fast-deps",
                "--dry-run", "--ignore-installed", "--quiet",
                "--disable-pip-version-check", "--report", str(report), "--only-binary=:all:",
                *(f"--platform={platform}" for platform in PLATFORMS), f"--python-version={python_version}",
                "--implementation=cp", f"--target={Path(tmp) / 'target'}", "--timeout=15", "--retries=1",
                requirement]  # fmt: skip
        print("+ " + " ".join(argv), file=sys.stderr, flush=True)
        try:
            result = subprocess.run(
                argv, env=env, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise EnvironmentProblem(
                f"pip did not resolve {requirement} within {timeout} s; is the package index reachable?"
            ) from None
        if result.returncode != 0:
            errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR")] or [
                result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "no output"
            ]
            offline = _OFFLINE.search(result.stderr)
            if offline:
                raise EnvironmentProblem(f"cannot reach the package index: {offline.group(0)} ({errors[-1]})")
            raise CommandFailed(f"pip could not resolve {requirement}: {errors[0]}")
        data: dict[str, Any] = json.loads(report.read_text())
        return data


def cmd_pins_predict(args: argparse.Namespace, console: Console) -> int:
    path = pins_path(args.pins)
    pins = load_pins(path)
    prediction = predict(pins, resolve(f"sglang=={pins.sglang_version}", pins.python_version))
    console.print(f"pip would install {prediction.installs} distributions for {prediction.requested}")
    for move in prediction.moves:
        console.print(f"[red]{move}[/]")
    for provider in prediction.deep_ep:
        forced_by = "; ".join(provider.forced_by)
        console.print(
            f"[red]deep_ep: {provider.package} {provider.resolved} would install its own deep_ep over the "
            f"one built from DEEPEP_REF {pins.deepep_ref[:7]}[/] (required by {forced_by})"
        )
    if not prediction.drifts:
        console.print(f"[green]{path}: installing {prediction.requested} moves no pinned package[/]")
    return 1 if prediction.drifts else 0


def register(pins_subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `predict` under `epstack pins`."""
    parser = pins_subparsers.add_parser(
        "predict", help="ask pip what installing SGLang would move (needs the index)"
    )
    parser.add_argument("pins", nargs="?", type=Path, help="pins file (default $EPSTACK_PINS or ./pins.env)")
    parser.set_defaults(func=cmd_pins_predict)
