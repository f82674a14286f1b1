"""Would installing SGLang move a pinned package? Asked before any build (`epstack pins predict`).

uv, the images' installer, resolves `sglang==SGLANG_VERSION` unconstrained for the image's Python and
platform (epstack.python.resolve). Each base-layer package it would install at another version than pinned is
resolved again with its pin as a constraint: when that fails the pin cannot hold, and uv's explanation
names the requirement that forces the move. Distributions that would bring their own deep_ep over the
one built from DEEPEP_REF are named too. Then, against the committed locks: each lock the change makes
stale is resolved again as `epstack pins lock` would (nothing written), and every distribution that would
move is listed, before anything is built.

When every lock is fresh for the pins, the locks hold the answer: uv resolves SGLang offline, from its
cache, with the locks' versions as constraints. Where that holds, a plain install can keep every pin
(the locks are the proof) and the index is not asked; where it cannot (a cold cache, a conflict the
locks' overrides hid), the index is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from packaging.version import Version

from epstack.errors import EpstackError
from epstack.layers import TOP, venv_locks
from epstack.pins.model import Pins
from epstack.pins.rules import nccl_over_torch
from epstack.python.lock import LockRun, relock, stale_locks, torch_nccl
from epstack.python.lockfile import read_lock
from epstack.python.resolve import Resolution, Unresolvable, compile_requirements
from epstack.stack import DEEP_EP_PROVIDERS, ImageTarget

Resolver = Callable[..., Resolution]


@dataclass(frozen=True, kw_only=True)
class Move:
    """A pinned package the resolver would install at another version, and why."""

    package: str
    pinned: str
    resolved: str
    reason: str  # uv's explanation of why the pin cannot hold
    required_by: tuple[str, ...]  # name==version of every distribution that requires the package

    def __str__(self) -> str:
        return f"{self.package} {self.pinned} -> {self.resolved} ({self.reason})"


@dataclass(frozen=True, kw_only=True)
class Prediction:
    requested: str
    installs: int
    moves: tuple[Move, ...]
    deep_ep: tuple[Move, ...]  # distributions that would install their own deep_ep; pinned is DEEPEP_REF
    source: str = "the index"  # where the answer came from: the index, or the fresh locks
    # NCCL a plain install would put at torch's own pin, which the base lock's override replaces with
    # NCCL_VERSION where pins.rules.nccl_over_torch allows it: declared, so not a drift.
    overrides: tuple[Move, ...] = ()

    @property
    def drifts(self) -> bool:
        return bool(self.moves or self.deep_ep)


def _requirers(resolution: Resolution, name: str) -> tuple[str, ...]:
    package = next(p for p in resolution.packages if p.name == name)
    return tuple(f"{n}=={resolution.version(n)}" for n in package.via)


def _forced(requested: str, package: str, pinned: str, target: ImageTarget, resolver: Resolver) -> str | None:
    """uv's reason why `package==pinned` cannot hold next to `requested`; None when it can."""
    try:
        resolver([requested], target, constraints=[f"{package}=={pinned}"])
    except Unresolvable as exc:
        return str(exc)
    return None


def predict(pins: Pins, resolver: Resolver = compile_requirements) -> Prediction:
    """Resolve SGLang as a plain install would, and compare it with the pins. Resolutions run one after
    another: the index is the bottleneck here, and concurrent ones were slower (38 s against 25 s)."""
    requested, target = f"sglang=={pins.sglang_version}", pins.image_target
    resolution = resolver([requested], target)
    moves, overrides = [], []
    for package, pinned in pins.base_packages.items():
        resolved = resolution.version(package)
        if resolved is None or Version(resolved).public == Version(pinned).public:
            continue
        if package == pins.wheels.nccl and nccl_over_torch(pins, package, resolved) is None:
            overrides.append(_override(pins, resolved, _requirers(resolution, package)))
            continue
        reason = _forced(requested, package, pinned, target, resolver)
        if reason is not None:
            moves.append(
                Move(
                    package=package,
                    pinned=pinned,
                    resolved=resolved,
                    reason=reason,
                    required_by=_requirers(resolution, package),
                )
            )
    return Prediction(
        requested=requested,
        installs=len(resolution.packages),
        moves=tuple(moves),
        deep_ep=_deep_ep(pins, resolution, requested),
        overrides=tuple(overrides),
    )


def _override(pins: Pins, own: str, required_by: tuple[str, ...]) -> Move:
    """NCCL_VERSION where a plain install puts the `own` NCCL torch requires: the base lock's override."""
    return Move(
        package=pins.wheels.nccl,
        pinned=pins.nccl_version,
        resolved=own,
        reason="the base lock's override: NCCL_VERSION over the NCCL torch requires itself (pins.rules)",
        required_by=required_by,
    )


def _deep_ep(pins: Pins, resolution: Resolution, requested: str) -> tuple[Move, ...]:
    return tuple(
        Move(
            package=provider.name,
            pinned=f"deep_ep@{pins.deepep_ref[:7]}",
            resolved=provider.version,
            reason=f"required by {', '.join(_requirers(resolution, provider.name)) or requested}",
            required_by=_requirers(resolution, provider.name),
        )
        for provider in resolution.packages
        if provider.name in DEEP_EP_PROVIDERS
    )


def predict_from_locks(
    pins: Pins, directory: Path, resolver: Resolver = compile_requirements
) -> Prediction | None:
    """The prediction the fresh locks of `directory` prove, asked of uv's cache alone; None when a lock
    is stale or the cache cannot answer (then the index must be asked)."""
    if stale_locks(pins, directory):
        return None
    requested = f"sglang=={pins.sglang_version}"
    held = [p.pin for name in venv_locks(TOP.name) if (lock := read_lock(directory, name))
            for p in lock.resolution.packages]  # fmt: skip
    nccl = f"{pins.wheels.nccl}=={pins.nccl_version}"  # the base lock's override, as the images install it
    try:
        resolution = resolver(
            [requested],
            pins.image_target,
            constraints=[pin for pin in held if pin != nccl],
            overrides=[nccl],
            offline=True,
        )
        own = torch_nccl(pins, partial(resolver, offline=True))
    except EpstackError:
        return None
    if any(resolution.version(name) != version for name, version in pins.base_packages.items()):
        return None
    overrides = (own,) if own is not None and own.version != pins.nccl_version else ()
    return Prediction(
        requested=requested,
        installs=len(resolution.packages),
        moves=(),
        deep_ep=_deep_ep(pins, resolution, requested),
        source=f"the fresh locks in {directory} (uv's cache, offline)",
        overrides=tuple(
            _override(pins, each.version, (f"torch=={pins.torch_version}",)) for each in overrides
        ),
    )


def predict_pins(pins: Pins, directory: Path, resolver: Resolver = compile_requirements) -> Prediction:
    """`pins predict`'s answer: from the fresh locks where they hold it, else from the index."""
    return predict_from_locks(pins, directory, resolver) or predict(pins, resolver)


def predict_locks(pins: Pins, directory: Path, resolver: Resolver = compile_requirements) -> LockRun | str:
    """What `epstack pins lock` would move in `directory` for these pins (nothing is written), or uv's reason
    why the locks cannot be resolved."""
    try:
        return relock(pins, directory, resolver=resolver)
    except Unresolvable as exc:
        return str(exc)
