"""What every JIT toolchain whose kernels are made on a GPU offers (DeepEP, DeepGEMM, SGLang's own): one
module each in epstack.jit satisfies this protocol, and epstack.jit.registry lists them. The commands
(`jit export`, `jit unpack`, `jit layer`) walk the registry; adding such a toolchain is one module and its
registry line (docs/contributing.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from epstack.jit.export import Kind


class Exported(Protocol):
    """A toolchain whose cache a GPU run exports and a layer over the image unpacks by digest."""

    NAME: str  # `jit export --toolchain NAME`
    TITLE: str  # in messages: "DeepGEMM"
    TOOL: str  # its folder in an export and under the image's JIT folder: "deep_gemm"
    SHIPPED: Path  # where `jit unpack` puts its kernels in the image
    KIND: Kind  # its archive's manifest schema and file names
    AGAIN: str  # how to make its kernels again, for a fix

    def cache_dir(self, env: Mapping[str, str]) -> Path:
        """The folder the toolchain compiles into, as it finds it in `env`."""
        ...

    def image_key(self, env: Mapping[str, str]) -> Any:
        """This install's side of the cache key (the device's fields empty)."""
        ...

    def pack(self, root: Path, key: Any) -> tuple[bytes, Any]:
        """The export archive of the cache in `root`, and its manifest."""
        ...

    def install_differences(self, key: Any, archs: Sequence[str], env: Mapping[str, str]) -> list[str]:
        """What keeps kernels made under `key` from loading in this install."""
        ...

    def install(self, manifest: Any, files: Mapping[str, bytes], into: Path) -> None:
        """The kernels into a new read-only folder `into`, manifest and sums beside."""
        ...


class Placed(Exported, Protocol):
    """An exported toolchain whose shipped kernels the guard finds, entry by entry, in its live cache."""

    COLD_S: str  # what compiling them costs a cold start, measured

    def read_manifest(self, into: Path) -> Any:
        """The manifest of the kernels shipped in `into` (None when none are)."""
        ...

    def entries(self, manifest: Any) -> list[str]:
        """Each whole entry the manifest lists, as a path under the cache."""
        ...

    def placed(self, cache: Path, entry: str) -> bool:
        """Whether `entry` is whole in the live cache, where the toolchain loads it."""
        ...

    def made_with(self, key: Any) -> str:
        """The versions in `key` that decide whether the kernels load, for the guard's row."""
        ...
