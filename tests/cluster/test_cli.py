"""`epstack cluster` in-process: images only by digest, the build manifest, and bad input as one line,
exit 2, nothing written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from epstack.cluster.image import parse_image
from epstack.commands.main import main
from epstack.image.buildmanifest import BUILD_MANIFEST, BuildManifest, ManifestImage
from epstack.pins.load import load_pins
from tests.cluster.conftest import DIGEST, IMAGE, REGISTRY, load_all, render
from tests.conftest import PINS, pins_variant

SERVE = ["cluster", "render", "--platform", "k8s", "--job", "serve", "--nodes", "2", "--gpus-per-node", "8"]


def _bad(capsys: pytest.CaptureFixture[str], tmp_path: Path, *args: str) -> str:
    out = tmp_path / "never.yaml"
    assert main([*args, "--out", str(out)]) == 2
    assert not out.exists() and not list(tmp_path.glob(".never.yaml*"))
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "fix:" in lines[0], captured.err
    assert "Traceback" not in captured.err
    return lines[0]


@pytest.mark.parametrize(
    ("image", "why"),
    [
        (f"{REGISTRY}:latest", "no digest"),
        (f"{REGISTRY}@sha256:abc", "is not sha256:<64 lowercase hex>"),
        (f"{REGISTRY.upper()}@{DIGEST}", "not an image reference"),
    ],
)
def test_image_without_a_proper_digest_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, image: str, why: str
) -> None:
    line = _bad(capsys, tmp_path, *SERVE, "--fabric", "ib", "--image", image)
    assert "--image" in line and why in line


def test_parse_image_keeps_registry_port_and_tag() -> None:
    ref = parse_image(f"registry.local:5000/team/epstack:v1@{DIGEST}")
    assert (ref.repository, ref.tag, ref.digest) == ("registry.local:5000/team/epstack", "v1", DIGEST)
    assert parse_image(f"registry.local:5000/epstack@{DIGEST}").tag == ""


def test_efa_across_nodes_needs_a_gin_capable_nccl(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The shipped pins (NCCL 2.32.6) cross nodes over EFA; torch's own 2.30.7 would not."""
    below = pins_variant(tmp_path, NCCL_VERSION="2.30.7")
    line = _bad(capsys, tmp_path, *SERVE, "--fabric", "efa", "--image", IMAGE, "--pins", str(below))
    assert "NCCL >= 2.31.2" in line and "NCCL_VERSION=2.30.7" in line
    assert main([*SERVE, "--fabric", "efa", "--image", IMAGE, "--out", str(tmp_path / "ok.yaml")]) == 0


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--fabric", "ib"], "no image"),
        (
            ["--fabric", "ib", "--image", IMAGE, "--profile", "tiny", "--nodes", "3"],
            "128 experts do not split",
        ),
        (["--fabric", "ib", "--image", IMAGE, "--name", "Serve_1"], "--name Serve_1"),
        (["--fabric", "ib", "--image", IMAGE, "--arch", "ampere"], "ampere-ib is not a target"),
        (["--fabric", "ib", "--image", IMAGE, "--manifest", "m.json"], "--image and --manifest"),
    ],
)
def test_bad_flags(capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], text: str) -> None:
    assert text in _bad(capsys, tmp_path, *SERVE, *args)


def _image(tag: str, digest: str = DIGEST, *, pushed: bool = True) -> ManifestImage:
    """An image of build-manifest.json as `epstack publish` writes it."""
    layer = tag.split("-", 1)[0]
    uri, digest = (f"{REGISTRY}:{tag}", digest) if pushed else ("", "")
    return ManifestImage(layer=layer, stage=layer, tag=f"epstack:{tag}", uri=uri, digest=digest,
                         pins_hash=tag[-12:], standin=False, pushed=pushed, guard_ok=True,
                         guard_checks=20)  # fmt: skip


def _manifest(tmp_path: Path, *images: ManifestImage) -> Path:
    path = tmp_path / "build-manifest.json"
    manifest = BuildManifest(target="hopper-ib", registry=REGISTRY, source_revision="0" * 40,
                             pins_sha256="0" * 64, images=images)  # fmt: skip
    path.write_text(BUILD_MANIFEST.dumps(manifest))
    return path


def test_manifest_gives_the_image_built_from_these_pins(tmp_path: Path) -> None:
    """The image tagged as these pins tag it, by digest; another layer's image and an image that was
    not pushed are left alone."""
    tag = load_pins(PINS).image_tag("sglang", "hopper-ib")
    deepep = tag.replace("sglang", "deepep", 1)
    manifest = _manifest(tmp_path, _image(deepep, pushed=False), _image(deepep, "sha256:" + "1" * 64),
                         _image(tag))  # fmt: skip
    text = render(tmp_path, *SERVE[1:], "--fabric", "ib", "--manifest", str(manifest))
    images = {c["image"] for o in load_all(text) if o["kind"] == "LeaderWorkerSet"
              for t in ("leaderTemplate", "workerTemplate")
              for c in o["spec"]["leaderWorkerTemplate"][t]["spec"]["containers"]}  # fmt: skip
    assert images == {f"{REGISTRY}:{tag}@{DIGEST}"}


def test_a_manifest_without_the_image_of_these_pins(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = _manifest(tmp_path, _image("sglang-0.5.23-other"))
    line = _bad(capsys, tmp_path, *SERVE, "--fabric", "ib", "--manifest", str(manifest))
    assert f"{manifest}: no image tagged sglang-0.5.23-" in line


@pytest.mark.parametrize(
    ("content", "text"),
    [
        # The tolerant format read before build manifests had a schema: refused, with the fix.
        ({"images": [{"ref": f"{REGISTRY}:x", "digest": DIGEST}]}, "no schema, so not a build manifest"),
        ({"schema": "build-manifest/9", "images": []}, "schema 'build-manifest/9' unknown, this epstack"),
        ({"schema": "build-manifest/1", "target": "t"}, "registry: field required; fix:"),
        ("not json", "not JSON (Expecting value, line 1)"),
    ],
)
def test_bad_manifest(capsys: pytest.CaptureFixture[str], tmp_path: Path, content: object, text: str) -> None:
    manifest = tmp_path / "build-manifest.json"
    manifest.write_text(content if isinstance(content, str) else json.dumps(content))
    line = _bad(capsys, tmp_path, *SERVE, "--fabric", "ib", "--manifest", str(manifest))
    assert line.startswith(f"error: {manifest}: ") and text in line


def test_missing_manifest(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = _bad(capsys, tmp_path, *SERVE, "--fabric", "ib", "--manifest", str(tmp_path / "none.json"))
    assert "none.json: no such file; fix: pass the path of a build manifest" in line


def test_a_fifo_manifest_is_refused_not_waited_on(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.json")
    line = _bad(capsys, tmp_path, *SERVE, "--fabric", "ib", "--manifest", str(tmp_path / "fifo.json"))
    assert "fifo.json: a FIFO, not a build manifest" in line


def test_print_command_is_only_for_serve(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    args = ["cluster", "render", "--platform", "slurm", "--job", "elastic-smoke", "--nodes", "1"]
    line = _bad(capsys, tmp_path, *args, "--gpus-per-node", "8", "--print-command")
    assert "--print-command" in line


def test_print_command_without_image(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SERVE, "--fabric", "ib", "--print-command", "--profile", "qwen3-30b-a3b"]) == 0
    out = capsys.readouterr().out
    assert "# node 0" in out and "# node 1" in out and "--node-rank 1" in out
    # max(ceil(8192 / 16 ranks), decode graph 256)
    assert "SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK=512" in out
