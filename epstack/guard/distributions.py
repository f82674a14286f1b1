"""Python distributions: each pinned one at its pin, what they require, and the whole venv against
the locks of its layer."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from epstack.checkrow import Check, Verdict
from epstack.deepepmanifest import manifest_path
from epstack.guard.expected import Expected
from epstack.python import closure
from epstack.python.distinfo import broken, find, requirements


def same_release(found: str, pinned: str) -> bool:
    """The same public version (a local tag such as +cu130 ignored)."""
    try:
        return Version(found).public == Version(pinned).public
    except InvalidVersion:
        return False


def check_distribution(name: str, pinned: str) -> Check:
    """The installed distribution's version (local tag ignored) equals the pin."""
    dist = find(name)
    if dist is None:
        return Check(component=name, expected=pinned, found="not installed", verdict="missing")
    if dist.problem:
        return broken(name, pinned, dist)
    verdict: Verdict = "ok" if same_release(dist.version, pinned) else "mismatch"
    return Check(component=name, expected=pinned, found=dist.version, verdict=verdict)


_NVSHMEM_VERSION = re.compile(r"#define NVSHMEM_VENDOR_(MAJOR|MINOR|PATCH)_VERSION (\d+)")


def check_nvshmem_headers(pinned: str, header: Path | None) -> Check:
    """The NVSHMEM that DeepEP compiles and links against (headers and libnvshmem_device.a come
    together) is the pinned one, whatever the wheel's metadata says."""
    component = "NVSHMEM (headers)"
    if header is None or not header.is_file():
        return Check(component=component, expected=pinned, found="no nvshmem_version.h", verdict="missing")
    parts = dict(_NVSHMEM_VERSION.findall(header.read_text(errors="replace")))
    found = ".".join(parts.get(k, "?") for k in ("MAJOR", "MINOR", "PATCH"))
    verdict: Verdict = "ok" if same_release(found, pinned) else "mismatch"
    return Check(component=component, expected=pinned, found=found, verdict=verdict, detail=str(header))


def _cuda_of_tag(tag: str) -> str:
    """cu130 -> 13.0"""
    return f"{tag[2:-1]}.{tag[-1]}"


def check_torch_cuda(pins: Expected, torch: ModuleType | None, import_error: str) -> Check:
    """torch's local tag (+cu130) if any; PyPI's default wheel has none, so then torch.version.cuda."""
    expected = f"{pins.torch_cuda_tag} (CUDA {_cuda_of_tag(pins.torch_cuda_tag)})"
    dist = find("torch")
    if dist is None:
        return Check(
            component="torch CUDA", expected=expected, found="torch not installed", verdict="missing"
        )
    if dist.problem:
        return broken("torch CUDA", expected, dist)
    local = Version(dist.version).local
    if local:
        verdict: Verdict = "ok" if local == pins.torch_cuda_tag else "mismatch"
        return Check(component="torch CUDA", expected=expected, found=local, verdict=verdict)
    if torch is None:
        return Check(
            component="torch CUDA",
            expected=expected,
            found="unknown",
            verdict="mismatch",
            detail=f"no local tag and import torch failed: {import_error}",
        )
    cuda = torch.version.cuda
    found = f"CUDA {cuda}" if cuda else "CPU build"
    verdict = (
        "ok"
        if cuda and ".".join(str(cuda).split(".")[:2]) == _cuda_of_tag(pins.torch_cuda_tag)
        else "mismatch"
    )
    return Check(
        component="torch CUDA", expected=expected, found=found, verdict=verdict, detail="torch.version.cuda"
    )


def check_requirements(owner: str, pinned: Mapping[str, str]) -> list[Check]:
    """An installed package's requirements on pinned packages; "override (pinned)" where the pin differs."""
    parsed, malformed = requirements(owner)
    rows = [
        Check(
            component=f"{owner} requires ?",
            expected="a valid Requires-Dist",
            found="malformed",
            verdict="mismatch",
            detail=f"{owner}'s metadata: {line}",
        )
        for line in malformed
    ]
    for requirement in parsed:
        name = canonicalize_name(requirement.name)
        if name not in pinned or not _applies(requirement):
            continue
        agrees = requirement.specifier.contains(pinned[name], prereleases=True)
        rows.append(
            Check(
                component=f"{owner} requires {name}",
                expected=f"{pinned[name]} (pinned)",
                found=f"{requirement.specifier}" or "any",
                verdict="ok" if agrees else "override (pinned)",
                detail="" if agrees else f"pins.env installs {name} {pinned[name]} on purpose",
            )
        )
    return rows


def _applies(requirement: Requirement) -> bool:
    """The requirement's marker holds here (no extra asked for: packaging's "metadata" context evaluates
    `extra` as ""); an unevaluable marker counts as holding."""
    if requirement.marker is None:
        return True
    try:
        return requirement.marker.evaluate()
    except Exception:  # packaging raises several kinds for markers it cannot evaluate
        return True


_DISTRIBUTION_VERDICT: dict[closure.Verdict, Verdict] = {
    "ok": "ok",
    "missing": "missing",
    "extra": "extra",
    "other version": "mismatch",
}
_GROUPS: tuple[closure.Verdict, ...] = ("missing", "extra", "other version")


def check_closure(distributions: list[closure.Distribution], files: list[str]) -> list[Check]:
    """A summary row, then one row per distribution that is missing, extra or at another version,
    grouped in that order (an image of 200 distributions does not print 200 ok rows)."""
    failing = {group: [d for d in distributions if d.verdict == group] for group in _GROUPS}
    locked = sum(1 for d in distributions if d.locked)
    present = sum(1 for d in distributions if d.installed)
    counts = ", ".join(f"{len(rows)} {group}" for group, rows in failing.items() if rows)
    sources = ", ".join(Path(file).name for file in files)
    rows = [
        Check(
            component="Python distributions",
            expected=f"{locked} locked",
            found=f"{present} installed",
            verdict="mismatch" if counts else "ok",
            detail=f"{counts} (rows below; all in --json); {sources}" if counts else f"exactly {sources}",
        )
    ]
    for group in _GROUPS:
        rows += [
            Check(
                component=d.name,
                expected=d.locked or "in no lock",
                found=d.installed or "not installed",
                verdict=_DISTRIBUTION_VERDICT[group],
                detail=d.source,
            )
            for d in failing[group]
        ]
    return rows


def closure_report(layer: str, locks: Path) -> tuple[list[Check], list[closure.Distribution]]:
    """The venv's distributions against the locks of `layer` (and the deep_ep manifest above base)."""
    manifest = manifest_path()
    want, files = closure.expected(layer, locks, manifest)
    distributions = closure.compare(want, closure.installed(closure.venv_paths()))
    return check_closure(distributions, files), distributions
