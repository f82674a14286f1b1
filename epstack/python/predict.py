"""Would installing SGLang move a pinned package? Asked before any build (`epstack pins predict`).

uv, the images' installer, resolves `sglang==SGLANG_VERSION` unconstrained for the image's Python and
platform (epstack.python.resolve). Each base-layer package it would install at another version than pinned is
resolved again with its pin as a constraint: when that fails the pin cannot hold, and uv's explanation
names the requirement that forces the move. Distributions that would bring their own deep_ep over the
one built from DEEPEP_REF are named too. Then, against the committed locks: each lock the change makes
stale is resolved again as `epstack lock` would (nothing written), and every distribution that would
move is listed, before anything is built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from epstack.pins.model import Pins
from epstack.python.lock import LockRun, relock
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
    moves = []
    for package, pinned in pins.base_packages.items():
        resolved = resolution.version(package)
        if resolved is None or Version(resolved).public == Version(pinned).public:
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
    deep_ep = tuple(
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
    return Prediction(
        requested=requested, installs=len(resolution.packages), moves=tuple(moves), deep_ep=deep_ep
    )


def predict_locks(pins: Pins, directory: Path, resolver: Resolver = compile_requirements) -> LockRun | str:
    """What `epstack lock` would move in `directory` for these pins (nothing is written), or uv's reason
    why the locks cannot be resolved."""
    try:
        return relock(pins, directory, resolver=resolver)
    except Unresolvable as exc:
        return str(exc)
