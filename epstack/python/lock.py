"""The whole Python closure of every layer, resolved once by uv and committed in locks/ (`epstack pins lock`).

One lock per install step (lock_specs): `base` (torch, NCCL, NVSHMEM, and the venv's own pip and uv),
`deepep-build` (what DeepEP's setup.py builds with, in a build stage only), `sglang` and `vllm` (each
served engine's, each over the base lock alone). The deepep
layer adds no PyPI distribution to the venv: its deep_ep wheel is built from DEEPEP_REF and recorded by
its manifest. No Python input depends on the target, so every target shares these locks.

Each upper lock is resolved with the lower ones as constraints, so nothing in a lower lock moves. The
base lock is resolved with the whole stack in view (base and one engine together first, the base pinned
to that answer, each other engine then resolved over it), since a base that an upper layer cannot hold
would have to move under it. uv keeps
every version of an existing lock that still holds (it reads the lock as its previous output), so a
relock moves only what its changed inputs force, and `--upgrade PACKAGE[==VERSION]` only that package
and what must move with it. A lock's header records its inputs and their digest, and its entries'
digest: `--check` needs no index. A lock is fresh when both digests hold and its entries hold what its
spec says (epstack.python.lockcontent), so a hand-edited lock is stale. Every new lock is installed
dry-run with the images' flags before it is written.

The base pins are the locks' overrides: NCCL_VERSION replaces the NCCL torch requires itself (torch pins
its NCCL wheel exactly). Where the base lock is resolved again, uv is first asked what torch alone
requires, and pins.rules.nccl_over_torch decides whether NCCL_VERSION may replace it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from epstack.errors import BadInput, CommandFailed, shown
from epstack.layers import SERVED
from epstack.output import write_file
from epstack.pins.file import parse_pins_file
from epstack.pins.model import Pins
from epstack.pins.rules import nccl_over_torch
from epstack.python.lockcontent import content_problems
from epstack.python.lockfile import (
    LockFile,
    inputs_digest,
    lock_path,
    parse_lock,
    pins_digest,
    read_lock,
    render_lock,
)
from epstack.python.resolve import (
    RESOLVE_FLAGS,
    Pinned,
    Resolution,
    Unresolvable,
    check_installable,
    compile_requirements,
)
from epstack.stack import DEEP_EP_PROVIDERS, DEEPEP_BUILD_REQUIREMENTS, nccl_wheel, other_cuda_major

Resolver = Callable[..., Resolution]
Installable = Callable[..., None]


@dataclass(frozen=True, kw_only=True)
class LockSpec:
    """One install step's resolution: what it requires and how (the flags its install uses)."""

    name: str  # locks/<name>.txt
    requirements: tuple[str, ...]
    overrides: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()  # besides the locks below: the CUDA release wheels' minor
    excludes: tuple[str, ...] = ()
    below: tuple[str, ...] = ()  # locks whose pins constrain this one
    # The bottom lock's: the served layers' locks it is resolved to hold up (epstack.layers.SERVED).
    holds_up: tuple[str, ...] = ()
    own: tuple[str, ...] = ()  # distributions of the locks below that this one pins itself


def lock_specs(pins: Pins) -> tuple[LockSpec, ...]:
    """Bottom-up. The one home of what each layer's install requires (render copies the locks)."""
    base = tuple(f"{name}=={version}" for name, version in pins.base_packages.items())
    one_cuda = cuda_release_constraints(pins)
    return (
        # pip comes with `python -m venv`, uv bootstraps from it: both are locked like the rest.
        LockSpec(
            name="base",
            requirements=(*base, f"uv=={pins.uv_version}", "pip"),
            overrides=base,
            constraints=one_cuda,
            holds_up=tuple(lock for layer in SERVED for lock in layer.locks),
        ),
        # In DeepEP's build stage only; its setuptools is older than the one torch brings.
        LockSpec(
            name="deepep-build",
            requirements=DEEPEP_BUILD_REQUIREMENTS,
            below=("base",),
            own=tuple(str(canonicalize_name(Requirement(r).name)) for r in DEEPEP_BUILD_REQUIREMENTS),
        ),
        LockSpec(
            name="sglang",
            requirements=(f"sglang=={pins.sglang_version}", *nixl_requirements(pins)),
            overrides=base,
            constraints=one_cuda,
            excludes=(*DEEP_EP_PROVIDERS, *pins.wheels.foreign),
            below=("base",),
        ),
        # vllm 0.33.0 requires torch==2.14.0: overridden to the pinned torch like every base package.
        LockSpec(
            name="vllm",
            requirements=(f"vllm=={pins.vllm_version}",),
            overrides=base,
            constraints=one_cuda,
            excludes=(*DEEP_EP_PROVIDERS, *pins.wheels.foreign),
            below=("base",),
        ),
    )


def nixl_requirements(pins: Pins) -> tuple[str, ...]:
    """NIXL, SGLang's KV transfer engine: the `nixl` module it imports and that module's build for the
    image's CUDA major (the other majors' builds, which nixl also requires, are excluded)."""
    return (f"nixl=={pins.nixl_version}", f"{pins.wheels.nixl}=={pins.nixl_version}")


def torch_nccl(pins: Pins, resolver: Resolver) -> Pinned | None:
    """The NCCL wheel torch==TORCH_VERSION itself requires: what uv resolves torch to alone for the image,
    without the base lock's overrides (None: torch requires no NCCL wheel)."""
    alone = resolver(
        [f"torch=={pins.torch_version}"],
        pins.image_target,
        constraints=cuda_release_constraints(pins),
        name="torch-alone",
    )
    return next((package for package in alone.packages if nccl_wheel(package.name)), None)


def nccl_override_problem(pins: Pins, own: Pinned | None) -> tuple[str, str, str] | None:
    """(key, what, fix) when NCCL_VERSION may not replace torch's `own` NCCL (pins.rules.nccl_over_torch)."""
    return nccl_over_torch(pins, own.name, own.version) if own else None


def cuda_release_constraints(pins: Pins) -> tuple[str, ...]:
    """One CUDA: each toolkit wheel versioned with the release at the pinned minor (nvidia-cuda-nvcc==13.0.*),
    but those CUDA_MINOR_EXCEPTIONS names."""
    release = pins.cuda_major_minor
    return tuple(f"{name}=={release}.*" for name in pins.wheels.release if name not in pins.cuda_exceptions)


def lock_inputs(spec: LockSpec, pins: Pins, lower: Mapping[str, Resolution]) -> dict[str, str]:
    """What the resolution depends on, as the lock header records it."""
    target = pins.image_target
    inputs = {
        "python": f"{target.python_version} {target.platform}",
        "uv": f"{pins.uv_version} pip compile {' '.join(RESOLVE_FLAGS)}",
        "requires": " ".join(spec.requirements),
    }
    if spec.overrides:
        inputs["overrides"] = " ".join(spec.overrides)
    if spec.constraints:
        inputs["constraints"] = " ".join(spec.constraints)
    if spec.excludes:
        inputs["excludes"] = " ".join(spec.excludes)
    for name in spec.below:
        inputs[f"constrained-by {name}.txt"] = f"pins sha256 {pins_digest(lower[name])}"
    if spec.holds_up:
        inputs["holds-up"] = " ".join(f"{name}.txt" for name in spec.holds_up)
    return inputs


@dataclass(frozen=True, kw_only=True)
class Stale:
    name: str
    path: Path
    reasons: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.path}: stale ({'; '.join(self.reasons)})"


def _differences(recorded: Mapping[str, str], current: Mapping[str, str]) -> tuple[str, ...]:
    keys = dict.fromkeys([*recorded, *current])
    return tuple(
        f"{key}: {recorded.get(key, '-')} -> {current.get(key, '-')}"
        for key in keys
        if recorded.get(key) != current.get(key)
    )


def _content_problems(
    spec: LockSpec, pins: Pins, lock: LockFile, lower: Mapping[str, Resolution]
) -> tuple[str, ...]:
    return content_problems(
        lock,
        cuda_major=pins.wheels.major,
        requirements=spec.requirements,
        overrides=spec.overrides,
        constraints=spec.constraints,
        excludes=spec.excludes,
        below={name: lower[name] for name in spec.below},
        own=spec.own,
    )


def stale_locks(pins: Pins, directory: Path) -> list[Stale]:
    """Every lock whose recorded inputs differ from what `pins` and the locks below give, or whose
    entries are not what its spec says (edited by hand), without resolving anything. A lock above a
    stale one is stale too: its constraints are about to change."""
    stale: list[Stale] = []
    resolved: dict[str, Resolution] = {}
    for spec in lock_specs(pins):
        path = lock_path(directory, spec.name)
        lock = read_lock(directory, spec.name)
        below_stale = [f"{name}.txt is stale" for name in spec.below if name not in resolved]
        if lock is None:
            stale.append(Stale(name=spec.name, path=path, reasons=("missing",)))
            continue
        if below_stale:
            stale.append(Stale(name=spec.name, path=path, reasons=tuple(below_stale)))
            continue
        inputs = lock_inputs(spec, pins, resolved)
        if lock.digest != inputs_digest(inputs):
            reasons = _differences(lock.inputs, inputs) or ("its inputs-sha256 does not match its header",)
            stale.append(Stale(name=spec.name, path=path, reasons=reasons))
            continue
        problems = _content_problems(spec, pins, lock, resolved)
        if problems:
            stale.append(Stale(name=spec.name, path=path, reasons=problems))
            continue
        resolved[spec.name] = lock.resolution
    return stale


@dataclass(frozen=True, kw_only=True)
class Move:
    lock: str
    package: str
    before: str  # "" when added
    after: str  # "" when removed


@dataclass(kw_only=True)
class LockRun:
    """What a lock run resolved: the new lock files (unwritten), moves against the old ones, timings."""

    locks: dict[str, LockFile] = field(default_factory=dict)
    moves: list[Move] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    kept: list[str] = field(default_factory=list)
    # The NCCL torch requires itself, asked where the base lock was resolved again (None: not asked or
    # none): NCCL_VERSION replaces it through the lock's override, where pins.rules allows it.
    torch_nccl: Pinned | None = None


def _moves(name: str, before: Resolution | None, after: Resolution) -> list[Move]:
    old, new = (before.versions if before else {}), after.versions
    return [
        Move(lock=name, package=package, before=old.get(package, ""), after=new.get(package, ""))
        for package in sorted({*old, *new})
        if old.get(package) != new.get(package)
    ]


def upgrade_name(upgrade: str) -> str:
    """The distribution `--upgrade PACKAGE[==VERSION]` moves."""
    try:
        return str(canonicalize_name(Requirement(upgrade).name))
    except InvalidRequirement:
        raise BadInput(f"--upgrade {shown(upgrade)}: not PACKAGE or PACKAGE==VERSION") from None


def relock(
    pins: Pins,
    directory: Path,
    *,
    upgrade: str | None = None,
    resolver: Resolver = compile_requirements,
    installable: Installable = check_installable,
    pins_path: Path | None = None,
) -> LockRun:
    """Resolve every lock that is stale, missing, holds `upgrade`, or sits over one that changed. BadInput
    (naming `pins_path`'s line) where NCCL_VERSION may not replace the NCCL torch requires itself."""
    specs = lock_specs(pins)
    current = {spec.name: read_lock(directory, spec.name) for spec in specs}
    todo = {stale.name for stale in stale_locks(pins, directory)}
    upgrades: tuple[str, ...] = ()
    if upgrade:
        name = upgrade_name(upgrade)
        holders = {n for n, lock in current.items() if lock and name in lock.resolution.versions}
        if not holders:
            raise BadInput(
                f"--upgrade {upgrade}: {name} is in no lock of {directory}; fix: name a locked one"
            )
        todo |= holders
        upgrades = (upgrade,)
    run = LockRun()
    resolved: dict[str, Resolution] = {}
    for spec in specs:
        lock = current[spec.name]
        inputs = lock_inputs(spec, pins, resolved)
        if spec.name not in todo and lock is not None and lock.digest == inputs_digest(inputs):
            resolved[spec.name] = lock.resolution
            run.kept.append(spec.name)
            continue
        start = time.monotonic()
        if not spec.below:
            run.torch_nccl = torch_nccl(pins, resolver)
            problem = nccl_override_problem(pins, run.torch_nccl)
            if problem and pins_path:
                raise parse_pins_file(pins_path).error(*problem)
            if problem:
                raise BadInput(f"{problem[0]}: {problem[1]}; fix: {problem[2]}")
        resolution = _resolve(
            spec,
            specs=specs,
            pins=pins,
            current=current,
            resolved=resolved,
            upgrades=upgrades,
            resolver=resolver,
        )
        installable(resolution.text, pins.image_target)
        run.seconds[spec.name] = time.monotonic() - start
        resolved[spec.name] = resolution
        run.locks[spec.name] = parse_lock(spec.name, render_lock(spec.name, inputs, resolution))
        run.moves += _moves(spec.name, lock.resolution if lock else None, resolution)
    return run


def _preferences(*locks: LockFile | None) -> str:
    pins = {p.name: p.pin for lock in locks if lock for p in lock.resolution.packages}
    return "".join(f"{pin}\n" for pin in pins.values())


def _resolve(
    spec: LockSpec,
    *,
    specs: tuple[LockSpec, ...],
    pins: Pins,
    current: Mapping[str, LockFile | None],
    resolved: Mapping[str, Resolution],
    upgrades: tuple[str, ...],
    resolver: Resolver,
) -> Resolution:
    if not spec.below:
        return _resolve_bottom(spec, specs=specs, pins=pins, current=current, upgrades=upgrades,
                               resolver=resolver)  # fmt: skip
    constraints = [p.pin for name in spec.below for p in resolved[name].packages if p.name not in spec.own]
    return _resolve_one(spec, [*constraints, *spec.constraints], pins=pins, current=current,
                        upgrades=upgrades, resolver=resolver)  # fmt: skip


def _resolve_bottom(
    spec: LockSpec,
    *,
    specs: tuple[LockSpec, ...],
    pins: Pins,
    current: Mapping[str, LockFile | None],
    upgrades: tuple[str, ...],
    resolver: Resolver,
) -> Resolution:
    """The bottom lock with the whole stack in view: itself and one served lock resolved together, it
    pinned to that answer, then every other served lock resolved over it. One that cannot be (vllm
    0.33.0 wants setuptools < 81, which SGLang's answer need not give) goes first, and again."""
    order = [each for each in specs if each.name in spec.holds_up]
    refusal: Unresolvable | None = None
    for _attempt in order:
        first, *others = order
        stack = _stack(spec, first, pins=pins, current=current, upgrades=upgrades, resolver=resolver)
        bottom = _resolve_one(spec, [p.pin for p in stack.packages], pins=pins, current=current,
                              upgrades=upgrades, resolver=resolver)  # fmt: skip
        pinned = [*spec.constraints, *(p.pin for p in bottom.packages)]
        for top in others:
            try:
                _stack(spec, top, pins=pins, current=current, upgrades=upgrades, resolver=resolver,
                       constraints=pinned)  # fmt: skip
            except Unresolvable as failure:
                refusal = failure
                order.remove(top)
                order.insert(0, top)
                break
        else:
            return bottom
    raise CommandFailed(
        f"no {spec.name} lock holds every served layer's lock ({', '.join(s.name for s in order)}): "
        f"{refusal}; fix: pins whose engines agree on the {spec.name} closure"
    )


def _stack(
    spec: LockSpec,
    top: LockSpec,
    *,
    pins: Pins,
    current: Mapping[str, LockFile | None],
    upgrades: tuple[str, ...],
    resolver: Resolver,
    constraints: list[str] | None = None,
) -> Resolution:
    """The bottom lock's requirements and a served lock's together (`constraints`: the bottom's pins)."""
    return resolver(
        [*spec.requirements, *top.requirements],
        pins.image_target,
        constraints=spec.constraints if constraints is None else constraints,
        overrides=spec.overrides,
        excludes=top.excludes,
        preferences=_preferences(current[spec.name], current[top.name]),
        upgrade=upgrades,
        name="stack",
    )


def _resolve_one(
    spec: LockSpec,
    constraints: list[str],
    *,
    pins: Pins,
    current: Mapping[str, LockFile | None],
    upgrades: tuple[str, ...],
    resolver: Resolver,
) -> Resolution:
    target = pins.image_target
    lock = current[spec.name]
    resolution = resolver(
        spec.requirements,
        target,
        constraints=constraints,
        overrides=spec.overrides,
        excludes=spec.excludes,
        # an edited lock's own lines never reach uv: only the versions read from them
        preferences=lock.resolution.text if lock and lock.entries_intact else _preferences(lock),
        upgrade=upgrades,
        name=spec.name,
    )
    foreign = [p for p in resolution.packages if other_cuda_major(p.name, pins.wheels.major)]
    if foreign:
        names = ", ".join(f"{p.name} (required by {', '.join(p.via) or 'the requirements'})" for p in foreign)
        raise CommandFailed(
            f"the {spec.name} lock would install {names} into a CUDA {pins.wheels.major} image; fix: if it "
            "is never loaded there, add its name without -cuNN to CUDA_FLAVOURED_STEMS in epstack/stack.py "
            "(the locks exclude it), else move CUDA_VERSION to its major"
        )
    return resolution


def write_locks(run: LockRun, directory: Path) -> list[Path]:
    """Write each new lock whole (a reader never sees half a file)."""
    written = []
    for name, lock in run.locks.items():
        path = lock_path(directory, name)
        write_file(path, lock.text, what=f"the {name} lock")
        written.append(path)
    return written
