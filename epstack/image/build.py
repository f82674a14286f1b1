"""Build a rendered target bottom-up: devel, base, deepep, then an engine's image (sglang, vllm).

With the CUDA base images at hand (local or pullable) every image is built on them. Without (no
registry, as on CI) they are built on the CUDA stand-in (epstack.image.standin) instead: the same
Dockerfiles, tagged in IMAGE_REPOSITORY-standin and labelled, so they are never taken for the real
ones. The deepep and sglang layers need DeepEP, fmt and GDRCopy at pinned commits: from the render's
sources/ (`--sources`) or GitHub; with neither they are reported as not built, with the reason.
Each Dockerfile runs the layer's guard after its install steps, so a built image is a guarded one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from epstack.cmd import succeeds
from epstack.document import Schema
from epstack.errors import CommandFailed, EnvironmentProblem
from epstack.image.engine import DockerEngine
from epstack.image.render import ImageSpec, RenderPlan
from epstack.image.sbom import SBOM_DIR
from epstack.image.sources import CONTEXT_DIR
from epstack.image.standin import STANDIN_LABEL, Standin, ensure_os_image, standin_for
from epstack.layers import layer_named
from epstack.output import write_file
from epstack.pins.deepepsources import git_sources
from epstack.pins.model import Pins

STANDIN_SUFFIX = "-standin"
# BuildKit's SLSA provenance, every build step and its inputs (buildx; see provenance_args).
PROVENANCE_ARGS = ("--provenance=mode=max",)
# The most a cold build of one target wrote to the engine's disk: `make image` of hopper-ib on the
# CUDA stand-in, every layer, BuildKit's cache empty (measured 2026-12-02: peak 36.5 GB).
COLD_BUILD_GB = 40


@dataclass(frozen=True, kw_only=True)
class BuiltImage:
    ref: str
    layer: str
    stage: str
    seconds: float
    size: int  # bytes, as the engine reports the image
    sbom: str = ""  # the image's SBOM copied beside the build report (export_sboms)


@dataclass(kw_only=True)
class BuildReport:
    """What a build did: images built, images left out (ref -> why), and the stand-in if one was used."""

    target: str
    standin: Standin | None
    built: list[BuiltImage] = field(default_factory=list)
    not_built: dict[str, str] = field(default_factory=dict)


BUILD_REPORT = Schema(
    name="build-report",
    version=1,
    model=BuildReport,
    what="a build report (epstack build --report)",
    fix="run `epstack build --report` of this epstack again",
)


def write_build_report(path: Path, report: BuildReport) -> None:
    """The report as JSON (what `epstack publish push` reads), written whole or not at all."""
    write_file(path, BUILD_REPORT.dumps(report), what="the build report")


def standin_ref(ref: str) -> str:
    """epstack:base-... -> epstack-standin:base-...: a stand-in image never shares a real image's name."""
    repository, tag = ref.rsplit(":", 1)
    return f"{repository}{STANDIN_SUFFIX}:{tag}"


def on_standin(image: ImageSpec, standin: Standin) -> ImageSpec:
    """The same image, built on the stand-in: its bases, lower layers and name are the stand-in's."""
    bases = {"CUDA_DEVEL_IMAGE": standin.devel, "CUDA_RUNTIME_IMAGE": standin.runtime}
    args = {key: standin_ref(value) for key, value in image.args.items()}
    return replace(image, tag=standin_ref(image.tag), args={**bases, **args})


def standin_labels(image: ImageSpec, standin: Standin, engine: DockerEngine) -> dict[str, str]:
    """What a stand-in build labels over its Dockerfile's LABEL (every label, rendered once), which
    names the real CUDA base: the base the image was built on instead, and the stand-in mark."""
    base = standin.devel if image.stage == "devel" else standin.runtime
    return {
        "org.opencontainers.image.base.name": base,
        "org.opencontainers.image.base.digest": engine.image_id(base),
        STANDIN_LABEL: standin.labels[STANDIN_LABEL],
    }


def missing_git_sources(pins: Pins, plan: RenderPlan, target: str) -> list[str]:
    """The deepep layer's git sources the render holds no archive of."""
    pinned = pins.layer_pins("deepep", target)
    return [s.name for s in git_sources(pinned) if f"{CONTEXT_DIR}/deepep/{s.archive}" not in plan.files]


def github_reachable(pins: Pins) -> bool:
    return succeeds("git", "ls-remote", "--exit-code", "--", pins.deepep_repo, "HEAD", timeout=30)


def build_standin(engine: DockerEngine, pins: Pins, context: Path, console: Console) -> Standin:
    """Build the stand-in's OS, devel and runtime images (cached by the engine like any build)."""
    if pins.wheels.major != 13:
        raise EnvironmentProblem(
            f"the CUDA stand-in lays out CUDA 13's wheels (nvidia/cu13) only, not CUDA {pins.cuda_version}; "
            "fix: build where nvidia/cuda can be pulled"
        )
    standin = standin_for(pins)
    ensure_os_image(engine, standin)
    for stage, tag in (("devel", standin.devel), ("runtime", standin.runtime)):
        console.rule(f"[bold]stand-in[/] / {stage} -> {tag}")
        engine.build(context=context, dockerfile="standin/Dockerfile", stage=stage, tag=tag,
                     args={"OS_IMAGE": standin.os_image}, labels={})  # fmt: skip
    return standin


def build_target(
    *,
    pins: Pins,
    plan: RenderPlan,
    context: Path,
    target: str,
    engine: DockerEngine,
    console: Console,
    cache_registry: str = "",
    layers: Collection[str] | None = None,
) -> BuildReport:
    """Build `target` from the rendered context directory; see the module docstring.
    `cache_registry` (HOST[/NS]): BuildKit's registry cache in <it>/<IMAGE_REPOSITORY>-cache:<image>.
    `layers`: build only the images of these layers (layers.engine_layers); default every one."""
    cache = registry_cache(pins, engine, cache_registry, console)
    attest = provenance_args(engine, console)
    bases = (pins.cuda_devel_image, pins.cuda_runtime_image)
    missing = [ref for ref in bases if not (engine.image_exists(ref) or engine.pull(ref))]
    standin = None
    if missing:
        console.print(
            f"[yellow]cannot pull {escape(missing[0])}[/]: building on a CUDA stand-in made from "
            f"NVIDIA's CUDA {pins.cuda_version} wheels on Ubuntu, named *{STANDIN_SUFFIX}, never pushed"
        )
        standin = build_standin(engine, pins, context, console)
    report = BuildReport(target=target, standin=standin)
    absent = missing_git_sources(pins, plan, target)
    skip = None
    if absent and not github_reachable(pins):
        skip = (
            f"no {', '.join(absent)} archive in sources/ and {pins.deepep_repo} is unreachable; "
            "fix: epstack build --sources DIR (docs/guides/images.md#sources-offline)"
        )
    for image in plan.images_for(target):
        if layers is not None and image.layer not in layers:
            continue
        spec = on_standin(image, standin) if standin else image
        labels = standin_labels(image, standin, engine) if standin else {}
        if skip and layer_named(image.layer).from_git:
            report.not_built[spec.tag] = skip
            continue
        built = _build(
            engine, context=context, image=spec, labels=labels, console=console, cache=cache, attest=attest
        )
        report.built.append(built)
    return report


def ensure_disk(engine: DockerEngine, min_free_gb: int) -> None:
    """Refuse to start a build that cannot end: less than `min_free_gb` free in the engine's data
    root (a build that fills the disk fails an hour in, with ENOSPC). 0 turns the check off."""
    found = engine.free_disk()
    if found is None or min_free_gb == 0:
        return
    root, free = found
    if free < min_free_gb * 1e9:
        raise EnvironmentProblem(
            f"{root} (the Docker engine's data root) has {free / 1e9:.1f} GB free, under the "
            f"{min_free_gb} GB a cold build may write there; fix: free space (`docker builder prune` "
            "drops BuildKit's cache) or pass --min-free-gb 0 to build anyway"
        )


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


def provenance_args(engine: DockerEngine, console: Console) -> list[str]:
    """PROVENANCE_ARGS where the builder can attach and keep them; else none, said once."""
    if engine.provenance_supported():
        return list(PROVENANCE_ARGS)
    reason = "no buildx" if not engine.buildx else "buildx --load into an image store without attestations"
    console.print(f"[yellow]no provenance attestation[/]: {escape(engine.cli)} has {reason}")
    return []


def export_sboms(engine: DockerEngine, report: BuildReport, directory: Path) -> None:
    """Copy each built image's SBOM (SBOM_DIR/<layer>.cdx.json, written by its build after the
    guard) to DIRECTORY/<tag>.cdx.json, validated again here, and note it in the report."""
    from epstack.image import cdx  # noqa: PLC0415  (cyclonedx-python-lib: only when SBOMs are exported)

    for index, image in enumerate(report.built):
        code, text = engine.run_check(image.ref, "cat", [f"{SBOM_DIR}/{image.layer}.cdx.json"])
        errors = cdx.validate(text) if code == 0 else [f"no {SBOM_DIR}/{image.layer}.cdx.json (exit {code})"]
        if errors:
            raise CommandFailed(
                f"{image.ref}: its SBOM is not valid CycloneDX {cdx.SPEC_VERSION}: {errors[0]}"
            )
        path = directory / f"{image.ref.rsplit(':', 1)[1]}.cdx.json"
        write_file(path, text, what=f"the SBOM of {image.ref}")
        report.built[index] = replace(image, sbom=str(path))


def _build(
    engine: DockerEngine,
    *,
    context: Path,
    image: ImageSpec,
    labels: dict[str, str],
    console: Console,
    cache: Callable[[ImageSpec], list[str]],
    attest: Sequence[str] = (),
) -> BuiltImage:
    """`labels`: those set over the Dockerfile's LABEL (standin_labels), none for a real build."""
    console.rule(f"[bold]{image.layer}[/] / {image.stage} -> {escape(image.tag)}")
    start = time.monotonic()
    engine.build(
        context=context,
        dockerfile=image.dockerfile,
        stage=image.stage,
        tag=image.tag,
        args=image.args,
        labels=labels,
        cache=cache(image),
        attest=attest,
    )
    seconds = time.monotonic() - start
    console.print(f"[green]built[/] {escape(image.tag)} in {seconds:.1f} s")
    return BuiltImage(
        ref=image.tag,
        layer=image.layer,
        stage=image.stage,
        seconds=seconds,
        size=engine.image_size(image.tag),
    )
