"""Image references by digest (epstack.cluster.image): --image, the build manifest's image of these
pins, the target from --arch and --fabric, and each refusal's one line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from epstack.cluster.image import (
    PLACEHOLDER,
    ImageRef,
    chosen_image,
    image_for_tag,
    parse_image,
    pins_target,
    read_manifest,
)
from epstack.errors import BadInput
from epstack.pins.load import load_pins
from tests.cluster.conftest import DIGEST, REGISTRY
from tests.cluster.test_cli import _image, _manifest
from tests.conftest import PINS

OTHER = "sha256:" + "1" * 64


def _refused(call: Callable[..., object], *args: object, **kwargs: object) -> str:
    """The one line of the BadInput `call` raises."""
    with pytest.raises(BadInput) as info:
        call(*args, **kwargs)
    return str(info.value)


# ---- --image -------------------------------------------------------------------------------------


def test_a_reference_by_digest_names_the_digest_and_the_tag_for_people() -> None:
    ref = parse_image(f"  {REGISTRY}:v1@{DIGEST}\n")
    assert ref == ImageRef(repository=REGISTRY, tag="v1", digest=DIGEST)
    assert ref.ref == f"{REGISTRY}:v1@{DIGEST}" and ref.short == "4f" * 6
    assert parse_image(f"{REGISTRY}@{DIGEST}").ref == f"{REGISTRY}@{DIGEST}"
    assert PLACEHOLDER.ref == "IMAGE@sha256:" + "0" * 64


def test_an_image_without_a_digest_is_refused_with_the_flag_named() -> None:
    assert _refused(parse_image, "epstack:latest") == (
        "--image epstack:latest: no digest; fix: name the image as REPOSITORY[:TAG]@sha256:<64 hex> "
        "(a tag can move, a digest cannot)"
    )


def test_a_malformed_reference_is_refused_with_an_example() -> None:
    line = _refused(parse_image, "Epstack@sha256:abc", what="--the-image")
    assert line.startswith("--the-image Epstack@sha256:abc: not an image reference (")
    assert line.endswith(
        "); fix: write e.g. 123456789012.dkr.ecr.us-east-1.amazonaws.com/epstack:TAG@sha256:<64 hex>"
    )


# ---- the build manifest --------------------------------------------------------------------------


def test_the_manifest_gives_each_pushed_image_by_digest(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, _image("deepep-a", pushed=False), _image("sglang-b", OTHER))
    assert read_manifest(manifest) == [ImageRef(repository=REGISTRY, tag="sglang-b", digest=OTHER)]


def test_a_bad_digest_in_the_manifest_names_the_file_and_the_image(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, _image("deepep-a", pushed=False), _image("sglang-b", "sha256:abc"))
    assert _refused(read_manifest, manifest).startswith(
        f"{manifest}: images.1 {REGISTRY}:sglang-b@sha256:abc: "
    )


def test_the_image_of_a_tag_is_found_among_others(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, _image("deepep-a", OTHER), _image("sglang-b"))
    assert image_for_tag(manifest, "sglang-b") == ImageRef(repository=REGISTRY, tag="sglang-b", digest=DIGEST)


def test_a_missing_tag_lists_the_tags_the_manifest_has(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, _image("sglang-b"), _image("deepep-a", OTHER), _image("sglang-b"))
    assert _refused(image_for_tag, manifest, "sglang-c") == (
        f"{manifest}: no image tagged sglang-c (the tag these pins give it; the manifest has deepep-a, "
        "sglang-b); fix: build and push it from these pins, or pass --image REPOSITORY@sha256:..."
    )


def test_a_manifest_with_nothing_pushed_has_no_tags(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, _image("sglang-b", pushed=False))
    assert "the manifest has none);" in _refused(image_for_tag, manifest, "sglang-b")


def test_two_digests_for_the_tag_are_refused(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, _image("sglang-b"), _image("sglang-b", OTHER))
    assert _refused(image_for_tag, manifest, "sglang-b") == (
        f"{manifest}: two digests for tag sglang-b; fix: keep the one the build pushed"
    )


# ---- the target and the choice of image ----------------------------------------------------------


def test_arch_and_fabric_default_to_the_pins_default_target() -> None:
    pins = load_pins(PINS)  # DEFAULT_TARGET=hopper-ib
    assert pins_target(pins, arch=None, fabric=None) == ("hopper-ib", "ib")
    assert pins_target(pins, arch=None, fabric="efa") == ("hopper-efa", "efa")
    assert pins_target(pins, arch="blackwell", fabric=None) == ("blackwell-ib", "ib")


def test_a_default_target_whose_arch_has_a_hyphen(tmp_path: Path) -> None:
    text = PINS.read_text().replace("ARCH_HOPPER=", "ARCH_GRACE_HOPPER=")
    pins_file = tmp_path / "pins.env"
    pins_file.write_text(text.replace("DEFAULT_TARGET=hopper-ib", "DEFAULT_TARGET=grace-hopper-ib"))
    pins = load_pins(pins_file)
    assert pins_target(pins, arch=None, fabric=None) == ("grace-hopper-ib", "ib")
    assert pins_target(pins, arch=None, fabric="efa") == ("grace-hopper-efa", "efa")


def test_a_target_the_pins_do_not_have_lists_theirs() -> None:
    assert _refused(pins_target, load_pins(PINS), arch="ampere", fabric=None) == (
        "--arch ampere --fabric ib: ampere-ib is not a target; fix: use one of "
        "hopper-efa, hopper-ib, blackwell-efa, blackwell-ib"
    )


def test_the_image_is_named_by_image_or_by_manifest_never_both(tmp_path: Path) -> None:
    pins = load_pins(PINS)
    tag = pins.image_tag("sglang", "hopper-efa")
    manifest = _manifest(tmp_path, _image(pins.image_tag("sglang", "hopper-ib"), OTHER), _image(tag))
    assert chosen_image(pins, "hopper-efa", image=None, manifest=manifest).ref == f"{REGISTRY}:{tag}@{DIGEST}"
    assert chosen_image(pins, "hopper-efa", image=f"{REGISTRY}@{OTHER}", manifest=None).digest == OTHER
    both = _refused(chosen_image, pins, "hopper-ib", image=f"{REGISTRY}@{OTHER}", manifest=manifest)
    assert both == "--image and --manifest: fix: pass one of them"
    assert _refused(chosen_image, pins, "hopper-ib", image=None, manifest=None) == (
        "no image; fix: pass --image REPOSITORY[:TAG]@sha256:<64 hex> or --manifest BUILD_MANIFEST.json"
    )
