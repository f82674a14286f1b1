"""The pins rules users need: canonical versions, valid and short tags, registry ports, clean lists,
archs against the CUDA minor, real snapshots, target names that make tags, layer pins files
validated, a bash-style file reported whole, and CUDA 12 rendered as CUDA 12 throughout."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from epstack.cli import main
from epstack.errors import BadInput
from epstack.guard.expected import load_expected
from epstack.pins.load import load_pins, read_layer_pins
from epstack.stack import arch_problem, archs_for
from tests.conftest import PINS, pins_variant

DIGEST = "sha256:" + "0" * 64


def problems(path: Path) -> str:
    with pytest.raises(BadInput) as caught:
        load_pins(path)
    return str(caught.value)


@pytest.mark.parametrize(
    ("value", "canonical"),
    [("v2.30.7", "2.30.7"), ("2.30.07", "2.30.7"), ("2.30.7.0", "2.30.7"), ("2.30.7-post1", "2.30.7.post1")],
)
def test_versions_are_canonical(tmp_path: Path, value: str, canonical: str) -> None:
    message = problems(pins_variant(tmp_path, NCCL_VERSION=value))
    assert "not written canonically" in message and f"fix: write {canonical}" in message


def test_a_canonical_four_part_version_stays(tmp_path: Path) -> None:
    assert load_pins(pins_variant(tmp_path, RDMA_CORE_VERSION="50.0-2ubuntu0.2", UV_VERSION="0.13.9"))


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("FABRICS", "efa,,ib", "empty member"),
        ("FABRICS", "efa,ib,", "empty member"),
        ("FABRICS", "ib,ib", "lists ib twice"),
        ("ARCH_HOPPER", "9.0a,9.0a", "lists 9.0a twice"),
        ("ARCH_HOPPER", ",9.0a", "empty member"),
        ("UBUNTU_SNAPSHOT", "20261345T000000Z", "not a UTC instant"),
        ("UBUNTU_SNAPSHOT", "20260230T000000Z", "not a UTC instant"),
        ("UBUNTU_SNAPSHOT", "20261115T250000Z", "not a UTC instant"),
        ("IMAGE_REPOSITORY", "Epstack", "not a repository path component"),
        ("IMAGE_REPOSITORY", "host:99999999/epstack", "not a registry host"),
        ("CUDA_DEVEL_IMAGE", f"nvidia/cuda@{DIGEST}", "has no tag"),
        ("CUDA_DEVEL_IMAGE", f"nvidia/cuda:{'x' * 129}@{DIGEST}", "over the 128"),
    ],
)
def test_value_rules(tmp_path: Path, key: str, value: str, words: str) -> None:
    message = problems(pins_variant(tmp_path, **{key: value}))
    assert (words in message and f":{key}" not in message.split(";")[0]) or key in message


def test_image_references_with_a_registry_port(tmp_path: Path) -> None:
    pins = load_pins(
        pins_variant(
            tmp_path,
            CUDA_DEVEL_IMAGE=f"mirror.example:5000/nvidia/cuda:13.0.3-devel-ubuntu24.04@{DIGEST}",
            CUDA_RUNTIME_IMAGE=f"localhost:5000/nvidia/cuda:13.0.3-runtime-ubuntu24.04@{DIGEST}",
            IMAGE_REPOSITORY="registry.example:5000/team/epstack",
        )
    )
    assert pins.image_ref("sglang", "hopper-ib").startswith("registry.example:5000/team/epstack:sglang-")
    assert pins.image_target.platform == "x86_64-manylinux_2_39"


@pytest.mark.parametrize(
    ("cuda", "arch", "needs"),
    [
        ("12.4.1", "10.0a", "needs CUDA 12.8"),
        ("12.8.1", "10.3a", "needs CUDA 12.9"),
        ("12.8.1", "10.0f", "needs CUDA 12.9"),
        ("12.9.1", "11.0", "needs CUDA 13.0"),
        ("13.0.3", "10.1a", "dropped after CUDA 12.9"),
        ("13.0.3", "7.0", "dropped after CUDA 12.9"),
    ],
)
def test_archs_against_the_cuda_minor(cuda: str, arch: str, needs: str) -> None:
    assert needs in (arch_problem(arch, cuda) or "")


def test_archs_each_cuda_builds() -> None:
    assert arch_problem("10.3a", "12.9.1") is None and arch_problem("9.0a", "12.0.0") is None
    assert (
        "10.3a" in archs_for("13.0.3") and "5.0" not in archs_for("13.0.3") and "5.0" in archs_for("12.9.1")
    )


def test_a_pins_file_with_an_arch_its_cuda_lacks(tmp_path: Path) -> None:
    path = pins_variant(tmp_path, ARCH_BLACKWELL="10.0a,10.3a", CUDA_VERSION="12.8.1", TORCH_CUDA_TAG="cu128")
    text = path.read_text().replace("13.0.3-", "12.8.1-")
    path.write_text(text)
    message = problems(path)
    assert "ARCH_BLACKWELL: arch 10.3a needs CUDA 12.9 or newer, and CUDA_VERSION is 12.8.1" in message
    assert "10.0a" not in message.split("fix:")[0]


@pytest.mark.parametrize("key", ["ARCH_", "ARCH__X", "ARCH_X_", "ARCH_A__B"])
def test_arch_names_that_make_no_target_name(tmp_path: Path, key: str) -> None:
    path = pins_variant(tmp_path)
    path.write_text(path.read_text() + f"{key}=9.0a\n")
    assert "does not make a target name" in problems(path)


def test_a_target_whose_tags_would_be_too_long(tmp_path: Path) -> None:
    path = pins_variant(tmp_path)
    path.write_text(path.read_text() + f"ARCH_{'H' * 100}=9.0a\n")
    message = problems(path)
    assert f"ARCH_{'H' * 100}" in message and "over the 128 a registry accepts" in message


def test_a_pins_file_written_for_bash_gets_every_problem_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = pins_variant(tmp_path, NCCL_VERSION="", CUDA_VERSION="", SGLANG_VERSION="")
    lines = path.read_text().splitlines()
    path.write_text(
        "\n".join(
            [
                *lines,
                'export NCCL_VER=">=2.30.7"',
                "CUDA_VERSION='13.0.3'",
                "SGLANG_VERSION=>=0.5.23",
                "TORCH_VERISON=2.14.1",
            ]
        )
        + "\n"
    )
    assert main(["pins", "check", "--pins", str(path)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    text = "\n".join(err)
    n = len(lines)
    assert f"{path}:{n + 1}: 'export' in a pins file" in text
    assert f"{path}:{n + 1}: unknown key NCCL_VER; fix: did you mean NCCL_VERSION?" in text
    assert f"{path}:{n + 2}: CUDA_VERSION: quoted value; fix: write CUDA_VERSION=13.0.3" in text
    assert f"{path}:{n + 3}: SGLANG_VERSION: '>=0.5.23' is a range" in text
    assert f"{path}:{n + 4}: unknown key TORCH_VERISON; fix: did you mean TORCH_VERSION?" in text
    assert "missing key NCCL_VERSION" in text and "missing key CUDA_VERSION" not in text
    assert all(re.match(rf"error: {re.escape(str(path))}(:\d+)?: .*; fix: ", line) for line in err)


def test_a_layer_pins_file_is_validated_when_loaded(tmp_path: Path) -> None:
    layer = tmp_path / "deepep.pins.env"
    layer.write_text(
        "CUDA_VERSION=13.0.3\nNCCL_VERSION=v2.30.7\nNVSHMEM_VERSION=3.4.5\nTORCH_VERSION=2.14.1\n"
        "TORCH_CUDA_TAG=cu130\nDEEPEP_REPO=https://github.com/deepseek-ai/DeepEP.git\nDEEPEP_REF=main\n"
        "TORCH_CUDA_ARCH_LIST=9.0a 10.1a\nFABRIC=roce\nNCCL_VERISON=2.30.7\n"
    )
    with pytest.raises(BadInput) as caught:
        load_expected(layer, ["python", "base", "deepep"])
    message = str(caught.value)
    for words in (
        "fix: write 2.30.7",
        "DEEPEP_REF: 'main' is a branch",
        "'roce' is not a fabric",
        "did you mean NCCL_VERSION?",
    ):
        assert words in message


def test_a_rendered_layer_pins_file_loads(tmp_path: Path) -> None:
    assert main(["render", "--pins", str(PINS), "--out", str(tmp_path / "out")]) == 0
    for layer in ("base", "deepep", "sglang"):
        values = read_layer_pins(tmp_path / "out" / "targets" / "blackwell-efa" / f"{layer}.pins.env")
        assert values["NCCL_VERSION"] == "2.30.7"


def cuda12(tmp_path: Path) -> Path:
    path = pins_variant(tmp_path, CUDA_VERSION="12.9.1", TORCH_CUDA_TAG="cu129")
    path.write_text(path.read_text().replace(":13.0.3-", ":12.9.1-"))
    return path


def test_cuda_12_renders_cu12_wheel_names_throughout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Everything rendered from the pins says cu12; the committed locks (resolved for the shipped CUDA 13
    pins) are named stale, and `epstack build` refuses them with the reason and the fix."""
    out = tmp_path / "out"
    pins = cuda12(tmp_path)
    assert main(["render", "--pins", str(pins), "--out", str(out)]) == 0
    assert "locks/base.txt: stale" in capsys.readouterr().err
    rendered = [
        p
        for p in out.rglob("*")
        if p.is_file() and not {"src", "scripts", "locks"} & set(p.relative_to(out).parts)
    ]
    # The cu13 flavours a CUDA 12 image excludes are the one place a cu13 name belongs.
    excluded = "nvidia-cutlass-dsl-libs-cu13"
    texts = {p: p.read_text().replace(excluded, "") for p in rendered}
    assert not [p for p, text in texts.items() if re.search(r"cu13|nccl-cu1[^2]|cuda-13", text)]
    assert f"deep-ep, {excluded})" in (out / "targets/hopper-ib/sglang.Dockerfile").read_text()
    assert (
        "(torch, nvidia-nccl-cu12, nvidia-nvshmem-cu12)"
        in (out / "targets/hopper-ib/sglang.Dockerfile").read_text()
    )
    assert "nvidia-nccl-cu12" in (out / "standin/system-nccl-requirements.txt").read_text()
    assert (
        load_expected(out / "targets/hopper-ib/deepep.pins.env", ["python"]).wheels.nccl == "nvidia-nccl-cu12"
    )
    assert main(["build", "--pins", str(pins), "--out", str(tmp_path / "build")]) == 2
    err = capsys.readouterr().err
    assert "nvidia-nccl-cu12" in err and "fix: epstack lock" in err


def test_cuda_14_is_refused_with_the_reason(tmp_path: Path) -> None:
    path = pins_variant(tmp_path, CUDA_VERSION="14.0.0", TORCH_CUDA_TAG="cu140")
    path.write_text(path.read_text().replace(":13.0.3-", ":14.0.0-"))
    assert "CUDA major 14 is not known to epstack (no wheel names for it)" in problems(path)


# ---- one CUDA: CUDA_MINOR_EXCEPTIONS names toolkit wheels the release versions ---------------------


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (
            "nvidia-cuda-nvc",
            "with the release; fix: did you mean nvidia-cuda-nvcc?",
        ),
        ("nvidia-cublas", "nvidia-cublas is not a CUDA 13 toolkit wheel versioned with the release"),
        ("nvidia-cuda-nvcc-cu12", "nvidia-cuda-nvcc-cu12 is not a CUDA 13 toolkit wheel"),
        ("Nvidia_Cuda_Nvcc", "'Nvidia_Cuda_Nvcc' is not a distribution name"),
        ("nvidia-nvvm,,nvidia-cuda-nvcc", "empty member"),
        ("nvidia-nvvm,nvidia-nvvm", "lists nvidia-nvvm twice"),
    ],
)
def test_cuda_minor_exceptions_name_release_wheels(tmp_path: Path, value: str, words: str) -> None:
    message = problems(pins_variant(tmp_path, CUDA_MINOR_EXCEPTIONS=value))
    assert words in message and "CUDA_MINOR_EXCEPTIONS" in message


def test_an_exception_is_read_as_its_names(tmp_path: Path) -> None:
    pins = load_pins(pins_variant(tmp_path, CUDA_MINOR_EXCEPTIONS="nvidia-nvvm,nvidia-cuda-nvcc"))
    assert pins.cuda_exceptions == ("nvidia-nvvm", "nvidia-cuda-nvcc")
    assert load_pins(PINS).cuda_exceptions == ()


def test_the_runtime_flavour_is_a_caveat(tmp_path: Path) -> None:
    """The served image's CUDA libraries would be the venv's wheels again: accepted, and said."""
    runtime = f"nvidia/cuda:13.0.3-runtime-ubuntu24.04@{DIGEST}"
    caveats = load_pins(pins_variant(tmp_path, CUDA_RUNTIME_IMAGE=runtime)).caveats
    assert any(
        "is the runtime flavour" in caveat and "the base flavour holds cudart only" in caveat
        for caveat in caveats
    )
    assert not any("flavour" in caveat for caveat in load_pins(PINS).caveats)
