"""`epstack publish`: guard every image a build made, push them, and write what was published.

`epstack publish push BUILD_REPORT --registry HOST[/NS] --out DIR` (BUILD_REPORT from `epstack build
--report`), in this order, so that nothing is pushed unless everything passed:
1. every built image runs its own guard (`guard-layer.sh $EPSTACK_GUARD_LAYER`, as at build time);
   DIR/guard-junit.xml gets one test case per guard row; a failed row fails the command (exit 1);
2. stand-in images (built where nvidia/cuda could not be pulled) go only to a loopback registry;
3. the images (`--push all`, or `top`: the target's top image only) are tagged HOST/NS/REPO:TAG,
   pushed, and their digest read back from the registry; an existing tag in an immutable repository
   is left alone when it already names the image, refused otherwise;
4. DIR/build-manifest.json (every image: tag, URI, digest, pins hash, guard) and DIR/image.env
   (IMAGE_URI, IMAGE_DIGEST, IMAGE_REF of the top image, for buildspec exported-variables).

`epstack publish pull` resolves a tag to its digest in the registry and pulls by that digest.
"""

from __future__ import annotations

import hashlib
import shlex
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from epstack import imagepaths
from epstack.aws.ecr import EcrRegistry
from epstack.checkrow import Check
from epstack.errors import BadInput, CommandFailed, EnvironmentProblem
from epstack.guard.report import GUARD_REPORT
from epstack.httpclient import is_loopback
from epstack.image.build import BUILD_REPORT
from epstack.image.buildmanifest import BUILD_MANIFEST, BuildManifest, ManifestImage
from epstack.image.engine import DockerEngine
from epstack.image.registry import ECR_HOST, DockerRegistry, LoopbackRegistry, Registry, split_registry
from epstack.image.render import source_revision
from epstack.image.standin import STANDIN_LABEL
from epstack.layers import LAYER_NAMES
from epstack.output import write_file
from epstack.pins.model import Pins

GUARD_SCRIPT = (
    f'rc=0; {imagepaths.SCRIPTS}/guard-layer.sh "$EPSTACK_GUARD_LAYER" >&2 || rc=$?; '
    f'cat "{imagepaths.REPORTS}/$EPSTACK_GUARD_LAYER.json" || exit 3; exit "$rc"'
)


@dataclass(frozen=True, kw_only=True)
class LabelledImage:
    tag: str
    layer: str
    stage: str
    target: str
    guard_layer: str
    standin: bool


def registry_for(host: str, engine: DockerEngine) -> Registry:
    """The backend for a registry host: ECR (boto3), loopback (its HTTP API), or any other registry
    the Docker credentials reach (`docker manifest inspect`)."""
    if is_loopback(host):
        return LoopbackRegistry(host=host)
    if ECR_HOST.match(host):
        return EcrRegistry.for_host(host)
    return DockerRegistry(host=host, cli=engine.cli)


def read_build_report(path: Path) -> tuple[str, list[str]]:
    """(target, built tags in build order) from `epstack build --report`."""
    report = BUILD_REPORT.read(path)
    if not report.built:
        raise BadInput(f"{path}: the build made no image; fix: look at the build's log")
    return report.target, [image.ref for image in report.built]


def inspect_built(engine: DockerEngine, tag: str) -> LabelledImage:
    labels = engine.labels(tag)
    layer = labels.get("io.epstack.layer", "")
    if layer not in LAYER_NAMES:
        raise BadInput(f"{tag}: no io.epstack.layer label; fix: publish images that epstack build made")
    return LabelledImage(
        tag=tag,
        layer=layer,
        stage=labels.get("io.epstack.stage", layer),
        target=labels.get("io.epstack.target", ""),
        guard_layer=engine.image_env(tag).get("EPSTACK_GUARD_LAYER", layer),
        standin=STANDIN_LABEL in labels,
    )


def guard_image(engine: DockerEngine, image: LabelledImage, console: Console) -> tuple[Check, ...]:
    console.rule(f"guard {image.guard_layer} in {image.tag}")
    code, out = engine.run_check(image.tag, "/bin/bash", ["-c", GUARD_SCRIPT])
    if not out.strip():
        raise CommandFailed(f"{image.tag}: the guard wrote no report (exit {code})")
    rows = GUARD_REPORT.loads(out, f"{image.tag}: the guard's report").checks
    if code not in (0, 1) or (code == 1) != any(row.failed for row in rows):
        raise CommandFailed(f"{image.tag}: the guard exited {code} with a report that does not say why")
    return rows


def junit(results: dict[str, tuple[Check, ...]]) -> str:
    """One suite per image, one case per guard row; a failing verdict fails, skipped skips."""
    suites = ET.Element("testsuites", name="epstack guard")
    for tag, rows in results.items():
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=tag,
            tests=str(len(rows)),
            failures=str(sum(r.failed for r in rows)),
            skipped=str(sum(r.verdict == "skipped" for r in rows)),
        )
        for row in rows:
            case = ET.SubElement(suite, "testcase", classname=f"{tag}.{row.layer}", name=row.component)
            text = f"expected {row.expected}, found {row.found}" + (f": {row.detail}" if row.detail else "")
            if row.failed:
                ET.SubElement(case, "failure", message=f"{row.verdict}: {text}")
            elif row.verdict == "skipped":
                ET.SubElement(case, "skipped", message=text)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def push_image(
    engine: DockerEngine, registry: Registry, *, namespace: str, tag: str, console: Console
) -> tuple[str, str]:
    """Push `tag` (repository:tag) to the registry; return (uri, digest) as the registry has them."""
    repository, _, image_tag = tag.rpartition(":")
    remote_repository = f"{namespace}/{repository}" if namespace else repository
    uri = f"{registry.host}/{remote_repository}:{image_tag}"
    existing = registry.digest(remote_repository, image_tag)
    if existing and registry.config_digest(remote_repository, image_tag) == engine.image_id(tag):
        console.print(f"{uri} already is this image ({existing}): not pushed again", markup=False)
        return uri, existing
    if existing and registry.tag_immutable(remote_repository):
        raise BadInput(
            f"{uri} exists with {existing} and the repository's tags are immutable, but this build's image "
            "differs; fix: find why the same pins built different bytes (the tag is the pins hash)"
        )
    engine.tag(tag, uri)
    try:
        engine.push(uri)
        pushed = [
            d.split("@", 1)[1]
            for d in engine.repo_digests(uri)
            if d.startswith(f"{registry.host}/{remote_repository}@")
        ]
    finally:
        engine.remove(uri)
    digest = registry.digest(remote_repository, image_tag)
    if digest is None or digest not in pushed:
        raise EnvironmentProblem(f"{uri}: pushed, but the registry says {digest} and Docker says {pushed}")
    console.print(f"[green]pushed[/] {escape(uri)} {digest}")
    return uri, digest


def publish(
    *,
    report: Path,
    registry: str,
    push: str,
    out: Path,
    pins: Pins,
    pins_file: Path,
    engine: DockerEngine,
    console: Console,
) -> BuildManifest:
    target, tags = read_build_report(report)
    host, namespace = split_registry(registry)
    images = [inspect_built(engine, tag) for tag in tags]
    standins = [image.tag for image in images if image.standin]
    if standins and not is_loopback(host):
        raise BadInput(
            f"{standins[0]} is a stand-in (built without the CUDA base); stand-ins go only to a loopback "
            f"registry, not {host}; fix: build where nvidia/cuda can be pulled"
        )
    for image in images:
        expected = pins.layer_hash(image.layer, image.target)
        if not image.tag.endswith(expected):
            raise BadInput(
                f"{image.tag}: not built from {pins_file} (pins hash {expected}); fix: publish with its pins"
            )
    backend = registry_for(host, engine)
    results = {image.tag: guard_image(engine, image, console) for image in images}
    write_file(out / "guard-junit.xml", junit(results), what="the JUnit report")
    failed = [tag for tag, rows in results.items() if any(r.failed for r in rows)]
    if failed:
        raise CommandFailed(
            f"the guard failed in {', '.join(failed)} ({out / 'guard-junit.xml'}); nothing pushed"
        )
    to_push = images if push == "all" else images[-1:]
    pushed: dict[str, tuple[str, str]] = {}
    for image in to_push:
        pushed[image.tag] = push_image(engine, backend, namespace=namespace, tag=image.tag, console=console)
    manifest = BuildManifest(
        target=target,
        registry=registry,
        source_revision=source_revision(),
        pins_sha256=hashlib.sha256(pins_file.read_bytes()).hexdigest(),
        images=tuple(
            ManifestImage(
                layer=image.layer,
                stage=image.stage,
                tag=image.tag,
                uri=pushed.get(image.tag, ("", ""))[0],
                digest=pushed.get(image.tag, ("", ""))[1],
                pins_hash=pins.layer_hash(image.layer, image.target),
                standin=image.standin,
                pushed=image.tag in pushed,
                guard_ok=True,
                guard_checks=len(results[image.tag]),
            )
            for image in images
        ),
    )
    top_uri, top_digest = pushed[images[-1].tag]
    write_file(out / "build-manifest.json", BUILD_MANIFEST.dumps(manifest), what="the build manifest")
    write_file(out / "image.env", exports(top_uri, top_digest), what="image.env")
    return manifest


def exports(uri: str, digest: str) -> str:
    repository = uri.rsplit(":", 1)[0]
    values = {"IMAGE_URI": uri, "IMAGE_DIGEST": digest, "IMAGE_REF": f"{repository}@{digest}"}
    return "".join(f"{k}={shlex.quote(v)}\n" for k, v in values.items())


def pull(*, registry: str, image: str, out: Path, engine: DockerEngine, console: Console) -> str:
    """Resolve repository:tag to its digest in the registry, pull by digest; return repository@digest."""
    host, namespace = split_registry(registry)
    repository, _, tag = image.rpartition(":")
    remote = f"{namespace}/{repository}" if namespace else repository
    digest = registry_for(host, engine).digest(remote, tag)
    if digest is None:
        raise BadInput(f"{host}/{remote}:{tag}: no such tag in the registry; fix: publish it first")
    ref = f"{host}/{remote}@{digest}"
    engine.pull_quiet(ref)
    if ref not in engine.repo_digests(ref):
        raise EnvironmentProblem(f"{ref}: pulled, but Docker does not list that digest")
    console.print(f"[green]pulled[/] {escape(ref)}")
    write_file(out / "image.env", exports(f"{host}/{remote}:{tag}", digest), what="image.env")
    return ref
