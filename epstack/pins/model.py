"""The typed pins model: every pins.env value validated (pins.values), what the pins mean (CUDA facts,
targets), and the per-layer view used for tags, labels and layer pins files. pins.load makes one.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
)

from epstack import fabric
from epstack.errors import BadInput
from epstack.layers import layer_named, up_to
from epstack.pins import values as v
from epstack.pins.deepepsources import Patch, parse_patches
from epstack.pins.values import arch_key
from epstack.stack import (
    CUDA_BASE_FLAVOUR,
    CudaWheels,
    ImageTarget,
    base_packages,
    cuda_wheels,
    image_flavour,
    image_os,
    wheel_platform,
)

FABRICS = tuple(fabric.FABRICS)

ExactVersion = Annotated[str, AfterValidator(v.exact_version)]
DebianVersion = Annotated[str, AfterValidator(v.debian_version)]
ImageByDigest = Annotated[str, AfterValidator(v.image_by_digest)]
FullSha = Annotated[str, AfterValidator(v.full_sha)]


class CudaFacts:
    """What the pinned CUDA, torch, NCCL and NVSHMEM versions mean, derived once for the Pins model and
    for the guard's expectations (a layer pins file holds the same keys)."""

    if TYPE_CHECKING:
        cuda_version: str
        cuda_minor_exceptions: str
        torch_version: str
        nccl_version: str
        nvshmem_version: str

    @property
    def cuda_major_minor(self) -> str:
        return ".".join(self.cuda_version.split(".")[:2])

    @property
    def cuda_exceptions(self) -> tuple[str, ...]:
        """The CUDA release wheels CUDA_MINOR_EXCEPTIONS lets be of another minor than CUDA_VERSION."""
        return v.names(self.cuda_minor_exceptions)

    @property
    def wheels(self) -> CudaWheels:
        """The CUDA-major wheel names (nvidia-nccl-cu13, ...); load_pins refuses an unknown major."""
        return cuda_wheels(self.cuda_version)

    @property
    def base_packages(self) -> dict[str, str]:
        """The Python distributions the base layer pins; no upper layer may move them."""
        return base_packages(self.cuda_version, self.torch_version, self.nccl_version, self.nvshmem_version)


class Pins(CudaFacts, BaseModel):
    """Everything pins.env pins. Field aliases are the pins.env keys."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=False)

    cuda_version: ExactVersion = Field(alias="CUDA_VERSION")
    cuda_devel_image: ImageByDigest = Field(alias="CUDA_DEVEL_IMAGE")
    cuda_runtime_image: ImageByDigest = Field(alias="CUDA_RUNTIME_IMAGE")
    cuda_minor_exceptions: Annotated[str, AfterValidator(v.distribution_list)] = Field(
        alias="CUDA_MINOR_EXCEPTIONS"
    )
    ubuntu_snapshot: Annotated[str, AfterValidator(v.snapshot)] = Field(alias="UBUNTU_SNAPSHOT")
    python_version: Annotated[str, AfterValidator(v.pattern(r"^3\.[0-9]{1,2}$", "3.12"))] = Field(
        alias="PYTHON_VERSION"
    )
    uv_version: ExactVersion = Field(alias="UV_VERSION")
    torch_version: ExactVersion = Field(alias="TORCH_VERSION")
    torch_cuda_tag: Annotated[str, AfterValidator(v.pattern(r"^cu[0-9]{3}$", "cu130"))] = Field(
        alias="TORCH_CUDA_TAG"
    )
    nccl_version: ExactVersion = Field(alias="NCCL_VERSION")
    nvshmem_version: ExactVersion = Field(alias="NVSHMEM_VERSION")
    gdrcopy_version: ExactVersion = Field(alias="GDRCOPY_VERSION")
    gdrcopy_ref: FullSha = Field(alias="GDRCOPY_REF")
    deepep_repo: Annotated[
        str, AfterValidator(v.pattern(r"^https://\S+\.git$", "https://host/org/repo.git"))
    ] = Field(alias="DEEPEP_REPO")
    deepep_ref: FullSha = Field(alias="DEEPEP_REF")
    deepep_fmt_ref: FullSha = Field(alias="DEEPEP_FMT_REF")
    deepep_patches_efa: Annotated[str, AfterValidator(v.patches)] = Field(alias="DEEPEP_PATCHES_EFA")
    deepep_patches_ib: Annotated[str, AfterValidator(v.patches)] = Field(alias="DEEPEP_PATCHES_IB")
    sglang_version: ExactVersion = Field(alias="SGLANG_VERSION")
    nixl_version: ExactVersion = Field(alias="NIXL_VERSION")
    vllm_version: ExactVersion = Field(alias="VLLM_VERSION")
    efa_installer_version: ExactVersion = Field(alias="EFA_INSTALLER_VERSION")
    efa_installer_sha256: Annotated[
        str, AfterValidator(v.pattern(r"^[0-9a-f]{64}$", "<64 lowercase hex>"))
    ] = Field(alias="EFA_INSTALLER_SHA256")
    aws_ofi_nccl_version: ExactVersion = Field(alias="AWS_OFI_NCCL_VERSION")
    rdma_core_version: DebianVersion = Field(alias="RDMA_CORE_VERSION")
    efa_gin_type: Annotated[str, AfterValidator(v.gin_type("efa"))] = Field(alias="EFA_GIN_TYPE")
    ib_gin_type: Annotated[str, AfterValidator(v.gin_type("ib"))] = Field(alias="IB_GIN_TYPE")
    fabrics: Annotated[tuple[str, ...], BeforeValidator(v.fabric_list)] = Field(alias="FABRICS")
    archs: dict[str, tuple[str, ...]] = Field(
        description="ARCH_<NAME>=9.0a,... one key per GPU generation; the target is <name>-<fabric>"
    )
    default_target: str = Field(alias="DEFAULT_TARGET")
    image_repository: Annotated[str, AfterValidator(v.repository)] = Field(alias="IMAGE_REPOSITORY")

    @property
    def cuda_home(self) -> str:
        """Where NVIDIA's images keep this CUDA release: /usr/local/cuda-13.0."""
        return f"/usr/local/cuda-{self.cuda_major_minor}"

    @property
    def image_target(self) -> ImageTarget:
        """The Python and wheel platform the images install for (the CUDA images' OS)."""
        return ImageTarget(
            python_version=self.python_version, platform=wheel_platform(image_os(self.cuda_devel_image))
        )

    def patches(self, fabric_name: str) -> tuple[Patch, ...]:
        """The DeepEP patches the deepep layer of a fabric's targets applies, in order."""
        return parse_patches(self.model_dump(by_alias=True)[fabric.FABRICS[fabric_name].patches_key])

    def gin_type(self, fabric_name: str) -> str:
        """The pinned NCCL GIN type for a fabric (EFA_GIN_TYPE, IB_GIN_TYPE)."""
        return str(self.model_dump(by_alias=True)[fabric.FABRICS[fabric_name].gin_key])

    @property
    def caveats(self) -> tuple[str, ...]:
        """What these pins allow but nobody has shown to work, or would waste; printed by `pins check`."""
        caveats = []
        for name in self.fabrics:
            facts = fabric.FABRICS[name]
            if not facts.gin_ok(self.nccl_version):
                caveats.append(
                    f"{facts.title} targets use GIN type {self.gin_type(name)} with NCCL "
                    f"{self.nccl_version}, below NCCL {facts.gin_min_nccl} ({facts.gin_floor_source}); "
                    "they build and run on one node; `cluster render` refuses them across nodes until "
                    "NCCL_VERSION is raised"
                )
        flavour = image_flavour(self.cuda_runtime_image)
        if flavour != CUDA_BASE_FLAVOUR:
            caveats.append(
                f"CUDA_RUNTIME_IMAGE is the {flavour} flavour: its CUDA libraries are the venv's nvidia "
                f"wheels again (1.7 GB for 13.0's runtime); the {CUDA_BASE_FLAVOUR} flavour holds cudart only"
            )
        return tuple(caveats)

    @property
    def targets(self) -> tuple[str, ...]:
        """Every arch x fabric combination, in pins file order."""
        return tuple(f"{arch}-{fabric}" for arch in self.archs for fabric in self.fabrics)

    def layer_pins(self, name: str, target: str) -> dict[str, str]:
        """The pins a layer of a target is built from, as pins.env keys: its own and those below it
        (layers.Layer.pin_keys), the target's fabric pins of those layers, and what the target decides."""
        arch, fabric_name = target.rsplit("-", 1)
        fabric_keys = fabric.FABRICS[fabric_name].pin_keys
        values = self.model_dump(by_alias=True)
        layers = up_to(name)
        keys = [key for each in layers for key in (*each.pin_keys, *fabric_keys.get(each.name, ()))]
        pinned = {key: str(values[key]) for key in keys}
        pinned["FABRIC"] = fabric_name
        if any(each.per_arch for each in layers):
            pinned["TORCH_CUDA_ARCH_LIST"] = " ".join(self.archs[arch])
        return pinned

    def layer_hash(self, name: str, target: str) -> str:
        """12 hex of the sha256 of the layer's pins: equal pins, equal tag."""
        canonical = json.dumps(self.layer_pins(name, target), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]

    def image_tag(self, name: str, target: str) -> str:
        """Readable tag ending in the layer hash: sglang-0.5.23-deepep-d4f41e4-cu13.0-hopper-efa-<12 hex>."""
        readable = layer_named(name).tag.format(
            cuda=self.cuda_major_minor,
            nccl=self.nccl_version,
            sglang=self.sglang_version,
            vllm=self.vllm_version,
            deepep=self.deepep_ref[:7],
            fabric=target.rsplit("-", 1)[1],
            target=target,
        )
        return f"{readable}-{self.layer_hash(name, target)}"

    def as_env(self) -> dict[str, str]:
        """Every pins.env key with its validated value, as pins.env writes it (lists comma-separated)."""
        values = {
            key: ",".join(value) if isinstance(value, tuple) else str(value)
            for key, value in self.model_dump(by_alias=True).items()
            if key != "archs"
        }
        values.update({arch_key(name): ",".join(archs) for name, archs in self.archs.items()})
        return values

    def target(self, name: str | None, path: Path) -> str:
        """`name`, or DEFAULT_TARGET when it is None; BadInput naming `path` when it is not a target."""
        target = name or self.default_target
        if target not in self.targets:
            raise BadInput(f"{target}: not a target of {path}; fix: use one of {', '.join(self.targets)}")
        return target

    def image_ref(self, name: str, target: str) -> str:
        return f"{self.image_repository}:{self.image_tag(name, target)}"
