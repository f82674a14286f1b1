"""`epstack pins outdated`: for every pin, the pinned value, the newest upstream release and the newest
one that still resolves with the other pins held.

The pins on the package index (epstack.python.releases.index_pins) are listed from the index uv uses;
each newer release, newest first and at most `candidates` of them, is resolved by uv with every other
index pin required at its pinned version and the CUDA release wheels at the pinned minor, as the images
install them (what `pins predict` and `pins bump` would accept), until one resolves. The inverse
question gets a row of its own: the newest SGLang that keeps the pinned torch. The CUDA images come from
their registry (tags, and the digest the pinned tag points at now), DeepEP, fmt, GDRCopy and NCCL from
`git ls-remote`. A source that cannot be reached is a row that says so, with the command that would
check it; the others are asked all the same.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cache, partial
from pathlib import Path
from typing import Literal

from packaging.version import Version

from epstack.bump.upstream import (
    DOCKER_HUB_API,
    IMAGE_KEYS,
    ImageRepository,
    ls_remote,
    ls_remote_command,
    newest_image_tag,
    newest_release_tag,
)
from epstack.document import Schema
from epstack.errors import EnvironmentProblem, EpstackError
from epstack.oci import parse_reference
from epstack.pins.deepepsources import git_sources
from epstack.pins.model import Pins
from epstack.python.lock import (
    Resolver,
    cuda_release_constraints,
    lock_specs,
    nccl_override_problem,
    torch_nccl,
)
from epstack.python.releases import index_pins, list_command, releases
from epstack.python.resolve import Pinned, Resolution, Unresolvable, compile_requirements
from epstack.stack import other_cuda_major

NCCL_REPO = "https://github.com/NVIDIA/nccl.git"
NCCL_KEY = "NCCL_VERSION"  # the base lock's override: installed over the NCCL torch requires itself
RESOLVE_TIMEOUT_S = 120.0
Status = Literal["current", "newer", "held back", "moved", "unknown", "unreachable"]


@dataclass(frozen=True, kw_only=True)
class Refused:
    """A newer release that does not resolve with the other pins held, and uv's reason."""

    version: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class Row:
    key: str  # the pins.env key
    source: str  # where the answer comes from: "index sglang", "registry nvidia/cuda", "git <repo>"
    pinned: str
    status: Status
    newest: str = ""  # "" when the source could not say
    resolves: str = ""  # the newest that resolves with `held` held; "" where that is not asked
    held: str = ""  # the pins held while resolving
    refused: tuple[Refused, ...] = ()  # the newer ones tried that do not resolve, newest first
    note: str = ""
    check: str = ""  # the command that asks the same question (for an unreachable row)


@dataclass(frozen=True, kw_only=True)
class Outdated:
    pins: str
    index: str
    candidates: int  # newer releases resolved per pin, at most
    rows: tuple[Row, ...]
    sglang_bump: str  # the SGLang `pins bump` should try: the newest that resolves, else the newest; ""
    seconds: float

    @property
    def answered(self) -> bool:
        return any(row.status != "unreachable" for row in self.rows)


OUTDATED = Schema(
    name="pins-outdated",
    version=1,
    model=Outdated,
    what="a pins outdated report",
    fix="write it again with epstack pins outdated --json FILE",
)


@dataclass(frozen=True, kw_only=True)
class Sources:
    """Where `outdated` asks: the package index, Docker Hub's API, and how many releases it resolves."""

    index: str
    hub: str = DOCKER_HUB_API
    candidates: int = 8
    resolver: Resolver = compile_requirements


def outdated(pins: Pins, path: Path, sources: Sources) -> Outdated:
    """Every row; the registry and git rows are asked while uv resolves the index rows."""
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=4) as pool:
        upstream = [pool.submit(_image_row, pins, key, sources.hub) for key in IMAGE_KEYS]
        upstream += [pool.submit(ask) for ask in _git_questions(pins)]
        rows = _index_rows(pins, sources)
        rows += [future.result() for future in upstream]
    sglang = next(row for row in rows if row.key == "SGLANG_VERSION")
    bump = sglang.resolves if sglang.status == "newer" else sglang.newest
    return Outdated(
        pins=str(path),
        index=sources.index,
        candidates=sources.candidates,
        rows=tuple(rows),
        sglang_bump=bump if bump and Version(bump) > Version(pins.sglang_version) else "",
        seconds=round(time.monotonic() - start, 2),
    )


# ---- the package index -------------------------------------------------------------------------

Attempt = Callable[[str], "str | None"]  # a release -> None when it resolves, else uv's reason


def _index_rows(pins: Pins, sources: Sources) -> list[Row]:
    """One row per index pin, and after SGLang's the newest SGLang that keeps the pinned torch. NCCL's
    newer releases are the base lock's override: each must pass pins.rules against the NCCL torch
    requires itself (asked of uv once, where there is a newer NCCL to try)."""
    rows = []
    own = cache(partial(torch_nccl, pins, sources.resolver))
    for key, distribution in index_pins(pins).items():
        pinned, source = pins.as_env()[key], f"index {distribution}"
        try:
            listed = releases(distribution, index=sources.index)
        except EnvironmentProblem as exc:
            rows.append(
                Row(
                    key=key,
                    source=source,
                    pinned=pinned,
                    status="unreachable",
                    note=str(exc),
                    check=list_command(distribution, sources.index),
                )
            )
            continue
        held = ", ".join([*(k for k in index_pins(pins) if k != key), "CUDA_VERSION (minor)"])
        rows.append(
            _search(
                key=key,
                source=source,
                pinned=pinned,
                listed=listed,
                held=held,
                attempt=partial(_with_pins_held, pins, key, resolver=sources.resolver, own=own),
                limit=sources.candidates,
            )
        )
        if key == "SGLANG_VERSION" and listed:
            rows.append(
                _search(
                    key=key,
                    source=f"{source}, keeping torch",
                    pinned=pinned,
                    listed=listed,
                    held="TORCH_VERSION",
                    attempt=partial(_keeps_torch, pins, resolver=sources.resolver),
                    limit=sources.candidates,
                )
            )
    return rows


def _search(
    *, key: str, source: str, pinned: str, listed: Sequence[str], held: str, attempt: Attempt, limit: int
) -> Row:
    """The newest of `listed` newer than `pinned` that `attempt` accepts, trying at most `limit`."""
    row = Row(key=key, source=source, pinned=pinned, status="current", held=held)
    if not listed:
        return replace(row, status="unknown", note="the index lists no release of it")
    newer = [version for version in listed if Version(version) > Version(pinned)]
    if not newer:
        return replace(row, newest=listed[0], resolves=pinned)
    refused: list[Refused] = []
    for version in newer[:limit]:
        try:
            reason = attempt(version)
        except EpstackError as exc:
            return replace(
                row,
                status="unknown",
                newest=newer[0],
                refused=tuple(refused),
                note=f"could not resolve {version}: {exc}",
            )
        if reason is None:
            note = f"{refused[0].version}: {refused[0].reason}" if refused else ""
            return replace(
                row, status="newer", newest=newer[0], resolves=version, refused=tuple(refused), note=note
            )
        refused.append(Refused(version=version, reason=reason))
    if len(newer) > limit:
        return replace(
            row,
            status="unknown",
            newest=newer[0],
            refused=tuple(refused),
            note=f"none of the {limit} newest resolves; {len(newer) - limit} older releases "
            "newer than the pin not tried (--candidates)",
        )
    return replace(
        row,
        status="held back",
        newest=newer[0],
        resolves=pinned,
        refused=tuple(refused),
        note=f"{refused[0].version}: {refused[0].reason}",
    )


def resolve_for_image(
    pins: Pins,
    requirements: Sequence[str],
    constraints: Sequence[str],
    resolver: Resolver,
    overrides: Sequence[str] = (),
) -> Resolution | str:
    """What uv resolves `requirements` to for the image, what the images exclude excluded, when it
    brings no wheel of another CUDA major; else why not."""
    try:
        resolution = resolver(
            list(requirements),
            pins.image_target,
            constraints=constraints,
            overrides=overrides,
            excludes=lock_specs(pins)[-1].excludes,
            name="outdated",
            timeout=RESOLVE_TIMEOUT_S,
        )
    except Unresolvable as exc:
        return str(exc)
    foreign = [p.name for p in resolution.packages if other_cuda_major(p.name, pins.wheels.major)]
    return f"it brings {', '.join(foreign)}, not CUDA {pins.wheels.major}" if foreign else resolution


def resolve_held(pins: Pins, held: Mapping[str, str], resolver: Resolver) -> Resolution | str:
    """The index pins `held` (pins.env key -> version) resolved for the image as the images install
    them (resolve_for_image): NCCL_VERSION through the base lock's override of the NCCL torch requires
    itself, every other one required; the CUDA release wheels at the pinned minor."""
    distributions = index_pins(pins)
    requirements = [f"{distributions[key]}=={value}" for key, value in held.items() if key != NCCL_KEY]
    overrides = [f"{distributions[NCCL_KEY]}=={held[NCCL_KEY]}"] if NCCL_KEY in held else []
    return resolve_for_image(pins, requirements, cuda_release_constraints(pins), resolver, overrides)


def nccl_refused(pins: Pins, version: str, own: Pinned | None) -> str | None:
    """Why NCCL `version` may not replace torch's `own` NCCL (pins.rules.nccl_over_torch); None: it may."""
    problem = nccl_override_problem(pins.model_copy(update={"nccl_version": version}), own)
    return f"{problem[1]}; fix: {problem[2]}" if problem else None


def _resolves(
    pins: Pins, requirements: list[str], constraints: Sequence[str], resolver: Resolver
) -> str | None:
    """None when `requirements` resolve for the image (resolve_for_image); else why not."""
    answer = resolve_for_image(pins, requirements, constraints, resolver)
    return answer if isinstance(answer, str) else None


def _with_pins_held(
    pins: Pins, key: str, version: str, *, resolver: Resolver, own: Callable[[], Pinned | None]
) -> str | None:
    """Whether `key`=`version` resolves with every other index pin held at its pinned version; a newer
    NCCL must pass pins.rules against torch's `own` NCCL first."""
    refused = nccl_refused(pins, version, own()) if key == NCCL_KEY else None
    if refused:
        return refused
    held = {k: pins.as_env()[k] for k in index_pins(pins)} | {key: version}
    answer = resolve_held(pins, held, resolver)
    return answer if isinstance(answer, str) else None


def _keeps_torch(pins: Pins, version: str, *, resolver: Resolver) -> str | None:
    """Whether sglang==`version` installs with torch held at TORCH_VERSION."""
    return _resolves(pins, [f"sglang=={version}"], [f"torch=={pins.torch_version}"], resolver)


# ---- the registry ------------------------------------------------------------------------------


def _image_row(pins: Pins, key: str, hub: str) -> Row:
    """The newest tag of the pinned one's flavour and OS, the newest of the pinned CUDA minor, and
    whether the pinned tag still points at the pinned digest."""
    pinned = pins.as_env()[key]
    reference = parse_reference(pinned)
    repository = ImageRepository.of(reference.repository, hub=hub)
    row = Row(
        key=key,
        source=f"registry {reference.repository}",
        pinned=pinned,
        status="current",
        held=f"CUDA_VERSION {pins.cuda_major_minor}",
    )
    try:
        tags = repository.tags()
        digest = repository.digest(reference.tag)
    except EnvironmentProblem as exc:
        return replace(
            row,
            status="unreachable",
            held="",
            note=str(exc),
            check=f"docker buildx imagetools inspect {reference.repository}:{reference.tag}",
        )
    newest = newest_image_tag(tags, reference.tag) or ""
    resolves = newest_image_tag(tags, reference.tag, minor=pins.cuda_major_minor) or ""
    if digest != reference.digest:
        return replace(
            row,
            status="moved",
            newest=newest,
            resolves=resolves,
            note=f"{reference.tag} now points at {digest or 'nothing'}",
        )
    return replace(
        row,
        status="newer" if newest and newest != reference.tag else "current",
        newest=newest,
        resolves=resolves,
    )


# ---- git -----------------------------------------------------------------------------------------


def _git_questions(pins: Pins) -> list[Callable[[], Row]]:
    """DeepEP's default branch; fmt's, GDRCopy's and NCCL's newest release tags."""
    env = pins.as_env()
    deepep, fmt, gdrcopy = git_sources(env)
    return [
        lambda: _git_row(deepep.key, deepep.repo, deepep.commit, head=True, note="DeepEP's default branch"),
        lambda: _git_row(
            fmt.key,
            fmt.repo,
            fmt.commit,
            note="DeepEP's third-party/fmt submodule sets it: it follows DEEPEP_REF",
        ),
        lambda: _git_row(gdrcopy.key, gdrcopy.repo, gdrcopy.commit, label=env["GDRCOPY_VERSION"]),
        lambda: _git_row(
            "NCCL_VERSION",
            NCCL_REPO,
            "",
            label=env["NCCL_VERSION"],
            note=f"NCCL's source release; the images install the {pins.wheels.nccl} wheel",
        ),
    ]


def _git_row(key: str, repo: str, commit: str, *, head: bool = False, label: str = "", note: str = "") -> Row:
    """`commit` (or the release `label`) against the head of `repo` (`head`) or its newest release tag."""
    refs = ("HEAD",) if head else ("--tags",)
    pinned = f"{label} ({commit[:12]})" if label and commit else label or commit
    row = Row(key=key, source=f"git {repo}", pinned=pinned, status="current", note=note)
    try:
        found = ls_remote(repo, *refs)
    except EnvironmentProblem as exc:
        return replace(
            row, status="unreachable", note=str(exc), check=" ".join(ls_remote_command(repo, *refs))
        )
    newest = (found.get("HEAD", ""), "") if head else newest_release_tag(found)
    if newest is None or not newest[0]:
        return replace(row, status="unknown", note=f"{repo} lists no {'HEAD' if head else 'release tag'}")
    shown = newest[0] if head else f"{newest[0]} ({newest[1][:12]})"
    if head or commit:
        same = (newest[0] if head else newest[1]) == commit
    else:  # a release by its number only (NCCL): v2.30.7-1 is 2.30.7
        same = Version(newest[0].lstrip("v").split("-")[0]) <= Version(label)
    return replace(row, status="current" if same else "newer", newest=shown)
