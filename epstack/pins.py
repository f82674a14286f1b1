"""The typed pins model, its compatibility rules, and the per-layer view used for tags and labels.

load_pins() is the only way in: parse pins.env (pinsfile), validate every value (pydantic), then
check the rules between values. Every failure is one BadInput line naming file, line and fix.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from packaging.version import InvalidVersion, Version
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from epstack import fabric
from epstack.errors import BadInput
from epstack.pinsfile import PinsFile, read_pins_file
from epstack.sources import Patch, parse_patches
from epstack.stack import (
    CUDA_ARCHS,
    DEEPEP_PATCH_KEYS,
    DEEPEP_REFS_WITHOUT_EFA_GDA,
    DEEPEP_V2_MIN_NCCL,
    EFA_GDA_MIN_NCCL,
    EFA_GIN_MIN_OFI_NCCL,
    FABRIC_PIN_KEYS,
    GIN_EFA_GDA,
    GIN_GDAKI,
    GIN_PROXY,
    IMAGE_OS_GLIBC,
    LAYER_PIN_KEYS,
    PATCHES_NEEDING_GDAKI,
    CudaWheels,
    ImageTarget,
    base_packages,
    cuda_major,
    cuda_wheels,
    image_os,
    wheel_platform,
)

Layer = Literal["base", "deepep", "sglang"]
LAYERS: tuple[Layer, ...] = ("base", "deepep", "sglang")
FABRICS = tuple(fabric.FABRICS)

_RANGE = re.compile(r"[<>=!~^*,]|\s")
_DIGEST_REF = re.compile(
    r"^(?P<name>[a-z0-9]+(?:[._/-][a-z0-9]+)*):(?P<tag>[\w][\w.-]{0,127})@sha256:[0-9a-f]{64}$"
)
_SHA = re.compile(r"^[0-9a-f]{40}$")


def _exact_version(value: str) -> str:
    if _RANGE.search(value):
        raise ValueError(
            f"{value!r} is a range, not an exact version; fix: write the version alone, e.g. 2.30.7"
        )
    try:
        version = Version(value)
    except InvalidVersion:
        raise ValueError(f"{value!r} is not a version; fix: write an exact version such as 2.30.7") from None
    if version.local:
        raise ValueError(
            f"{value!r} carries a local tag; fix: write {version.public} and put the tag in its own key"
        )
    return value


def _debian_version(value: str) -> str:
    if _RANGE.search(value) or not re.match(r"^[0-9][A-Za-z0-9.+~:-]*$", value):
        raise ValueError(f"{value!r} is not an exact Debian package version; fix: write e.g. 50.0-2ubuntu0.2")
    return value


def _image_by_digest(value: str) -> str:
    if "@sha256:" not in value:
        raise ValueError(f"{value!r} has no digest; fix: append @sha256:<64 hex> of the image you tested")
    if not _DIGEST_REF.match(value):
        raise ValueError(
            f"{value!r} is not an image by digest; fix: write NAME:TAG@sha256:<64 lowercase hex>"
        )
    return value


def _full_sha(value: str) -> str:
    if not _SHA.match(value):
        kind = "a short hash" if re.match(r"^[0-9a-f]{4,39}$", value) else "a branch or tag name"
        raise ValueError(
            f"{value!r} is {kind}; fix: write the full 40-hex commit SHA (git rev-parse {value})"
        )
    return value


def _arch_list(value: str) -> tuple[str, ...]:
    archs = tuple(a.strip() for a in value.split(",") if a.strip())
    for arch in archs:
        if not re.match(r"^\d+\.\d+[af]?$", arch):
            raise ValueError(f"{arch!r} is not a CUDA arch; fix: write e.g. 9.0a or 10.0a, comma-separated")
    return archs


def _fabric_list(value: str) -> tuple[str, ...]:
    fabrics = tuple(f.strip() for f in value.split(",") if f.strip())
    for name in fabrics:
        if name not in FABRICS:
            raise ValueError(f"{name!r} is not a fabric; fix: use {', '.join(FABRICS)}")
    return fabrics


def _patches(value: str) -> str:
    parse_patches(value)
    return value


def _gin_type(name: str) -> Callable[[str], str]:
    choices = fabric.FABRICS[name].gin_types

    def check(value: str) -> str:
        if value not in choices:
            raise ValueError(
                f"{value!r} is not a GIN type for {fabric.FABRICS[name].title}; "
                f"fix: use one of {', '.join(choices)}"
            )
        return value

    return check


def _pattern(regex: str, example: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not re.match(regex, value):
            raise ValueError(f"{value!r} is not of the form {example}; fix: write a value like {example}")
        return value

    return check


ExactVersion = Annotated[str, AfterValidator(_exact_version)]
DebianVersion = Annotated[str, AfterValidator(_debian_version)]
ImageByDigest = Annotated[str, AfterValidator(_image_by_digest)]


class Pins(BaseModel):
    """Everything pins.env pins. Field aliases are the pins.env keys."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=False)

    cuda_version: ExactVersion = Field(alias="CUDA_VERSION")
    cuda_devel_image: ImageByDigest = Field(alias="CUDA_DEVEL_IMAGE")
    cuda_runtime_image: ImageByDigest = Field(alias="CUDA_RUNTIME_IMAGE")
    ubuntu_snapshot: Annotated[str, AfterValidator(_pattern(r"^\d{8}T\d{6}Z$", "20261115T000000Z"))] = Field(
        alias="UBUNTU_SNAPSHOT"
    )
    python_version: Annotated[str, AfterValidator(_pattern(r"^3\.\d{1,2}$", "3.12"))] = Field(
        alias="PYTHON_VERSION"
    )
    uv_version: ExactVersion = Field(alias="UV_VERSION")
    torch_version: ExactVersion = Field(alias="TORCH_VERSION")
    torch_cuda_tag: Annotated[str, AfterValidator(_pattern(r"^cu\d{3}$", "cu130"))] = Field(
        alias="TORCH_CUDA_TAG"
    )
    nccl_version: ExactVersion = Field(alias="NCCL_VERSION")
    nvshmem_version: ExactVersion = Field(alias="NVSHMEM_VERSION")
    gdrcopy_version: ExactVersion = Field(alias="GDRCOPY_VERSION")
    gdrcopy_ref: Annotated[str, AfterValidator(_full_sha)] = Field(alias="GDRCOPY_REF")
    deepep_repo: Annotated[
        str, AfterValidator(_pattern(r"^https://\S+\.git$", "https://host/org/repo.git"))
    ] = Field(alias="DEEPEP_REPO")
    deepep_ref: Annotated[str, AfterValidator(_full_sha)] = Field(alias="DEEPEP_REF")
    deepep_fmt_ref: Annotated[str, AfterValidator(_full_sha)] = Field(alias="DEEPEP_FMT_REF")
    deepep_patches_efa: Annotated[str, AfterValidator(_patches)] = Field(alias="DEEPEP_PATCHES_EFA")
    deepep_patches_ib: Annotated[str, AfterValidator(_patches)] = Field(alias="DEEPEP_PATCHES_IB")
    sglang_version: ExactVersion = Field(alias="SGLANG_VERSION")
    efa_installer_version: ExactVersion = Field(alias="EFA_INSTALLER_VERSION")
    efa_installer_sha256: Annotated[
        str, AfterValidator(_pattern(r"^[0-9a-f]{64}$", "<64 lowercase hex>"))
    ] = Field(alias="EFA_INSTALLER_SHA256")
    aws_ofi_nccl_version: ExactVersion = Field(alias="AWS_OFI_NCCL_VERSION")
    rdma_core_version: DebianVersion = Field(alias="RDMA_CORE_VERSION")
    efa_gin_type: Annotated[str, AfterValidator(_gin_type("efa"))] = Field(alias="EFA_GIN_TYPE")
    ib_gin_type: Annotated[str, AfterValidator(_gin_type("ib"))] = Field(alias="IB_GIN_TYPE")
    fabrics: Annotated[tuple[str, ...], BeforeValidator(_fabric_list)] = Field(alias="FABRICS")
    archs: dict[str, tuple[str, ...]] = Field(
        description="ARCH_<NAME>=9.0a,... one key per GPU generation; the target is <name>-<fabric>"
    )
    default_target: str = Field(alias="DEFAULT_TARGET")
    image_repository: Annotated[
        str, AfterValidator(_pattern(r"^[a-z0-9]+(?:[._/-][a-z0-9]+)*$", "epstack or 123.dkr.ecr/epstack"))
    ] = Field(alias="IMAGE_REPOSITORY")

    @property
    def cuda_major_minor(self) -> str:
        return ".".join(self.cuda_version.split(".")[:2])

    @property
    def cuda_home(self) -> str:
        """Where NVIDIA's images keep this CUDA release: /usr/local/cuda-13.0."""
        return f"/usr/local/cuda-{self.cuda_major_minor}"

    @property
    def wheels(self) -> CudaWheels:
        """The CUDA-major wheel names (nvidia-nccl-cu13, ...); load_pins refuses an unknown major."""
        return cuda_wheels(self.cuda_version)

    @property
    def image_target(self) -> ImageTarget:
        """The Python and wheel platform the images install for (the CUDA images' OS)."""
        return ImageTarget(
            python_version=self.python_version, platform=wheel_platform(image_os(self.cuda_devel_image))
        )

    @property
    def base_packages(self) -> dict[str, str]:
        """The Python distributions the base layer pins; no upper layer may move them."""
        return base_packages(self.cuda_version, self.torch_version, self.nccl_version, self.nvshmem_version)

    def deepep_patches(self) -> tuple[str, ...] | None:
        """None: a whole pins.env pins patches per fabric, and names no fabric (the guard's Expected)."""
        return None

    def patches(self, fabric_name: str) -> tuple[Patch, ...]:
        """The DeepEP patches the deepep layer of a fabric's targets applies, in order."""
        return parse_patches(self.model_dump(by_alias=True)[DEEPEP_PATCH_KEYS[fabric_name]])

    def gin_type(self, fabric_name: str) -> str:
        """The pinned NCCL GIN type for a fabric (EFA_GIN_TYPE, IB_GIN_TYPE)."""
        return {"efa": self.efa_gin_type, "ib": self.ib_gin_type}[fabric_name]

    @property
    def caveats(self) -> tuple[str, ...]:
        """What these pins allow but nobody has shown to work; printed by `pins check`."""
        if "efa" in self.fabrics and Version(self.nccl_version) < Version(EFA_GDA_MIN_NCCL):
            return (
                f"EFA targets use GIN proxy (type {self.efa_gin_type}) with NCCL {self.nccl_version}, below "
                f"the NCCL {EFA_GDA_MIN_NCCL} aws-ofi-nccl's GIN guide states: they build and run on one "
                "node; `cluster render` refuses them across nodes until NCCL_VERSION is raised",
            )
        return ()

    @property
    def targets(self) -> tuple[str, ...]:
        """Every arch x fabric combination, in pins file order."""
        return tuple(f"{arch}-{fabric}" for arch in self.archs for fabric in self.fabrics)

    def layer_pins(self, layer: Layer, target: str) -> dict[str, str]:
        """The pins a layer of a target is built from, as pins.env keys: its own and those below it
        (stack.LAYER_PIN_KEYS), the target's fabric pins, and what the target itself decides."""
        arch, fabric = target.rsplit("-", 1)
        values = self.model_dump(by_alias=True)
        layers = LAYERS[: LAYERS.index(layer) + 1]
        keys = [key for name in layers for key in LAYER_PIN_KEYS[name]] + list(FABRIC_PIN_KEYS[fabric])
        pinned = {key: str(values[key]) for key in keys}
        pinned["FABRIC"] = fabric
        if layer != "base":
            pinned["TORCH_CUDA_ARCH_LIST"] = " ".join(self.archs[arch])
            pinned[DEEPEP_PATCH_KEYS[fabric]] = str(values[DEEPEP_PATCH_KEYS[fabric]])
        return pinned

    def layer_hash(self, layer: Layer, target: str) -> str:
        """12 hex of the sha256 of the layer's pins: equal pins, equal tag."""
        canonical = json.dumps(self.layer_pins(layer, target), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]

    def image_tag(self, layer: Layer, target: str) -> str:
        """Readable tag ending in the layer hash: sglang-0.5.23-deepep-d4f41e4-cu13.0-hopper-efa-<12 hex>."""
        fabric = target.rsplit("-", 1)[1]
        cuda = f"cu{self.cuda_major_minor}"
        digest = self.layer_hash(layer, target)
        if layer == "base":
            return f"base-{cuda}-nccl{self.nccl_version}-{fabric}-{digest}"
        deepep = f"deepep-{self.deepep_ref[:7]}-{cuda}-{target}"
        if layer == "deepep":
            return f"{deepep}-{digest}"
        return f"sglang-{self.sglang_version}-{deepep}-{digest}"

    def image_ref(self, layer: Layer, target: str) -> str:
        return f"{self.image_repository}:{self.image_tag(layer, target)}"


DEFAULT_PINS = Path("pins.env")


def pins_path(value: Path | None) -> Path:
    """The pins file a command reads: its argument, else $EPSTACK_PINS, else ./pins.env."""
    return value or Path(os.environ.get("EPSTACK_PINS", DEFAULT_PINS))


def load_pins(path: Path) -> Pins:
    """Parse, validate and rule-check a pins file. Raises BadInput with file:line and fix."""
    pins_file = read_pins_file(path)
    raw: dict[str, Any] = {k: e.value for k, e in pins_file.entries.items() if not k.startswith("ARCH_")}
    raw["archs"] = {}
    for key, entry in pins_file.entries.items():
        if key.startswith("ARCH_"):
            name = key.removeprefix("ARCH_").lower().replace("_", "-")
            try:
                raw["archs"][name] = _arch_list(entry.value)
            except ValueError as exc:
                message, _, fix = str(exc).partition("; fix: ")
                raise pins_file.error(key, f"{key}: {message}", fix) from None
    try:
        pins = Pins.model_validate(raw)
    except ValidationError as exc:
        raise _first_error(pins_file, exc) from None
    for rule in RULES:
        rule(pins, pins_file)
    return pins


def _known_keys() -> list[str]:
    return [f.alias for f in Pins.model_fields.values() if f.alias] + ["ARCH_HOPPER", "ARCH_BLACKWELL"]


def _first_error(pins_file: PinsFile, exc: ValidationError) -> BadInput:
    error = exc.errors()[0]
    field = str(error["loc"][0]) if error["loc"] else ""
    if error["type"] == "extra_forbidden":
        near = difflib.get_close_matches(field, _known_keys(), n=1)
        hint = f"did you mean {near[0]}?" if near else "remove it (see the pins reference in README.md)"
        return pins_file.error(field, f"unknown key {field}", hint)
    alias = Pins.model_fields[field].alias if field in Pins.model_fields else field
    if error["type"] == "missing":
        return pins_file.error(None, f"missing key {alias}", f"add a line {alias}=<value> (see README.md)")
    message, _, fix = str(error.get("ctx", {}).get("error", error["msg"])).partition("; fix: ")
    return pins_file.error(alias, f"{alias}: {message}", fix or f"correct {alias}")


# ---- compatibility rules: each raises pins_file.error(key, what is wrong, how to fix) ----


def _rule_nccl_for_deepep_v2(pins: Pins, pins_file: PinsFile) -> None:
    if Version(pins.nccl_version) < Version(DEEPEP_V2_MIN_NCCL):
        raise pins_file.error(
            "NCCL_VERSION",
            f"NCCL {pins.nccl_version} is older than {DEEPEP_V2_MIN_NCCL}, "
            "which DeepEP V2 (GIN device API) needs",
            f"set NCCL_VERSION={DEEPEP_V2_MIN_NCCL} or newer (2.30.7 is tested)",
        )


def _rule_gin_over_efa(pins: Pins, pins_file: PinsFile) -> None:
    if "efa" in pins.fabrics and Version(pins.aws_ofi_nccl_version) < Version(EFA_GIN_MIN_OFI_NCCL):
        raise pins_file.error(
            "AWS_OFI_NCCL_VERSION",
            f"aws-ofi-nccl {pins.aws_ofi_nccl_version} has no NCCL GIN support, "
            "which DeepEP V2 needs across nodes",
            f"set AWS_OFI_NCCL_VERSION={EFA_GIN_MIN_OFI_NCCL} or newer, "
            "with an EFA installer that bundles it",
        )


def _rule_one_cuda_major(pins: Pins, pins_file: PinsFile) -> None:
    major = cuda_major(pins.cuda_version)
    if major not in CUDA_ARCHS:
        raise pins_file.error(
            "CUDA_VERSION",
            f"CUDA major {major} is not known to epstack (no wheel names or GPU architectures for it)",
            f"use CUDA {' or '.join(map(str, CUDA_ARCHS))}",
        )
    torch_major = int(pins.torch_cuda_tag[2:-1])
    if torch_major != major:
        raise pins_file.error(
            "TORCH_CUDA_TAG",
            f"torch's CUDA tag {pins.torch_cuda_tag} is CUDA {torch_major}, the base image is CUDA {major}",
            f"use a cu{major}x torch build or a CUDA {torch_major} base image",
        )
    for key, ref in (
        ("CUDA_DEVEL_IMAGE", pins.cuda_devel_image),
        ("CUDA_RUNTIME_IMAGE", pins.cuda_runtime_image),
    ):
        tag = ref.split("@")[0].rsplit(":", 1)[1]
        if not tag.startswith(f"{pins.cuda_version}-"):
            raise pins_file.error(
                key,
                f"{key} tag {tag} is not CUDA {pins.cuda_version}",
                f"use a {pins.cuda_version}-* tag and its digest",
            )
        if image_os(ref) not in IMAGE_OS_GLIBC:
            raise pins_file.error(
                key,
                f"{key} tag {tag} names OS {image_os(ref)!r}, which epstack has no wheel platform for",
                f"use an image for {' or '.join(IMAGE_OS_GLIBC)}",
            )
    if image_os(pins.cuda_devel_image) != image_os(pins.cuda_runtime_image):
        raise pins_file.error(
            "CUDA_RUNTIME_IMAGE",
            "the devel and runtime images are different OSes; the venv built on one runs on the other",
            f"use the {image_os(pins.cuda_devel_image)} runtime image",
        )


def _rule_archs_supported(pins: Pins, pins_file: PinsFile) -> None:
    supported = CUDA_ARCHS[cuda_major(pins.cuda_version)]
    if not pins.archs:
        raise pins_file.error(None, "no ARCH_<NAME> key, so no target", "add e.g. ARCH_HOPPER=9.0a")
    for name, archs in pins.archs.items():
        key = "ARCH_" + name.upper().replace("-", "_")
        for arch in archs:
            if arch not in supported:
                raise pins_file.error(
                    key,
                    f"arch {arch} is not supported by CUDA {pins.cuda_version}",
                    f"use one of {', '.join(sorted(supported))}",
                )


def _rule_default_target(pins: Pins, pins_file: PinsFile) -> None:
    if pins.default_target not in pins.targets:
        near = difflib.get_close_matches(pins.default_target, pins.targets, n=1)
        raise pins_file.error(
            "DEFAULT_TARGET",
            f"DEFAULT_TARGET {pins.default_target} is not a target ({', '.join(pins.targets)})",
            f"did you mean {near[0]}?" if near else "pick one of the targets",
        )


def _rule_gin_types(pins: Pins, pins_file: PinsFile) -> None:
    if "efa" not in pins.fabrics or pins.efa_gin_type != GIN_EFA_GDA:
        return
    if Version(pins.nccl_version) < Version(EFA_GDA_MIN_NCCL):
        raise pins_file.error(
            "EFA_GIN_TYPE",
            f"GIN type {GIN_EFA_GDA} (EFA-GDA) needs NCCL {EFA_GDA_MIN_NCCL}; NCCL {pins.nccl_version} "
            "knows types 0, 2, 3 and 4 only",
            f"set EFA_GIN_TYPE={GIN_PROXY} (proxy), or NCCL_VERSION={EFA_GDA_MIN_NCCL} or newer",
        )
    if pins.deepep_ref in DEEPEP_REFS_WITHOUT_EFA_GDA:
        raise pins_file.error(
            "EFA_GIN_TYPE",
            f"DeepEP {pins.deepep_ref[:7]} requires GIN strong and VA signals, which EFA-GDA does not have",
            f"set EFA_GIN_TYPE={GIN_PROXY}, or a DEEPEP_REF that turns both requirements off",
        )


def _rule_patches_fit_the_gin_type(pins: Pins, pins_file: PinsFile) -> None:
    for name in pins.fabrics:
        for patch in pins.patches(name):
            why = PATCHES_NEEDING_GDAKI.get(patch.sha256)
            if why and pins.gin_type(name) != GIN_GDAKI:
                raise pins_file.error(
                    DEEPEP_PATCH_KEYS[name],
                    f"{why} ({patch.file}) reads GIN signals in GDAKI's layout, but {name} uses GIN type "
                    f"{pins.gin_type(name)}",
                    f"drop it from {DEEPEP_PATCH_KEYS[name]}, or pin GIN type {GIN_GDAKI} for {name}",
                )


RULES: tuple[Callable[[Pins, PinsFile], None], ...] = (
    _rule_gin_types,
    _rule_patches_fit_the_gin_type,
    _rule_nccl_for_deepep_v2,
    _rule_gin_over_efa,
    _rule_one_cuda_major,
    _rule_archs_supported,
    _rule_default_target,
)


SCHEMA_PATH = Path(__file__).with_name("pins.schema.json")


def pins_json_schema() -> str:
    """JSON schema of `epstack pins check --json` output; committed as epstack/pins.schema.json."""
    schema = Pins.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "epstack pins (pins.env, as `epstack pins check --json` prints it)"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
