"""The image layers of a target, bottom-up: one record each, the only place that says what a layer is.

A layer is built from its own pins and those of the layers below (so a pin moves its layer and every
layer above it, never one below), installs its locks into the venv, builds some Dockerfile stages as
images, and is guarded by its own checks and those below. pins (keys, tags), lock and closure (locks),
guard (scopes), build (git sources), render (images, stages, args) and sbom read it here. Adding a
layer is a record here plus images/<name>/Dockerfile.j2 (docs/contributing.md, "Adding a layer or a fabric").
Standard library only: the smoke and the doctor import what imports this on bare hosts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class GuardScope:
    """A group of guard checks, `epstack guard --layer <name>`, and the pins keys they read."""

    name: str
    keys: tuple[str, ...]
    # With --locks, also every distribution of the venv against the locks of its layer (the python
    # scope runs before the layer's venv is complete).
    closure: bool = True


@dataclass(frozen=True, kw_only=True)
class Layer:
    name: str
    # The layer whose images it is built on (None: the bottom one); its <STAGE>_IMAGE build arguments.
    on: str | None
    # Its own pins.env keys (a fabric adds its own: fabric.Fabric.pin_keys).
    pin_keys: tuple[str, ...]
    # Built for the target's GPU archs: its pins hold TORCH_CUDA_ARCH_LIST (it and every layer above).
    per_arch: bool
    # The locks its install adds to the venv; the guard expects the union of those up to this layer.
    locks: tuple[str, ...]
    # The Dockerfile stages built as images, bottom-up; the last is the layer's image. Each becomes the
    # <STAGE>_IMAGE build argument of the layers built on it.
    stages: tuple[str, ...]
    # The stage whose image starts from the CUDA devel image (its labels name that base); "" if none.
    devel_stage: str = ""
    # Its image tag before the layer hash; fields: cuda (13.0), nccl, sglang, vllm, deepep (7 hex), fabric,
    # target.
    tag: str
    # Built from git commits (DeepEP, fmt, GDRCopy): it needs a sources folder or GitHub.
    from_git: bool
    # Its venv holds the deep_ep wheel built in the deepep layer (the guard and the SBOM look for it).
    holds_deep_ep: bool
    guard: tuple[GuardScope, ...]
    # A serving engine's layer: the distributions (name prefixes) that move with each of its releases,
    # installed last, in a layer of their own, so a bump rebuilds and re-pulls that one, not the rest.
    family: tuple[str, ...] = ()

    @property
    def template(self) -> str:
        """Its Dockerfile template, relative to images/."""
        return f"{self.name}/Dockerfile.j2"


BASE = Layer(
    name="base",
    on=None,
    # The base layer comes from package registries only (PyPI, the Ubuntu archive, the EFA installer).
    pin_keys=(
        *("CUDA_VERSION", "CUDA_DEVEL_IMAGE", "CUDA_RUNTIME_IMAGE", "CUDA_MINOR_EXCEPTIONS"),
        *("UBUNTU_SNAPSHOT", "PYTHON_VERSION"),
        *("UV_VERSION", "TORCH_VERSION", "TORCH_CUDA_TAG", "NCCL_VERSION", "NVSHMEM_VERSION"),
    ),
    per_arch=False,
    locks=("base",),
    stages=("devel", "base"),
    devel_stage="devel",
    tag="base-cu{cuda}-nccl{nccl}-{fabric}",
    from_git=False,
    holds_deep_ep=False,
    guard=(
        GuardScope(name="python", keys=("CUDA_VERSION", "NCCL_VERSION", "NVSHMEM_VERSION"), closure=False),
        GuardScope(name="base", keys=("TORCH_VERSION", "TORCH_CUDA_TAG")),
    ),
)
DEEPEP = Layer(
    name="deepep",
    on="base",
    # Everything built from a git commit: DeepEP, its fmt submodule, GDRCopy.
    pin_keys=("GDRCOPY_VERSION", "GDRCOPY_REF", "DEEPEP_REPO", "DEEPEP_REF", "DEEPEP_FMT_REF"),
    per_arch=True,
    locks=(),  # DeepEP's build requirements (the deepep-build lock) stay in its build stage
    stages=("deepep",),
    tag="deepep-{deepep}-cu{cuda}-{target}",
    from_git=True,
    holds_deep_ep=True,
    guard=(GuardScope(name="deepep", keys=("DEEPEP_REPO", "DEEPEP_REF")),),
)
SGLANG = Layer(
    name="sglang",
    on="deepep",
    pin_keys=("SGLANG_VERSION", "NIXL_VERSION"),
    per_arch=True,
    locks=("sglang",),
    stages=("sglang",),
    tag="sglang-{sglang}-deepep-{deepep}-cu{cuda}-{target}",
    from_git=True,  # above the deepep layer
    holds_deep_ep=True,
    guard=(GuardScope(name="sglang", keys=("SGLANG_VERSION", "NIXL_VERSION")),),
    # sglang, sglang-kernel, sgl-deep-gemm, sgl-flash-mla, flashinfer-*
    family=("sglang", "sgl-", "flashinfer"),
)

VLLM = Layer(
    name="vllm",
    on="deepep",  # the same DeepEP layer as SGLang's: vLLM over TORCH_VERSION (docs/explanation/vllm.md)
    pin_keys=("VLLM_VERSION",),
    per_arch=True,
    locks=("vllm",),
    stages=("vllm",),
    tag="vllm-{vllm}-deepep-{deepep}-cu{cuda}-{target}",
    from_git=True,  # above the deepep layer
    holds_deep_ep=True,
    guard=(GuardScope(name="vllm", keys=("VLLM_VERSION",)),),
    family=("vllm", "flashinfer"),  # vllm pins flashinfer-python exactly: it moves with every release
)

# Every layer, each after the one it is built on.
LAYERS: tuple[Layer, ...] = (BASE, DEEPEP, SGLANG, VLLM)
LAYER_NAMES: tuple[str, ...] = tuple(layer.name for layer in LAYERS)
# The layers no other layer is built on: the images a target serves, one per serving engine (bake's
# "all" group, `--engine`).
SERVED: tuple[Layer, ...] = tuple(each for each in LAYERS if all(other.on != each.name for other in LAYERS))
ENGINES: tuple[str, ...] = tuple(each.name for each in SERVED)
# The served image built, pulled and guarded when none is named (the default engine; guard's "all").
TOP = SGLANG
ALL_ENGINES = "all"  # `--engine all`: every served image


def engine_layers(engine: str) -> tuple[str, ...]:
    """The layers `--engine ENGINE` builds: the engine's and every one it is built on; "all": every layer."""
    chosen = LAYERS if engine == ALL_ENGINES else up_to(engine)
    return tuple(each.name for each in chosen)


def layer_named(name: str) -> Layer:
    """The layer called `name`; KeyError for another name (argparse choices keep users to LAYER_NAMES)."""
    found = next((each for each in LAYERS if each.name == name), None)
    if found is None:
        raise KeyError(name)
    return found


def up_to(name: str) -> tuple[Layer, ...]:
    """The layer called `name` and every layer it is built on, bottom-up."""
    chain = [layer_named(name)]
    while chain[0].on is not None:
        chain.insert(0, layer_named(chain[0].on))
    return tuple(chain)


def venv_locks(name: str) -> tuple[str, ...]:
    """The locks whose union the venv of the layer's image holds, bottom-up."""
    return tuple(lock for each in up_to(name) for lock in each.locks)


GUARD_SCOPES: tuple[GuardScope, ...] = tuple(scope for each in LAYERS for scope in each.guard)
# `epstack guard --layer`: a scope and those below it, or "all": every scope of the served image.
GUARD_ALL = "all"
GUARD_CHOICES = (*(scope.name for scope in GUARD_SCOPES), GUARD_ALL)


def guard_scopes(name: str) -> tuple[tuple[GuardScope, ...], Layer]:
    """The scopes `guard --layer <name>` runs, bottom-up, and the layer whose image they guard."""
    if name == GUARD_ALL:
        return tuple(scope for each in up_to(TOP.name) for scope in each.guard), TOP
    owner = next(each for each in LAYERS if name in (scope.name for scope in each.guard))
    scopes = [scope for each in up_to(owner.name) for scope in each.guard]
    return tuple(scopes[: [scope.name for scope in scopes].index(name) + 1]), owner
