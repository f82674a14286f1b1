"""What every JIT toolchain epstack ships a cache of offers: one module each in epstack.jit (deepep,
deepgemm, sglang, flashinfer, triton, tritonserve) satisfies `Toolchain`, and epstack.jit.registry lists
them in TOOLCHAINS (mypy checks each against it). Those whose kernels a GPU run exports (DeepEP, DeepGEMM,
SGLang's own, Triton's) satisfy `Exported` too, which `jit export`, `jit unpack` and `jit layer` walk;
those whose shipped kernels the guard looks for in the live cache, entry by entry, satisfy `Placed`
(their row is epstack.jit.placed's). Each toolchain's guard row is its own `guard_rows`: it needs only
epstack.checkrow, so the rows live beside what they check and the guard (one floor up) iterates the
registry, naming no toolchain. Adding one is its module and its registry line (docs/contributing.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from epstack.checkrow import Check
from epstack.jit.export import Kind
from epstack.jit.install import CacheHome


class Toolchain(Protocol):
    """A toolchain whose compiled kernels the image ships, installs at start and guards."""

    NAME: str  # its name: `jit export --toolchain NAME` for an exported one
    TITLE: str  # in messages: "DeepGEMM"
    SHIPPED: Path  # where the image ships its kernels, under imagepaths.JIT
    HOME: CacheHome  # its writable cache, which `epstack image jit-install` fills from SHIPPED at start
    COMPONENT: str  # its guard row's component: "JIT cache DeepGEMM"
    GUARD_SCOPES: tuple[str, ...]  # the guard scopes whose build checks its row: ("sglang", "vllm")
    CHECKED_AT_START: bool  # whether the start guard checks its row again, or keeps the build's

    def guard_rows(
        self, env: Mapping[str, str], archs: Sequence[str], *, verify_bytes: bool = True
    ) -> list[Check]:
        """Its guard row for an image of `archs`: shipped or not, intact and made for this install
        (`verify_bytes`; at start the build's record vouches for both), and where it loads them."""
        ...


class Exported(Toolchain, Protocol):
    """A toolchain whose cache a GPU run exports and a layer over the image unpacks by digest."""

    TOOL: str  # its folder in an export and under the image's JIT folder: "deep_gemm"
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

    def placed(self, cache: Path, entry: str) -> bool:
        """Whether `entry` is whole in the live cache, where the toolchain loads it."""
        ...

    def made_with(self, key: Any) -> str:
        """The versions in `key` that decide whether the kernels load (its compiler's among them), for the
        guard's row."""
        ...
