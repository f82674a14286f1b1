"""The JIT toolchains epstack ships caches of: every one in TOOLCHAINS, in the order `epstack image
jit-install` copies their caches at container start; those a GPU run exports by the name `jit export
--toolchain` takes."""

from __future__ import annotations

from epstack.jit import deepep, deepgemm, flashinfer, sglang, triton, tritonserve, vllmcompile
from epstack.jit.export import Kind
from epstack.jit.install import CacheHome
from epstack.jit.toolchain import Exported, Toolchain

TOOLCHAINS: tuple[Toolchain, ...] = (deepep, deepgemm, sglang, flashinfer, triton, tritonserve, vllmcompile)
EXPORTED: dict[str, Exported] = {
    toolchain.NAME: toolchain for toolchain in (deepep, deepgemm, sglang, tritonserve, vllmcompile)
}
# Every shipped cache `jit install` copies into its writable one at container start, in this order.
INSTALLED: tuple[CacheHome, ...] = tuple(toolchain.HOME for toolchain in TOOLCHAINS)


def by_kind(kind: Kind) -> Exported:
    """The toolchain whose archives are of `kind`."""
    return next(toolchain for toolchain in EXPORTED.values() if kind == toolchain.KIND)


def kinds() -> tuple[Kind, ...]:
    return tuple(toolchain.KIND for toolchain in EXPORTED.values())
