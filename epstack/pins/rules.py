"""The rules between pins: each yields a Problem (key, what is wrong, how to fix) for every violation.

load_pins (epstack.pins.model) runs them once every value has passed its own rule (epstack.pins.values), and
reports every problem they find together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from packaging.version import Version

from epstack.errors import shown
from epstack.fabric import EFA, FABRICS
from epstack.layers import LAYER_NAMES
from epstack.oci import parse_reference, tag_problem
from epstack.pins.file import PinsFile, Problem
from epstack.pins.model import Pins
from epstack.pins.values import arch_key
from epstack.stack import (
    DEEPEP_REFS_WITHOUT_EFA_GDA,
    DEEPEP_V2_MIN_NCCL,
    EFA_GDA_MIN_NCCL,
    EFA_GIN_MIN_OFI_NCCL,
    GIN_EFA_GDA,
    GIN_GDAKI,
    GIN_PROXY,
    IMAGE_OS_GLIBC,
    NCCL_ABI_MAJOR,
    PATCHES_NEEDING_GDAKI,
    SUPPORTED_CUDA_MAJORS,
    arch_problem,
    archs_for,
    cuda_major,
    image_os,
    release,
)
from epstack.suggest import did_you_mean

Rule = Callable[[Pins, PinsFile], Iterator[Problem]]


def _nccl_for_deepep_v2(pins: Pins, pins_file: PinsFile) -> Iterator[Problem]:
    if Version(pins.nccl_version) < Version(DEEPEP_V2_MIN_NCCL):
        yield pins_file.problem(
            "NCCL_VERSION",
            f"NCCL {pins.nccl_version} is older than {DEEPEP_V2_MIN_NCCL}, "
            "which DeepEP V2 (GIN device API) needs",
            f"set NCCL_VERSION={DEEPEP_V2_MIN_NCCL} or newer",
        )


def _nccl_abi(pins: Pins, pins_file: PinsFile) -> Iterator[Problem]:
    major = release(pins.nccl_version)[0]
    if major != NCCL_ABI_MAJOR:
        yield pins_file.problem(
            "NCCL_VERSION",
            f"NCCL {pins.nccl_version} is NCCL {major}, another ABI than the libnccl.so.{NCCL_ABI_MAJOR} "
            "torch and DeepEP link",
            f"set NCCL_VERSION to an NCCL {NCCL_ABI_MAJOR}.x release",
        )


def nccl_over_torch(pins: Pins, wheel: str, version: str) -> tuple[str, str, str] | None:
    """(key, what is wrong, fix) when pins.env's NCCL may not replace `wheel`==`version`, the NCCL torch
    itself requires (what uv resolves torch==TORCH_VERSION to alone); None when it may.

    The images install NCCL_VERSION over torch's own pin, an override the base lock declares: allowed
    for the wheel of the images' CUDA major, in the same NCCL major (2.x keeps its ABI) and at or above
    torch's pin (torch is built against it); DeepEP V2's floor is _nccl_for_deepep_v2's."""
    if wheel != pins.wheels.nccl:
        return (
            "TORCH_VERSION",
            f"torch {pins.torch_version} requires {wheel}, a CUDA major other than the images' "
            f"{pins.wheels.nccl}",
            f"pin a torch built for CUDA {pins.wheels.major} (TORCH_CUDA_TAG={pins.torch_cuda_tag})",
        )
    if release(version)[0] != release(pins.nccl_version)[0]:
        return (
            "NCCL_VERSION",
            f"NCCL {pins.nccl_version} is another major than the {version} torch {pins.torch_version} "
            "requires: another ABI",
            f"set NCCL_VERSION to an NCCL {release(version)[0]}.x release, {version} or newer",
        )
    if Version(pins.nccl_version) < Version(version):
        return (
            "NCCL_VERSION",
            f"NCCL {pins.nccl_version} is below the {version} torch {pins.torch_version} requires "
            "and is built against",
            f"set NCCL_VERSION={version} or newer",
        )
    return None


def _gin_over_efa(pins: Pins, pins_file: PinsFile) -> Iterator[Problem]:
    if EFA.name in pins.fabrics and Version(pins.aws_ofi_nccl_version) < Version(EFA_GIN_MIN_OFI_NCCL):
        yield pins_file.problem(
            "AWS_OFI_NCCL_VERSION",
            f"aws-ofi-nccl {pins.aws_ofi_nccl_version} has no NCCL GIN support, "
            "which DeepEP V2 needs across nodes",
            f"set AWS_OFI_NCCL_VERSION={EFA_GIN_MIN_OFI_NCCL} or newer, "
            "with an EFA installer that bundles it",
        )


def _one_cuda_major(pins: Pins, pins_file: PinsFile) -> Iterator[Problem]:
    major = cuda_major(pins.cuda_version)
    if major not in SUPPORTED_CUDA_MAJORS:
        yield pins_file.problem(
            "CUDA_VERSION",
            f"CUDA major {major} is not known to epstack (no wheel names for it)",
            f"use CUDA {' or '.join(map(str, SUPPORTED_CUDA_MAJORS))}",
        )
        return
    torch_major = int(pins.torch_cuda_tag[2:-1])
    if torch_major != major:
        yield pins_file.problem(
            "TORCH_CUDA_TAG",
            f"torch's CUDA tag {pins.torch_cuda_tag} is CUDA {torch_major}, the base image is CUDA {major}",
            f"use a cu{major}x torch build or a CUDA {torch_major} base image",
        )
    for key, ref in (
        ("CUDA_DEVEL_IMAGE", pins.cuda_devel_image),
        ("CUDA_RUNTIME_IMAGE", pins.cuda_runtime_image),
    ):
        tag = parse_reference(ref).tag
        if not tag.startswith(f"{pins.cuda_version}-"):
            yield pins_file.problem(
                key,
                f"{key} tag {tag} is not CUDA {pins.cuda_version}",
                f"use a {pins.cuda_version}-* tag and its digest",
            )
        elif image_os(ref) not in IMAGE_OS_GLIBC:
            yield pins_file.problem(
                key,
                f"{key} tag {tag} names OS {shown(image_os(ref))}, which epstack has no wheel platform for",
                f"use an image for {' or '.join(IMAGE_OS_GLIBC)}",
            )
    if image_os(pins.cuda_devel_image) != image_os(pins.cuda_runtime_image):
        yield pins_file.problem(
            "CUDA_RUNTIME_IMAGE",
            "the devel and runtime images are different OSes; the venv built on one runs on the other",
            f"use the {image_os(pins.cuda_devel_image)} runtime image",
        )


def _cuda_minor_exceptions(pins: Pins, pins_file: PinsFile) -> Iterator[Problem]:
    """Only CUDA release wheels (stack.CUDA_RELEASE_WHEELS, as this CUDA major names them) can be excepted."""
    if cuda_major(pins.cuda_version) not in SUPPORTED_CUDA_MAJORS:
        return  # _one_cuda_major says so
    release = pins.wheels.release
    for name in pins.cuda_exceptions:
        if name not in release:
            yield pins_file.problem(
                "CUDA_MINOR_EXCEPTIONS",
                f"CUDA_MINOR_EXCEPTIONS: {name} is not a CUDA {pins.wheels.major} toolkit wheel versioned "
                "with the release",
                did_you_mean(name, release) or f"name one of {', '.join(release)}, or write none",
            )


def _archs_supported(pins: Pins, pins_file: PinsFile) -> Iterator[Problem]:
    """Every arch buildable by this CUDA's nvcc: sm_100a needs 12.8, sm_103a 12.9, sm_110 13.0."""
    if not pins.archs:
        yield pins_file.problem(None, "no ARCH_<NAME> key, so no target", "add e.g. ARCH_HOPPER=9.0a")
    for name, archs in pins.archs.items():
        for arch in archs:
            problem = arch_problem(arch, pins.cuda_version)
            if problem:
                yield pins_file.problem(
                    arch_key(name),
                    f"{arch_key(name)}: {problem}, and CUDA_VERSION is {pins.cuda_version}",
                    f"raise CUDA_VERSION, or use archs CUDA {pins.cuda_version} has: "
                    + ", ".join(archs_for(pins.cuda_version)),
                )


def _default_target(pins: Pins, pins_file: PinsFile) -> Iterator[Problem]:
    if pins.default_target not in pins.targets:
        yield pins_file.problem(
            "DEFAULT_TARGET",
            f"DEFAULT_TARGET {pins.default_target} is not a target ({', '.join(pins.targets)})",
            did_you_mean(pins.default_target, pins.targets) or "pick one of the targets",
        )


def _gin_types(pins: Pins, pins_file: PinsFile) -> Iterator[Problem]:
    if EFA.name not in pins.fabrics or pins.efa_gin_type != GIN_EFA_GDA:
        return
    if Version(pins.nccl_version) < Version(EFA_GDA_MIN_NCCL):
        yield pins_file.problem(
            "EFA_GIN_TYPE",
            f"GIN type {GIN_EFA_GDA} (EFA-GDA) needs NCCL {EFA_GDA_MIN_NCCL}; NCCL {pins.nccl_version} "
            "knows types 0, 2, 3 and 4 only",
            f"set EFA_GIN_TYPE={GIN_PROXY} (proxy), or NCCL_VERSION={EFA_GDA_MIN_NCCL} or newer",
        )
    if pins.deepep_ref in DEEPEP_REFS_WITHOUT_EFA_GDA:
        yield pins_file.problem(
            "EFA_GIN_TYPE",
            f"DeepEP {pins.deepep_ref[:7]} requires GIN strong and VA signals, which EFA-GDA does not have",
            f"set EFA_GIN_TYPE={GIN_PROXY}, or a DEEPEP_REF that turns both requirements off",
        )


def _patches_fit_the_gin_type(pins: Pins, pins_file: PinsFile) -> Iterator[Problem]:
    for name in pins.fabrics:
        for patch in pins.patches(name):
            why = PATCHES_NEEDING_GDAKI.get(patch.sha256)
            key = FABRICS[name].patches_key
            if why and pins.gin_type(name) != GIN_GDAKI:
                yield pins_file.problem(
                    key,
                    f"{why} ({patch.file}) reads GIN signals in GDAKI's layout, but {name} uses GIN type "
                    f"{pins.gin_type(name)}",
                    f"drop it from {key}, or pin GIN type {GIN_GDAKI} for {name}",
                )


def _image_tags(pins: Pins, pins_file: PinsFile) -> Iterator[Problem]:
    """Every tag render would give an image is a valid tag of at most 128 characters."""
    for target in pins.targets:
        key = arch_key(target.rsplit("-", 1)[0])
        for layer in LAYER_NAMES:
            tag = pins.image_tag(layer, target)
            problem = tag_problem(tag)
            if problem:
                yield pins_file.problem(
                    key,
                    f"the {layer} image of target {target} would be tagged {tag}: {problem}",
                    f"shorten the name in {key}",
                )
                return


RULES: tuple[Rule, ...] = (
    _gin_types,
    _patches_fit_the_gin_type,
    _nccl_abi,
    _nccl_for_deepep_v2,
    _gin_over_efa,
    _one_cuda_major,
    _cuda_minor_exceptions,
    _archs_supported,
    _default_target,
    _image_tags,
)
