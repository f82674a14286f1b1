"""The layer records: every module reads a layer's keys, locks, stages and guard scopes from them."""

from __future__ import annotations

from epstack import layers
from epstack.fabric import FABRICS
from epstack.guard.run import SCOPE_CHECKS
from epstack.image.render import plan_render, source_date
from epstack.layers import BASE, DEEPEP, SGLANG, VLLM, engine_layers, guard_scopes, up_to, venv_locks
from epstack.pins.load import load_pins
from epstack.pins.model import Pins
from tests.conftest import PINS

# What a target itself decides (its name, archs and fabric), not a layer.
TARGET_WIDE = {"FABRICS", "DEFAULT_TARGET", "IMAGE_REPOSITORY"}


def test_every_pins_key_belongs_to_exactly_one_layer_or_fabric() -> None:
    owners: dict[str, list[str]] = {}
    for layer in layers.LAYERS:
        for key in layer.pin_keys:
            owners.setdefault(key, []).append(layer.name)
    for fabric in FABRICS.values():
        for layer_name, fabric_keys in fabric.pin_keys.items():
            assert layer_name in layers.LAYER_NAMES
            for key in fabric_keys:
                owners.setdefault(key, []).append(f"{fabric.name}/{layer_name}")
    keys = {field.alias for field in Pins.model_fields.values() if field.alias}
    assert {key for key, names in owners.items() if len(names) != 1} == set()
    assert keys - TARGET_WIDE == set(owners)


def test_the_guard_has_checks_for_every_scope_in_order() -> None:
    assert list(SCOPE_CHECKS) == [scope.name for scope in layers.GUARD_SCOPES]


def test_a_layer_on_deepep_beside_sglang_gets_its_own_chain() -> None:
    """vllm, as docs/contributing.md's "Adding a layer" adds one: its own chain over the same deepep."""
    assert up_to("vllm") == (BASE, DEEPEP, VLLM) and up_to("sglang") == (BASE, DEEPEP, SGLANG)
    assert layers.SERVED == (SGLANG, VLLM) and layers.TOP is SGLANG
    assert engine_layers("vllm") == ("base", "deepep", "vllm")
    assert engine_layers("all") == ("base", "deepep", "sglang", "vllm")
    assert venv_locks("vllm") == ("base", "vllm")
    scopes, owner = guard_scopes("vllm")
    assert [scope.name for scope in scopes] == ["python", "base", "deepep", "vllm"]
    assert owner is VLLM
    assert [scope.name for scope in guard_scopes("deepep")[0]] == ["python", "base", "deepep"]
    assert [scope.name for scope in guard_scopes("python")[0]] == ["python"]


def test_each_image_is_built_on_the_stages_of_the_layer_below() -> None:
    pins = load_pins(PINS)
    plan = plan_render(pins, created=source_date({"SOURCE_DATE_EPOCH": "0"}), revision="0" * 40)
    images = {image.name: image for image in plan.images_for("hopper-efa")}
    assert list(images) == [
        "hopper-efa-devel", "hopper-efa-base", "hopper-efa-deepep", "hopper-efa-sglang", "hopper-efa-vllm",
    ]  # fmt: skip
    assert images["hopper-efa-deepep"].args == {
        "DEVEL_IMAGE": images["hopper-efa-devel"].tag,
        "BASE_IMAGE": images["hopper-efa-base"].tag,
    }
    assert images["hopper-efa-sglang"].depends_on == ("hopper-efa-deepep",)
    assert images["hopper-efa-vllm"].depends_on == ("hopper-efa-deepep",)
    assert images["hopper-efa-devel"].tag == images["hopper-efa-base"].tag.replace(":base-", ":devel-")
    base_name = "org.opencontainers.image.base.name"
    assert images["hopper-efa-devel"].labels[base_name] == pins.cuda_devel_image.split("@")[0]
    assert images["hopper-efa-base"].labels[base_name] == pins.cuda_runtime_image.split("@")[0]
    created = [name for name, image in images.items() if "org.opencontainers.image.created" in image.labels]
    assert created == ["hopper-efa-sglang", "hopper-efa-vllm"], "the served images only"


def test_a_layer_holds_the_pins_of_its_chain_and_its_fabric_only() -> None:
    pins = load_pins(PINS)
    base, deepep = pins.layer_pins("base", "hopper-efa"), pins.layer_pins("deepep", "hopper-ib")
    assert "EFA_INSTALLER_VERSION" in base and "RDMA_CORE_VERSION" not in base
    assert "TORCH_CUDA_ARCH_LIST" not in base and "DEEPEP_PATCHES_EFA" not in base
    assert deepep["TORCH_CUDA_ARCH_LIST"] == "9.0a" and "DEEPEP_PATCHES_IB" in deepep
    assert "DEEPEP_PATCHES_EFA" not in deepep and "SGLANG_VERSION" not in deepep
