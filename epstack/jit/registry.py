"""The JIT toolchains epstack ships caches of, by the name `jit export --toolchain` takes."""

from __future__ import annotations

from epstack.jit import deepep, deepgemm, flashinfer, sglang, triton
from epstack.jit.export import Kind
from epstack.jit.install import CacheHome
from epstack.jit.toolchain import Exported, Placed

EXPORTED: dict[str, Exported] = {"deepep": deepep, "deepgemm": deepgemm, "sglang": sglang}
# Those a serve run makes, whose guard row looks for each entry in the live cache.
PLACED: tuple[Placed, ...] = (deepgemm, sglang)
# Every shipped cache `jit install` copies into its writable one at container start, in this order.
INSTALLED: tuple[CacheHome, ...] = (deepep.HOME, deepgemm.HOME, sglang.HOME, flashinfer.HOME, triton.HOME)


def by_kind(kind: Kind) -> Exported:
    """The toolchain whose archives are of `kind`."""
    return next(toolchain for toolchain in EXPORTED.values() if kind == toolchain.KIND)


def kinds() -> tuple[Kind, ...]:
    return tuple(toolchain.KIND for toolchain in EXPORTED.values())
