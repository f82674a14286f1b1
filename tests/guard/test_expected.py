"""What the guard compares with: a layer pins file as render writes it into each image, or pins.env."""

from __future__ import annotations

from pathlib import Path

import pytest

from epstack.errors import BadInput
from epstack.guard.expected import load_expected
from epstack.pins.load import load_pins
from tests.conftest import PINS

ALL = ["python", "base", "deepep", "sglang"]


def layer_file(tmp_path: Path, layer: str, target: str) -> Path:
    """The <layer>.pins.env render puts in the image of `layer` for `target`."""
    path = tmp_path / f"{layer}.pins.env"
    pinned = load_pins(PINS).layer_pins(layer, target)
    path.write_text("".join(f"{key}={value}\n" for key, value in sorted(pinned.items())))
    return path


def test_a_layer_file_pins_the_patches_of_its_fabric(tmp_path: Path) -> None:
    pins = load_pins(PINS).as_env()
    ib = load_expected(layer_file(tmp_path, "sglang", "hopper-ib"), ALL)
    assert ib.deepep_patches == (pins["DEEPEP_PATCHES_IB"],)
    assert (ib.deepep_repo, ib.deepep_ref) == (pins["DEEPEP_REPO"], pins["DEEPEP_REF"])
    assert (ib.sglang_version, ib.torch_cuda_arch_list) == (pins["SGLANG_VERSION"], "9.0a")
    efa = load_expected(layer_file(tmp_path, "deepep", "hopper-efa"), ["python", "base", "deepep"])
    assert efa.deepep_patches == ()  # DEEPEP_PATCHES_EFA=none: no patches, still pinned


def test_pins_env_pins_no_one_set_of_patches() -> None:
    expected = load_expected(PINS, ALL)
    assert expected.deepep_patches is None
    assert expected.nccl_version == load_pins(PINS).nccl_version and expected.torch_cuda_arch_list == ""


def test_a_layer_file_without_a_key_its_scope_reads_is_refused_with_the_fix(tmp_path: Path) -> None:
    base = layer_file(tmp_path, "base", "hopper-ib")
    assert load_expected(base, ["python", "base"]).torch_cuda_tag == "cu130"
    with pytest.raises(BadInput) as refused:
        load_expected(base, ["python", "base", "deepep"])
    assert str(refused.value) == (
        f"{base}: no DEEPEP_REPO, which guard --layer deepep needs; "
        "fix: pass pins.env or the layer pins file of this image"
    )


def test_an_older_layer_file_without_cuda_minor_exceptions_has_none(tmp_path: Path) -> None:
    path = tmp_path / "python.pins.env"
    path.write_text("CUDA_VERSION=13.0.3\nNCCL_VERSION=2.30.7\nNVSHMEM_VERSION=3.4.5\n")
    expected = load_expected(path, ["python"])
    assert (expected.cuda_minor_exceptions, expected.deepep_patches) == ("none", None)
