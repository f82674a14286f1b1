"""Render the Jinja2 templates (images/, epstack.resources) into a self-contained build context,
deterministically.

Output (DIR):
  docker-bake.json             every image of every target, for `cd DIR && docker buildx bake`
  epstack-render.json          the same plan as epstack reads it (tags, stages, args, labels)
  scripts/, src/, sources/     what the Dockerfiles COPY (sources/: checked `git archive` tarballs)
  targets/<target>/*.Dockerfile, the layer pins files, and locks/ (the lock files each install step
                               installs, copied from the locks folder; epstack.python.lock)
  standin/                     the CUDA stand-in, for machines that cannot pull nvidia/cuda

Same pins and same sources give byte-identical files. DIR must be new or made by epstack; it is
written beside itself and swapped in whole (epstack.output), so a failure leaves DIR as it was.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import jinja2

from epstack import __version__, imagepaths, resources
from epstack.cmd import output_if_ok
from epstack.errors import BadInput, shown
from epstack.fabric import COMMON_IMAGE_ENV, FABRICS
from epstack.image.sources import context_files as sources_context
from epstack.image.standin import render_files as standin_files
from epstack.image.standin import standin_for
from epstack.layers import LAYERS, SERVED, TOP, Layer, layer_named
from epstack.output import check_output, replace_output
from epstack.pins.model import Pins
from epstack.python.lock import lock_specs, stale_locks
from epstack.python.lockfile import UV_BOOTSTRAP, LockFile, entry_text, lock_path, locks_dir, read_lock
from epstack.python.resolve import INSTALL_FLAGS
from epstack.stack import CUDA_JIT_TOOLKIT


@dataclass(frozen=True, kw_only=True)
class ImageSpec:
    """One image to build: a stage of one layer's Dockerfile for one target."""

    name: str  # bake target name, e.g. hopper-efa-deepep
    target: str
    layer: str  # base | deepep | sglang | vllm
    stage: str  # the Dockerfile stage built
    dockerfile: str  # relative to the render directory (the build context)
    tag: str  # full image reference
    args: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class RenderPlan:
    """Everything a render produces, in memory, before anything is written."""

    files: dict[str, bytes]
    images: tuple[ImageSpec, ...]
    default_target: str
    stale_locks: tuple[str, ...] = ()  # "<lock>: stale (why)" for each lock these pins no longer match

    def images_for(self, target: str) -> list[ImageSpec]:
        return [image for image in self.images if image.target == target]


def source_date(env: dict[str, str] | None = None, *, repository: Path | None = None) -> datetime:
    """SOURCE_DATE_EPOCH, else the time of the last commit of `repository` (the pins file's folder;
    default the working directory), else the epoch: never 'now'."""
    env = dict(os.environ) if env is None else env
    if "SOURCE_DATE_EPOCH" in env:
        value = env["SOURCE_DATE_EPOCH"]
        try:
            if not value.isascii() or not value.isdigit():
                raise ValueError
            return datetime.fromtimestamp(int(value), tz=UTC)
        except (ValueError, OverflowError, OSError):
            raise BadInput(
                f"SOURCE_DATE_EPOCH={shown(value)} is not a time (seconds since 1970, decimal digits only, "
                "before the year 10000); fix: set it to e.g. the last commit's `git log -1 --format=%ct`"
            ) from None
    commit_time = _git(repository, "log", "-1", "--format=%ct")
    return datetime.fromtimestamp(int(commit_time) if commit_time.isdigit() else 0, tz=UTC)


def source_revision(repository: Path | None = None) -> str:
    """The git commit of `repository` (the pins file's folder; default the working directory), or
    'unknown' outside a checkout."""
    return _git(repository, "rev-parse", "HEAD") or "unknown"


def _git(repository: Path | None, *args: str) -> str:
    return (output_if_ok("git", "-C", str(repository or "."), *args) or "").strip()


def templates() -> jinja2.Environment:
    """The Jinja2 environment of images/ (epstack.resources): strict, no escaping (Dockerfiles)."""
    return jinja2.Environment(
        loader=resources.template_loader(),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def plan_render(
    pins: Pins, *, created: datetime, revision: str, sources: Path | None = None, locks: Path | None = None
) -> RenderPlan:
    """Render every template for every target, in memory; `sources`: a folder of `git archive` tarballs;
    `locks`: the lock folder (default $EPSTACK_LOCKS or ./locks). A missing lock is BadInput; a stale
    one is rendered and named in the plan (`epstack build` refuses it)."""
    env = templates()
    files = resources.context_scripts()
    files.update({f"src/{name}": data for name, data in resources.tool_sources().items()})
    # One sources/ for every target: the downloads and git sources of each target's layers.
    base = {key: value for t in pins.targets for key, value in pins.layer_pins("base", t).items()}
    deepep = {key: value for t in pins.targets for key, value in pins.layer_pins("deepep", t).items()}
    files.update(sources_context(sources, base, deepep))
    standin = standin_for(pins)
    for name, text in standin_files(pins).items():
        files[f"standin/{name}"] = text.encode()
    files["standin/Dockerfile"] = (
        env.get_template("standin/Dockerfile.j2")
        .render(pins=pins, standin=standin, cuda_home=pins.cuda_home, epstack_version=__version__)
        .encode()
    )

    images: list[ImageSpec] = []
    lock_files = _lock_files(pins, locks_dir(locks))
    lock_excludes = {spec.name: spec.excludes for spec in lock_specs(pins)}
    for target in pins.targets:
        for name, text in lock_files.items():
            files[f"targets/{target}/locks/{name}"] = text.encode()
        target_images = _target_images(pins, target, created=created, revision=revision)
        fabric = target.rsplit("-", 1)[1]
        context = {
            "pins": pins,
            "target": target,
            "arch": target.rsplit("-", 1)[0],
            "fabric": fabric,
            "fabric_env": FABRICS[fabric].image_env(pins.gin_type(fabric)),
            "fabric_install": FABRICS[fabric].install_template,
            "common_env": COMMON_IMAGE_ENV,
            "images": {image.stage: image for image in target_images},
            "base_packages": tuple(pins.base_packages),
            "lock_excludes": lock_excludes,
            "install_flags": " ".join(INSTALL_FLAGS),
            "cuda_home": pins.cuda_home,
            "cuda_jit_copies": cuda_jit_copies(pins.cuda_home),
            "epstack_version": __version__,
            "paths": imagepaths,
        }
        for layer in LAYERS:
            stem = f"targets/{target}/{layer.name}"
            files[f"{stem}.pins.env"] = _layer_pins_file(pins, layer.name, target).encode()
            files[f"{stem}.Dockerfile"] = env.get_template(layer.template).render(context).encode()
        images.extend(target_images)
    files["epstack-render.json"] = _json_bytes(
        {"default_target": pins.default_target, "images": [vars(image) for image in images]}
    )
    files["docker-bake.json"] = _json_bytes(_bake(images, pins.default_target))
    stale = tuple(str(entry) for entry in stale_locks(pins, locks_dir(locks)))
    return RenderPlan(
        files=files, images=tuple(images), default_target=pins.default_target, stale_locks=stale
    )


def plan_checkout(
    pins: Pins, pins_file: Path, *, sources: Path | None = None, locks: Path | None = None
) -> RenderPlan:
    """plan_render dated and stamped by the checkout of `pins_file` (source_date, source_revision)."""
    return plan_render(
        pins,
        created=source_date(repository=pins_file.parent),
        revision=source_revision(pins_file.parent),
        sources=sources,
        locks=locks,
    )


def cuda_jit_copies(cuda_home: str) -> list[tuple[tuple[str, ...], str]]:
    """stack.CUDA_JIT_TOOLKIT as COPY sources and destination: a folder's files in one COPY, then each
    folder in one of its own (a COPY of several sources would spill a folder's contents)."""
    files: dict[str, list[str]] = {}
    folders = []
    for part, _why in CUDA_JIT_TOOLKIT:
        if part.endswith("/"):
            folders.append(((f"{cuda_home}/{part}",), f"{cuda_home}/{part}"))
        else:
            files.setdefault(part.rsplit("/", 1)[0], []).append(f"{cuda_home}/{part}")
    return [(tuple(paths), f"{cuda_home}/{parent}/") for parent, paths in files.items()] + folders


def _lock_files(pins: Pins, directory: Path) -> dict[str, str]:
    """The locks every target installs (no Python input depends on the target), and the base lock's uv
    entry alone, which pip installs first to bootstrap uv in a new venv."""
    files = {}
    for spec in lock_specs(pins):
        lock = read_lock(directory, spec.name)
        if lock is None:
            raise BadInput(
                f"{lock_path(directory, spec.name)}: no such lock; fix: epstack pins lock --locks {directory}"
            )
        files[f"{spec.name}.txt"] = lock.text
        if spec.name == "base":
            files[UV_BOOTSTRAP] = entry_text(lock, "uv")
        engine = next((layer for layer in SERVED if layer.locks == (spec.name,)), None)
        if engine is not None:
            files.update(_engine_install_steps(lock, engine.family))
    return files


def _engine_install_steps(lock: LockFile, family: tuple[str, ...]) -> dict[str, str]:
    """A served layer's lock in two install steps: the closure without the engine's family, then the
    family (layers.Layer.family), so that moving the family re-pulls only the last layer."""
    names = [package.name for package in lock.resolution.packages]
    return {
        f"{lock.name}-{step}.txt": "".join(
            entry_text(lock, name) for name in names if name.startswith(family) == in_family
        )
        for step, in_family in (("closure", False), ("family", True))
    }


def _layer_pins_file(pins: Pins, layer: str, target: str) -> str:
    """What the image of `layer` was pinned to: the guard's expectations inside that image. Only the
    layer's own keys and those below, so an upper pin never changes (or rebuilds) a lower image."""
    lines = [f"# {layer} layer of {target}, rendered from pins.env by epstack; read by `epstack guard`."]
    lines += [f"{key}={value}" for key, value in sorted(pins.layer_pins(layer, target).items())]
    return "\n".join(lines) + "\n"


def _target_images(pins: Pins, target: str, *, created: datetime, revision: str) -> list[ImageSpec]:
    """The images of a target, bottom-up: each stage of each layer (epstack.layers), each built on the
    images of the layer below (<STAGE>_IMAGE build arguments)."""
    images: list[ImageSpec] = []
    for layer in LAYERS:
        below_images = [image for image in images if image.layer == layer.on]
        for stage in layer.stages:
            images.append(
                ImageSpec(
                    name=f"{target}-{stage}",
                    target=target,
                    layer=layer.name,
                    stage=stage,
                    dockerfile=f"targets/{target}/{layer.name}.Dockerfile",
                    tag=_stage_ref(pins, layer, stage, target),
                    labels=_labels(pins, layer, stage, target, created=created, revision=revision),
                    args={f"{image.stage.upper()}_IMAGE": image.tag for image in below_images},
                    depends_on=tuple(image.name for image in below_images),
                )
            )
    return images


def _stage_ref(pins: Pins, layer: Layer, stage: str, target: str) -> str:
    """The layer's image reference, its stage's name in place of the layer's (epstack:devel-cu13.0-...)."""
    ref = pins.image_ref(layer.name, target)
    return ref.replace(f":{layer.name}-", f":{stage}-", 1)


def _labels(
    pins: Pins, layer: Layer, stage: str, target: str, *, created: datetime, revision: str
) -> dict[str, str]:
    """Pins and base digest on every layer; created and revision on the served ones only, so a new
    commit changes no lower image (and rebuilds nothing below them)."""
    base_image = pins.cuda_devel_image if stage == layer.devel_stage else pins.cuda_runtime_image
    result = {
        "org.opencontainers.image.title": f"epstack {layer.name} ({target})",
        "org.opencontainers.image.vendor": "epstack",
        "org.opencontainers.image.version": pins.image_tag(layer.name, target),
        "org.opencontainers.image.base.name": base_image.split("@", maxsplit=1)[0],
        "org.opencontainers.image.base.digest": base_image.split("@")[1],
        "io.epstack.target": target,
        "io.epstack.layer": layer.name,
        "io.epstack.stage": stage,
    }
    if layer in SERVED:
        result["org.opencontainers.image.created"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
        result["org.opencontainers.image.revision"] = revision
    pinned = pins.layer_pins(layer.name, target)
    result.update({f"io.epstack.pin.{key.lower()}": value for key, value in sorted(pinned.items())})
    return result


def _bake(images: list[ImageSpec], default_target: str) -> dict[str, object]:
    """A `docker buildx bake` file; named contexts chain each layer onto the one below."""
    by_name = {image.name: image for image in images}
    targets: dict[str, object] = {}
    for image in images:
        entry: dict[str, object] = {
            "context": ".",
            "dockerfile": image.dockerfile,
            "target": image.stage,
            "tags": [image.tag],
        }
        if image.args:
            entry["args"] = image.args
        if image.depends_on:
            entry["contexts"] = {by_name[dep].tag: f"target:{dep}" for dep in image.depends_on}
        targets[image.name] = entry
    return {
        "group": {
            "default": {"targets": [f"{default_target}-{TOP.stages[-1]}"]},
            "all": {"targets": [image.name for image in images if layer_named(image.layer) in SERVED]},
        },
        "target": targets,
    }


def _json_bytes(data: object) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def output_directory(
    out: str, pins_path: Path, *, sources: Path | None = None, locks: Path | None = None
) -> Path:
    """Where a render may go (epstack.output rules): never the pins file's checkout, an input (the
    package and its resources, the locks, the pins, the sources), or others' files."""
    inputs = [*resources.inputs(), locks_dir(locks), pins_path, *([sources] if sources else [])]
    return check_output(out, checkout=pins_path.parent, inputs=inputs)


def write_plan(plan: RenderPlan, out: Path) -> None:
    """Write every file of the plan as the whole of `out`, swapped in at once (see epstack.output)."""
    scripts = [relative for relative in plan.files if relative.endswith(".sh")]
    replace_output(out, plan.files, executable=scripts)
