"""buildspecs/batch.yml, rendered from pins.env: one build per target, then its smoke; and one build of
each other serving engine's image per target (vLLM's), after the default engine's.

The targets are a fact of pins.env, and the engines of epstack.layers; the batch file is derived from
them (`epstack codebuild batchspec`), and lint reports a batch that leaves a target out. A build graph,
not a matrix: each smoke depends on its own target's build, and only on it; another engine's build
depends on the default one's, whose base and deepep layers it then finds in the registry cache
(`epstack build --cache-registry`) instead of building them again.
"""

from __future__ import annotations

from epstack.layers import ENGINES, TOP
from epstack.pins.model import Pins

BUILD_BUILDSPEC = "buildspecs/build.yml"
SMOKE_BUILDSPEC = "buildspecs/smoke.yml"
# Image builds: 72 vCPUs, 145 GB memory, 824 GB disk (the CUDA devel image and DeepEP's build).
BUILD_COMPUTE = "BUILD_GENERAL1_2XLARGE"
# The smoke needs Hopper or Blackwell GPUs (see docs/guides/codebuild.md); point these at such a fleet.
SMOKE_ENV_TYPE = "LINUX_GPU_CONTAINER"
SMOKE_COMPUTE = "BUILD_GENERAL1_LARGE"


def identifier(kind: str, target: str, engine: str = TOP.name) -> str:
    """build_hopper_ib for the default engine's image, build_hopper_ib_vllm for another's."""
    suffix = "" if engine == TOP.name else f"_{engine}"
    return f"{kind}_{target.replace('-', '_')}{suffix}"


def render_batchspec(pins: Pins) -> str:
    lines = [
        "# Rendered from pins.env by `epstack codebuild batchspec > buildspecs/batch.yml`; do not edit.",
        "# One build per target of pins.env, then the elastic smoke of that target's image; each other",
        "# engine's image (EPSTACK_ENGINE) built after it, from the registry cache of the layers below.",
        "# Start it with `epstack codebuild start --project P --batch`.",
        "version: 0.2",
        "",
        "batch:",
        "  fast-fail: false",
        "  build-graph:",
    ]
    for target in pins.targets:
        build = identifier("build", target)
        lines += [
            f"    - identifier: {build}",
            f"      buildspec: {BUILD_BUILDSPEC}",
            "      env:",
            f"        compute-type: {BUILD_COMPUTE}",
            "        privileged-mode: true",
            "        variables:",
            f"          EPSTACK_TARGET: {target}",
            f"    - identifier: {identifier('smoke', target)}",
            f"      buildspec: {SMOKE_BUILDSPEC}",
            f"      depend-on: [{build}]",
            "      env:",
            f"        type: {SMOKE_ENV_TYPE}",
            f"        compute-type: {SMOKE_COMPUTE}",
            "        privileged-mode: true",
            "        variables:",
            f"          EPSTACK_TARGET: {target}",
        ]
        for engine in (name for name in ENGINES if name != TOP.name):
            lines += [
                f"    - identifier: {identifier('build', target, engine)}",
                f"      buildspec: {BUILD_BUILDSPEC}",
                f"      depend-on: [{build}]",
                "      env:",
                f"        compute-type: {BUILD_COMPUTE}",
                "        privileged-mode: true",
                "        variables:",
                f"          EPSTACK_TARGET: {target}",
                f"          EPSTACK_ENGINE: {engine}",
            ]
    return "\n".join(lines) + "\n"
