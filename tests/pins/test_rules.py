"""The pins rules users need: canonical versions, valid and short tags, registry ports, clean lists,
archs against the CUDA minor, real snapshots, target names that make tags, layer pins files
validated, a bash-style file reported whole, and CUDA 12 rendered as CUDA 12 throughout."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from epstack.commands.main import main
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
    assert main(["render", "--pins", str(PINS), "--out-dir", str(tmp_path / "out")]) == 0
    for layer in ("base", "deepep", "sglang"):
        values = read_layer_pins(tmp_path / "out" / "targets" / "blackwell-efa" / f"{layer}.pins.env")
        assert values["NCCL_VERSION"] == load_pins(PINS).nccl_version


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
    assert main(["render", "--pins", str(pins), "--out-dir", str(out)]) == 0
    assert "locks/base.txt: stale" in capsys.readouterr().err
    rendered = [
        p
        for p in out.rglob("*")
        if p.is_file() and not {"src", "scripts", "locks"} & set(p.relative_to(out).parts)
    ]
    # The cu13 flavours a CUDA 12 image excludes are the one place a cu13 name belongs.
    excluded = "nvidia-cutlass-dsl-libs-cu13, nixl-cu13"
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
    assert main(["build", "--pins", str(pins), "--out-dir", str(tmp_path / "build")]) == 2
    err = capsys.readouterr().err
    assert "nvidia-nccl-cu12" in err and "fix: epstack pins lock" in err


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


# ---- the rules between pins, each on a pins file that breaks it and one just inside it ------------

GDAKI_PATCH = (
    "https://raw.githubusercontent.com/vllm-project/vllm/665dfaaf4e0df9000ca101b808546a046ac710b0/tools/"
    "ep_kernels/patches/deepep-gin-barrier-data-visibility.patch"
    "#sha256=fbde7fef0cd154a090f3a150a55bb0300c4c364800f485cf27361031bb25c961"
)
# A DeepEP commit that is not among those needing GIN signals EFA-GDA lacks.
OTHER_DEEPEP = "0123456789abcdef0123456789abcdef01234567"


def line_of(path: Path, key: str) -> int:
    numbers = [n for n, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(f"{key}=")]
    assert numbers, f"{key} not in {path}"
    return numbers[0]


def report(path: Path) -> list[str]:
    """Every line of the report load_pins refuses `path` with."""
    return problems(path).splitlines()


def at(path: Path, key: str, text: str) -> str:
    """One report line: the key's line in `path`, what is wrong and the fix."""
    return f"{path}:{line_of(path, key)}: {text}"


def with_images(tmp_path: Path, devel: str, runtime: str, **changes: str) -> Path:
    """pins.env with CUDA images of these tags (any digest) and other `changes`."""
    return pins_variant(
        tmp_path,
        CUDA_DEVEL_IMAGE=f"nvidia/cuda:{devel}@{DIGEST}",
        CUDA_RUNTIME_IMAGE=f"nvidia/cuda:{runtime}@{DIGEST}",
        **changes,
    )


def test_nccl_below_the_deepep_v2_floor(tmp_path: Path) -> None:
    path = pins_variant(tmp_path, NCCL_VERSION="2.30.3")
    assert report(path) == [
        at(
            path,
            "NCCL_VERSION",
            "NCCL 2.30.3 is older than 2.30.4, which DeepEP V2 (GIN device API) needs; "
            "fix: set NCCL_VERSION=2.30.4 or newer",
        )
    ]


def test_nccl_at_the_deepep_v2_floor_is_accepted(tmp_path: Path) -> None:
    assert load_pins(pins_variant(tmp_path, NCCL_VERSION="2.30.4")).nccl_version == "2.30.4"


def test_aws_ofi_nccl_without_gin_on_an_efa_target(tmp_path: Path) -> None:
    path = pins_variant(tmp_path, AWS_OFI_NCCL_VERSION="1.20.9")
    assert report(path) == [
        at(
            path,
            "AWS_OFI_NCCL_VERSION",
            "aws-ofi-nccl 1.20.9 has no NCCL GIN support, which DeepEP V2 needs across nodes; "
            "fix: set AWS_OFI_NCCL_VERSION=1.21.0 or newer, with an EFA installer that bundles it",
        )
    ]


@pytest.mark.parametrize(
    "changes",
    [
        {"AWS_OFI_NCCL_VERSION": "1.21.0"},
        {"AWS_OFI_NCCL_VERSION": "1.17.3", "FABRICS": "ib"},
    ],
    ids=["at-the-floor", "no-efa-target"],
)
def test_aws_ofi_nccl_needs_gin_only_for_efa_targets(tmp_path: Path, changes: dict[str, str]) -> None:
    pins = load_pins(pins_variant(tmp_path, **changes))
    assert pins.aws_ofi_nccl_version == changes["AWS_OFI_NCCL_VERSION"]


def test_an_unknown_cuda_major_is_the_only_cuda_problem(tmp_path: Path) -> None:
    """CUDA 14: neither torch's tag nor the images nor the exceptions are checked against it."""
    path = with_images(
        tmp_path,
        "13.0.3-devel-ubuntu24.04",
        "13.0.3-base-ubuntu22.04",
        CUDA_VERSION="14.0.0",
        CUDA_MINOR_EXCEPTIONS="nvidia-cublas",
    )
    assert report(path) == [
        at(
            path,
            "CUDA_VERSION",
            "CUDA major 14 is not known to epstack (no wheel names for it); fix: use CUDA 12 or 13",
        )
    ]


@pytest.mark.parametrize(("tag", "major"), [("cu128", "12"), ("cu140", "14")])
def test_torch_built_for_another_cuda_major(tmp_path: Path, tag: str, major: str) -> None:
    path = pins_variant(tmp_path, TORCH_CUDA_TAG=tag)
    assert report(path) == [
        at(
            path,
            "TORCH_CUDA_TAG",
            f"torch's CUDA tag {tag} is CUDA {major}, the base image is CUDA 13; "
            f"fix: use a cu13x torch build or a CUDA {major} base image",
        )
    ]


def test_torch_of_the_same_cuda_major_and_another_minor_is_accepted(tmp_path: Path) -> None:
    assert load_pins(pins_variant(tmp_path, TORCH_CUDA_TAG="cu131")).torch_cuda_tag == "cu131"


@pytest.mark.parametrize("other", ["13.0.2", "13.0.30", "13.0", "13.1.0", "12.9.1"])
def test_a_cuda_image_of_another_release_than_cuda_version(tmp_path: Path, other: str) -> None:
    """The images' tags name CUDA_VERSION itself: 13.0.2 is not 13.0.3, even of the same major.minor."""
    path = with_images(tmp_path, f"{other}-devel-ubuntu24.04", f"{other}-base-ubuntu24.04")
    assert report(path) == [
        at(
            path,
            key,
            f"{key} tag {other}-{flavour}-ubuntu24.04 is not CUDA 13.0.3; "
            "fix: use a 13.0.3-* tag and its digest",
        )
        for key, flavour in (("CUDA_DEVEL_IMAGE", "devel"), ("CUDA_RUNTIME_IMAGE", "base"))
    ]


def test_a_cuda_image_of_the_pinned_release_is_accepted(tmp_path: Path) -> None:
    path = with_images(tmp_path, "13.0.3-devel-ubuntu22.04", "13.0.3-runtime-ubuntu22.04")
    assert load_pins(path).image_target.platform == "x86_64-manylinux_2_35"


def test_a_cuda_image_for_an_os_without_a_wheel_platform(tmp_path: Path) -> None:
    path = with_images(tmp_path, "13.0.3-devel-rockylinux9", "13.0.3-base-rockylinux9")
    assert report(path) == [
        at(
            path,
            key,
            f"{key} tag 13.0.3-{flavour}-rockylinux9 names OS 'rockylinux9', which epstack has no wheel "
            "platform for; fix: use an image for ubuntu24.04 or ubuntu22.04",
        )
        for key, flavour in (("CUDA_DEVEL_IMAGE", "devel"), ("CUDA_RUNTIME_IMAGE", "base"))
    ]


def test_an_image_of_another_cuda_is_not_also_judged_by_its_os(tmp_path: Path) -> None:
    path = with_images(tmp_path, "13.0.2-devel-rockylinux9", "13.0.3-base-rockylinux9")
    message = problems(path)
    assert "CUDA_DEVEL_IMAGE tag 13.0.2-devel-rockylinux9 is not CUDA 13.0.3" in message
    assert "CUDA_DEVEL_IMAGE tag 13.0.2-devel-rockylinux9 names OS" not in message
    assert "CUDA_RUNTIME_IMAGE tag 13.0.3-base-rockylinux9 names OS 'rockylinux9'" in message


def test_devel_and_runtime_images_of_different_oses(tmp_path: Path) -> None:
    path = with_images(tmp_path, "13.0.3-devel-ubuntu24.04", "13.0.3-base-ubuntu22.04")
    assert report(path) == [
        at(
            path,
            "CUDA_RUNTIME_IMAGE",
            "the devel and runtime images are different OSes; the venv built on one runs on the other; "
            "fix: use the ubuntu24.04 runtime image",
        )
    ]


def test_a_cuda_12_exception_is_named_as_cuda_12_names_it(tmp_path: Path) -> None:
    path = cuda12(tmp_path)
    path.write_text(
        path.read_text().replace("CUDA_MINOR_EXCEPTIONS=none", "CUDA_MINOR_EXCEPTIONS=nvidia-nvvm")
    )
    assert report(path) == [
        at(
            path,
            "CUDA_MINOR_EXCEPTIONS",
            "CUDA_MINOR_EXCEPTIONS: nvidia-nvvm is not a CUDA 12 toolkit wheel versioned with the release; "
            "fix: did you mean nvidia-nvvm-cu12?",
        )
    ]
    path.write_text(path.read_text().replace("=nvidia-nvvm", "=nvidia-nvvm-cu12"))
    assert load_pins(path).cuda_exceptions == ("nvidia-nvvm-cu12",)


def test_an_exception_nothing_like_a_release_wheel_lists_them_all(tmp_path: Path) -> None:
    path = pins_variant(tmp_path, CUDA_MINOR_EXCEPTIONS="nvidia-nvvm,flashinfer-jit-cache")
    assert report(path) == [
        at(
            path,
            "CUDA_MINOR_EXCEPTIONS",
            "CUDA_MINOR_EXCEPTIONS: flashinfer-jit-cache is not a CUDA 13 toolkit wheel versioned with the "
            "release; fix: name one of nvidia-cuda-runtime, nvidia-cuda-nvrtc, nvidia-nvjitlink, "
            "nvidia-cuda-nvcc, nvidia-cuda-crt, nvidia-nvvm, nvidia-cuda-cccl, nvidia-cuda-cupti, "
            "nvidia-nvtx, or write none",
        )
    ]


def test_pins_without_an_arch_key_have_no_target(tmp_path: Path) -> None:
    path = pins_variant(tmp_path, ARCH_HOPPER="", ARCH_BLACKWELL="")
    lines = report(path)
    assert f"{path}: no ARCH_<NAME> key, so no target; fix: add e.g. ARCH_HOPPER=9.0a" in lines


def test_an_arch_its_cuda_lacks_names_the_archs_it_has(tmp_path: Path) -> None:
    path = pins_variant(tmp_path, ARCH_HOPPER="9.0a,5.0", ARCH_BLACKWELL="10.0a,7.0,11.0")
    has = ", ".join(archs_for("13.0.3"))
    assert report(path) == [
        at(
            path,
            "ARCH_HOPPER",
            f"ARCH_HOPPER: arch 5.0 was dropped after CUDA 12.9, and CUDA_VERSION is 13.0.3; "
            f"fix: raise CUDA_VERSION, or use archs CUDA 13.0.3 has: {has}",
        ),
        *(
            at(
                path,
                "ARCH_BLACKWELL",
                f"ARCH_BLACKWELL: arch 7.0 was dropped after CUDA 12.9, and CUDA_VERSION is 13.0.3; "
                f"fix: raise CUDA_VERSION, or use archs CUDA 13.0.3 has: {has}",
            ),
        ),
    ]
    assert has.startswith("7.5, 8.0, ") and "11.0" in has


def test_an_arch_key_with_an_underscore_is_named_as_written(tmp_path: Path) -> None:
    path = pins_variant(tmp_path, ARCH_HOPPER="", ARCH_BLACKWELL="")
    path.write_text(path.read_text() + "ARCH_GRACE_HOPPER=9.0a,7.2\n")
    path.write_text(path.read_text().replace("DEFAULT_TARGET=hopper-ib", "DEFAULT_TARGET=grace-hopper-ib"))
    assert [line for line in report(path) if "ARCH_GRACE_HOPPER" in line] == [
        at(
            path,
            "ARCH_GRACE_HOPPER",
            "ARCH_GRACE_HOPPER: arch 7.2 was dropped after CUDA 12.9, and CUDA_VERSION is 13.0.3; "
            f"fix: raise CUDA_VERSION, or use archs CUDA 13.0.3 has: {', '.join(archs_for('13.0.3'))}",
        )
    ]


@pytest.mark.parametrize(
    ("target", "fix"),
    [("hopper-roce", "did you mean hopper-efa?"), ("zzz", "pick one of the targets")],
)
def test_a_default_target_that_is_not_a_target(tmp_path: Path, target: str, fix: str) -> None:
    path = pins_variant(tmp_path, DEFAULT_TARGET=target)
    assert report(path) == [
        at(
            path,
            "DEFAULT_TARGET",
            f"DEFAULT_TARGET {target} is not a target (hopper-efa, hopper-ib, blackwell-efa, blackwell-ib); "
            f"fix: {fix}",
        )
    ]


def test_any_target_may_be_the_default(tmp_path: Path) -> None:
    assert load_pins(pins_variant(tmp_path, DEFAULT_TARGET="blackwell-efa")).default_target == "blackwell-efa"


EFA_GDA_NEEDS_NCCL = (
    "GIN type 5 (EFA-GDA) needs NCCL 2.31.2; NCCL {nccl} knows types 0, 2, 3 and 4 only; "
    "fix: set EFA_GIN_TYPE=2 (proxy), or NCCL_VERSION=2.31.2 or newer"
)
EFA_GDA_NEEDS_DEEPEP = (
    "DeepEP d4f41e4 requires GIN strong and VA signals, which EFA-GDA does not have; "
    "fix: set EFA_GIN_TYPE=2, or a DEEPEP_REF that turns both requirements off"
)


def test_efa_gda_below_its_nccl_with_a_deepep_that_cannot_use_it(tmp_path: Path) -> None:
    """Both reasons at once, each on EFA_GIN_TYPE's line."""
    path = pins_variant(tmp_path, EFA_GIN_TYPE="5", NCCL_VERSION="2.31.1")
    assert report(path) == sorted(
        [
            at(path, "EFA_GIN_TYPE", EFA_GDA_NEEDS_NCCL.format(nccl="2.31.1")),
            at(path, "EFA_GIN_TYPE", EFA_GDA_NEEDS_DEEPEP),
        ]
    )


def test_efa_gda_below_its_nccl(tmp_path: Path) -> None:
    path = pins_variant(tmp_path, EFA_GIN_TYPE="5", NCCL_VERSION="2.31.1", DEEPEP_REF=OTHER_DEEPEP)
    assert report(path) == [at(path, "EFA_GIN_TYPE", EFA_GDA_NEEDS_NCCL.format(nccl="2.31.1"))]


def test_efa_gda_at_its_nccl_with_a_deepep_that_cannot_use_it(tmp_path: Path) -> None:
    path = pins_variant(tmp_path, EFA_GIN_TYPE="5", NCCL_VERSION="2.31.2")
    assert report(path) == [at(path, "EFA_GIN_TYPE", EFA_GDA_NEEDS_DEEPEP)]


@pytest.mark.parametrize(
    "changes",
    [
        {"EFA_GIN_TYPE": "5", "NCCL_VERSION": "2.31.2", "DEEPEP_REF": OTHER_DEEPEP},
        {"EFA_GIN_TYPE": "5", "FABRICS": "ib"},
        {"EFA_GIN_TYPE": "2", "NCCL_VERSION": "2.30.4"},
    ],
    ids=["new-enough", "no-efa-target", "proxy"],
)
def test_efa_gin_types_that_fit(tmp_path: Path, changes: dict[str, str]) -> None:
    assert load_pins(pins_variant(tmp_path, **changes)).efa_gin_type == changes["EFA_GIN_TYPE"]


def test_a_gdaki_patch_on_a_proxy_fabric(tmp_path: Path) -> None:
    path = pins_variant(tmp_path, DEEPEP_PATCHES_EFA=GDAKI_PATCH, IB_GIN_TYPE="2")
    assert report(path) == [
        at(
            path,
            f"DEEPEP_PATCHES_{fabric.upper()}",
            "vLLM's GIN barrier patch (deepep-gin-barrier-data-visibility.patch) reads GIN signals in "
            f"GDAKI's layout, but {fabric} uses GIN type 2; "
            f"fix: drop it from DEEPEP_PATCHES_{fabric.upper()}, or pin GIN type 3 for {fabric}",
        )
        for fabric in ("ib", "efa")
    ]


@pytest.mark.parametrize(
    "changes",
    [
        {"IB_GIN_TYPE": "2", "DEEPEP_PATCHES_IB": "https://x/other.patch#sha256=" + "0" * 64},
        {"IB_GIN_TYPE": "2", "FABRICS": "efa", "DEFAULT_TARGET": "hopper-efa"},
        {"IB_GIN_TYPE": "3"},
    ],
    ids=["another-patch", "no-ib-target", "gdaki"],
)
def test_patches_that_fit_their_gin_type(tmp_path: Path, changes: dict[str, str]) -> None:
    assert load_pins(pins_variant(tmp_path, **changes)).ib_gin_type == changes["IB_GIN_TYPE"]


def test_only_the_first_tag_too_long_is_reported(tmp_path: Path) -> None:
    """The base image's tag names no arch; the deepep image of the first target with the long name is the
    one reported, on the line of the key that names it."""
    name = "G_" + "H" * 100
    path = pins_variant(tmp_path)
    path.write_text(path.read_text() + f"ARCH_{name}=9.0a\n")
    target = f"g-{'h' * 100}-efa"
    shipped = load_pins(PINS)
    tag = shipped.model_copy(update={"archs": {**shipped.archs, f"g-{'h' * 100}": ("9.0a",)}}).image_tag(
        "deepep", target
    )
    assert report(path) == [
        at(
            path,
            f"ARCH_{name}",
            f"the deepep image of target {target} would be tagged {tag}: the tag is {len(tag)} characters, "
            f"over the 128 a registry accepts; fix: shorten the name in ARCH_{name}",
        )
    ]


def test_nccl_of_another_major_is_another_abi(tmp_path: Path) -> None:
    path = pins_variant(tmp_path, NCCL_VERSION="3.0.1")
    assert report(path) == [
        at(
            path,
            "NCCL_VERSION",
            "NCCL 3.0.1 is NCCL 3, another ABI than the libnccl.so.2 torch and DeepEP link; "
            "fix: set NCCL_VERSION to an NCCL 2.x release",
        )
    ]
