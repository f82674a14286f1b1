"""buildspecs/batch.yml, rendered from pins.env: one build per target, then (on a GPU fleet) its smoke;
and one build of each other serving engine's image per target (vLLM's), after the default engine's.

The targets are a fact of pins.env, and the engines of epstack.layers; the batch file is derived from
them (`epstack codebuild batchspec`), and lint reports a batch that leaves a target out. A build graph,
not a matrix: each smoke depends on its own target's build, and only on it; another engine's build
depends on the default one's, whose base and deepep layers it then finds in the registry cache
(`epstack build --cache-registry`) instead of building them again.

The smoke needs Hopper or Blackwell GPUs. CodeBuild's on-demand GPU environments cannot give them:
its guide lists two, `LINUX_GPU_CONTAINER` with BUILD_GENERAL1_SMALL (4 vCPUs, 16 GB) and
BUILD_GENERAL1_LARGE (32 vCPUs, 255 GB) (AWS CodeBuild user guide, build-env-ref-compute-types.html,
"About environment types"), whose GPUs are A10G or T4. A reserved capacity fleet takes the EC2 instance
type a team chooses (the guide's fleets.html, "Can I manually specify an Amazon EC2 instance for my
fleet?"), so the smoke tasks run on one named by --smoke-fleet, or are left out (--no-smoke).
"""

from __future__ import annotations

import re

from epstack.errors import BadInput
from epstack.layers import ENGINES, TOP
from epstack.pins.model import Pins

BUILD_BUILDSPEC = "buildspecs/build.yml"
SMOKE_BUILDSPEC = "buildspecs/smoke.yml"
# Image builds: 72 vCPUs, 145 GB memory, 824 GB disk (the CUDA devel image and DeepEP's build).
BUILD_COMPUTE = "BUILD_GENERAL1_2XLARGE"
FLEET_ARN = re.compile(
    r"^arn:aws[a-z-]*:codebuild:[a-z0-9-]+:[0-9]{12}:fleet/[A-Za-z0-9][A-Za-z0-9_-]{1,127}(:[A-Za-z0-9-]+)?$"
)
RENDER = "epstack codebuild batchspec --no-smoke|--smoke-fleet ARN"  # how a batch file is written


def identifier(kind: str, target: str, engine: str = TOP.name) -> str:
    """build_hopper_ib for the default engine's image, build_hopper_ib_vllm for another's."""
    suffix = "" if engine == TOP.name else f"_{engine}"
    return f"{kind}_{target.replace('-', '_')}{suffix}"


def fleet_arn(text: str) -> str:
    """--smoke-fleet: a CodeBuild reserved capacity fleet's ARN."""
    if not FLEET_ARN.match(text):
        raise ValueError(
            "not a CodeBuild fleet ARN; fix: arn:aws:codebuild:REGION:ACCOUNT:fleet/NAME:ID "
            "(aws codebuild list-fleets)"
        )
    return text


def command(smoke_fleet: str | None) -> str:
    """The command that renders the batch file with these options."""
    return f"epstack codebuild batchspec {f'--smoke-fleet {smoke_fleet}' if smoke_fleet else '--no-smoke'}"


def render_batchspec(pins: Pins, *, smoke_fleet: str | None) -> str:
    """One build per target; with `smoke_fleet`, each target's smoke on that fleet after its build."""
    if smoke_fleet is not None:
        try:
            fleet_arn(smoke_fleet)
        except ValueError as exc:
            raise BadInput(f"--smoke-fleet {smoke_fleet}: {exc}") from None
    smoke = (
        f"# One build per target of pins.env, then the smoke of that target's image on {smoke_fleet}."
        if smoke_fleet
        else "# One build per target of pins.env; no smoke (it needs Hopper or Blackwell: --smoke-fleet)."
    )
    lines = [
        f"# Rendered from pins.env by `{command(smoke_fleet)} > buildspecs/batch.yml`; do not edit.",
        smoke,
        "# Each other engine's image (EPSTACK_ENGINE) is built after it, from the registry cache below it.",
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
        ]
        if smoke_fleet:
            lines += [
                f"    - identifier: {identifier('smoke', target)}",
                f"      buildspec: {SMOKE_BUILDSPEC}",
                f"      depend-on: [{build}]",
                "      env:",
                f"        fleet: {smoke_fleet}",
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
