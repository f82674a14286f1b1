"""What the guard compares with: the pins of an image layer, or of a whole pins.env."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from epstack.errors import BadInput
from epstack.layers import GUARD_SCOPES
from epstack.pins.deepepsources import fabric_patches
from epstack.pins.load import pin_values
from epstack.pins.model import CudaFacts


@dataclass(frozen=True, kw_only=True)
class Expected(CudaFacts):
    """What the guard compares with: the pins of one image layer (the layer pins file render puts in
    each image), or of a whole pins.env, which names no fabric and so pins no one set of patches."""

    cuda_version: str = ""
    cuda_minor_exceptions: str = "none"  # absent from the layer pins files of images before it
    torch_version: str = ""
    torch_cuda_tag: str = ""
    nccl_version: str = ""
    nvshmem_version: str = ""
    deepep_repo: str = ""
    deepep_ref: str = ""
    sglang_version: str = ""
    nixl_version: str = ""
    vllm_version: str = ""
    torch_cuda_arch_list: str = ""  # a layer pins file's archs ("" in a pins.env: per target)
    # The DeepEP patches of the image's fabric (None: a pins.env, which pins them per fabric).
    deepep_patches: tuple[str, ...] | None = None


def load_expected(path: Path, scopes: list[str]) -> Expected:
    """A full pins.env (validated by load_pins), or a layer pins file (validated by the same value
    rules) holding every key the guard `scopes` read (epstack.layers.GuardScope.keys)."""
    values = pin_values(path)
    fabric = values.get("FABRIC")  # a layer pins file's; pins.env has no such key
    for scope in GUARD_SCOPES:
        missing = [key for key in scope.keys if key not in values] if scope.name in scopes else []
        if missing:
            raise BadInput(
                f"{path}: no {missing[0]}, which guard --layer {scope.name} needs; "
                "fix: pass pins.env or the layer pins file of this image"
            )
    known = {f.name for f in fields(Expected)}  # no pins key is DEEPEP_PATCHES (only _<FABRIC>)
    return Expected(
        **{key.lower(): value for key, value in values.items() if key.lower() in known},
        deepep_patches=tuple(str(patch) for patch in fabric_patches(values, fabric)) if fabric else None,
    )
