"""Build a rendered target bottom-up (devel, base, deepep, sglang), or what of it can be built here.

With the CUDA base images at hand (local or pullable) every image of the target is built in
layer order, so a change to one pin rebuilds from its layer up and BuildKit's cache serves the
rest. Without them (no registry, as on CI), the layers that need no CUDA base are built on a
Debian stand-in (offline_base) and the rest is reported as not built.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console

from epstack.engine import DockerEngine
from epstack.offline_base import OFFLINE_PYTHON, ensure_offline_base
from epstack.pins import Pins
from epstack.render import ImageSpec, RenderPlan

# The stage of base.Dockerfile that needs no CUDA: Python and the pinned NCCL/NVSHMEM wheels.
OFFLINE_STAGE = "python"


@dataclass(kw_only=True)
class BuildReport:
    """What a build did: images built (ref -> seconds), images left out (ref -> why)."""

    target: str
    offline: bool
    built: dict[str, float] = field(default_factory=dict)
    not_built: dict[str, str] = field(default_factory=dict)
    check_output: str = ""


def write_build_report(path: Path, report: BuildReport) -> None:
    """The report as JSON (what `epstack publish push` reads), written whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.tmp")
    staging.write_text(json.dumps(asdict(report), indent=2) + "\n")
    staging.replace(path)


def offline_tag(pins: Pins, target: str) -> str:
    return f"{pins.image_repository}:python-offline-{target}-{pins.layer_hash('base', target)}"


def build_target(
    *,
    pins: Pins,
    plan: RenderPlan,
    context: Path,
    target: str,
    engine: DockerEngine,
    console: Console,
    cache_registry: str = "",
) -> BuildReport:
    """Build `target` from the rendered context directory; see the module docstring.
    `cache_registry` (HOST[/NS]): BuildKit's registry cache in <it>/<IMAGE_REPOSITORY>-cache:<image>."""
    cache = registry_cache(pins, engine, cache_registry, console)
    images = plan.images_for(target)
    bases = (pins.cuda_devel_image, pins.cuda_runtime_image)
    missing = [ref for ref in bases if not (engine.image_exists(ref) or engine.pull(ref))]
    if not missing:
        report = BuildReport(target=target, offline=False)
        for image in images:
            seconds = _build(engine, context=context, image=image, console=console, cache=cache)
            report.built[image.tag] = seconds
        return report

    console.print(
        f"[yellow]cannot pull {missing[0]}[/]: building only the layers that need no CUDA base, "
        f"on a Debian stand-in with Python {OFFLINE_PYTHON}"
    )
    report = BuildReport(target=target, offline=True)
    base = ensure_offline_base(engine)
    devel = images[0]
    offline = ImageSpec(
        name=f"{target}-{OFFLINE_STAGE}-offline",
        target=target,
        layer="base",
        stage=OFFLINE_STAGE,
        dockerfile=devel.dockerfile,
        tag=offline_tag(pins, target),
        args={"CUDA_DEVEL_IMAGE": base, "PYTHON_VERSION": OFFLINE_PYTHON},
        labels={**devel.labels, "io.epstack.offline-base": base, "io.epstack.stage": OFFLINE_STAGE},
    )
    report.built[offline.tag] = _build(engine, context=context, image=offline, console=console, cache=cache)
    check = (
        "import importlib.metadata as m; "
        f"print(' '.join(f'{{d}}=={{m.version(d)}}' for d in {(pins.wheels.nccl, pins.wheels.nvshmem)!r}))"
    )
    report.check_output = engine.run(offline.tag, ["python", "-c", check]).strip()
    console.print(f"[green]ran in {offline.tag}[/]: {report.check_output}")
    for image in images:
        report.not_built[image.tag] = f"needs {missing[0].split('@')[0]} (not pullable here)"
    return report


def registry_cache(
    pins: Pins, engine: DockerEngine, registry: str, console: Console
) -> Callable[[ImageSpec], list[str]]:
    """--cache-from/--cache-to arguments per image; none without buildx (the classic builder
    cannot export a registry cache), which is said once."""
    if not registry:
        return lambda image: []
    if not engine.buildx:
        console.print(f"[yellow]no registry cache[/]: {engine.cli} has no buildx; local BuildKit cache only")
        return lambda image: []
    repository = f"{registry.rstrip('/')}/{pins.image_repository}-cache"
    return lambda image: engine.registry_cache_args(f"{repository}:{image.name}")


def _build(
    engine: DockerEngine,
    *,
    context: Path,
    image: ImageSpec,
    console: Console,
    cache: Callable[[ImageSpec], list[str]],
) -> float:
    console.rule(f"[bold]{image.layer}[/] / {image.stage} -> {image.tag}")
    start = time.monotonic()
    engine.build(
        context=context,
        dockerfile=image.dockerfile,
        stage=image.stage,
        tag=image.tag,
        args=image.args,
        labels=image.labels,
        cache=cache(image),
    )
    seconds = time.monotonic() - start
    console.print(f"[green]built[/] {image.tag} in {seconds:.1f} s")
    return seconds
