"""Groups: pins bumped and checked as one (`epstack pins bump --group NAME`), the one home of which
pins move together.

An index group's first key leads: its newer releases are tried newest first (at most `candidates`),
each resolved by uv for the image with the pins outside the group held at their pinned versions and
the CUDA release wheels at the pinned minor (as `pins outdated` asks), the other keys of the group
left free. The first that resolves is proposed with the versions uv chose for the others, where those
are newer than their pins (a group never moves a pin down: the images install NCCL over torch's own
pin). A held NCCL goes through the base lock's override, as the images install it, and the nccl
group's candidates must first pass the pins rules against the NCCL torch requires itself
(outdated.resolve_held, nccl_refused). An image group proposes the digest each pinned tag points at
now. `pins bump` then checks the proposal as any other: every pins rule (epstack.pins.rules; a
violation names the pin that must move too), the relock, `pins predict` and the render.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial

from packaging.utils import canonicalize_name
from packaging.version import Version

from epstack.bump.outdated import NCCL_KEY, nccl_refused, resolve_held
from epstack.bump.upstream import IMAGE_KEYS
from epstack.errors import BadInput, EnvironmentProblem, EpstackError
from epstack.pins.model import Pins
from epstack.python.lock import Resolver, torch_nccl
from epstack.python.releases import index_pins, releases
from epstack.suggest import did_you_mean


@dataclass(frozen=True, kw_only=True)
class Group:
    name: str
    keys: tuple[str, ...]  # an index group: the first leads, the others follow what it resolves with
    why: str


GROUPS: tuple[Group, ...] = (
    Group(
        name="sglang",
        keys=("SGLANG_VERSION", "TORCH_VERSION", "NCCL_VERSION", "NVSHMEM_VERSION"),
        why="SGLang requires one torch exactly, and torch its NCCL and NVSHMEM wheels",
    ),
    Group(
        name="torch",
        keys=("TORCH_VERSION", "NCCL_VERSION", "NVSHMEM_VERSION"),
        why="torch requires NCCL and NVSHMEM wheels of its CUDA major; the CUDA wheels follow in the locks",
    ),
    Group(
        name="nccl",
        keys=("NCCL_VERSION",),
        why="installed over the NCCL torch requires itself, the base lock's override: the newest the "
        "pins rules allow, the other pins held",
    ),
    Group(
        name="cuda-base",
        keys=IMAGE_KEYS,
        why="the devel and runtime images of one CUDA release, pinned by digest",
    ),
)


def group_named(name: str) -> Group:
    """The group `name`; BadInput with the near miss for another name."""
    names = [group.name for group in GROUPS]
    if name not in names:
        hint = did_you_mean(name, names) or f"name one of {', '.join(names)}"
        raise BadInput(f"--group {name}: no such group; fix: {hint}")
    return next(group for group in GROUPS if group.name == name)


Digests = Callable[[str, str], str]  # (key, pinned image reference) -> it with the digest its tag has now


def propose(
    group: Group, pins: Pins, *, index: str, resolver: Resolver, digests: Digests, candidates: int
) -> dict[str, str]:
    """The group's new values, only those that differ from the pins ({}: nothing to bump)."""
    env = pins.as_env()
    if group.keys[0] in IMAGE_KEYS:
        proposed = {key: digests(key, env[key]) for key in group.keys}
        return {key: value for key, value in proposed.items() if value != env[key]}
    return _index_group(group, pins, index=index, resolver=resolver, candidates=candidates)


def _index_group(
    group: Group, pins: Pins, *, index: str, resolver: Resolver, candidates: int
) -> dict[str, str]:
    env, distributions = pins.as_env(), index_pins(pins)
    leader = group.keys[0]
    held = {key: env[key] for key in distributions if key not in group.keys}
    own = cache(partial(torch_nccl, pins, resolver))
    try:
        listed = releases(distributions[leader], index=index)
    except EnvironmentProblem as exc:
        raise EnvironmentProblem(
            f"--group {group.name}: {exc}; fix: run where the package index answers, or point "
            "UV_DEFAULT_INDEX at a mirror of it"
        ) from None
    newer = [v for v in listed if Version(v) > Version(env[leader])]
    reasons = []
    for version in newer[:candidates]:
        refused = nccl_refused(pins, version, own()) if leader == NCCL_KEY else None
        answer = refused or resolve_held(pins, held | {leader: version}, resolver)
        if isinstance(answer, str):
            reasons.append(f"{version}: {answer}")
            continue
        chosen = {package.name: package.version for package in answer.packages}
        proposed = {leader: version}
        for key in group.keys[1:]:
            found = chosen.get(canonicalize_name(distributions[key]))
            if found and Version(found) > Version(env[key]):
                proposed[key] = found
        return proposed
    if not newer:
        return {}
    outside = ", ".join(key for key in distributions if key not in group.keys)
    wider = [other.name for other in GROUPS if set(group.keys) < set(other.keys)]
    fix = f"--group {wider[0]}, which moves more pins with it" if wider else "give the pin it needs too"
    raise EpstackError(
        f"--group {group.name}: none of the {len(reasons)} newer {distributions[leader]} tried resolves with "
        f"{outside} held ({reasons[0]}); fix: {fix}"
    )
