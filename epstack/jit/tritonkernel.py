"""The kernel `epstack jit probe` compiles with Triton: imported only in the probe's own process, inside
an image or on a GPU host, where Triton is installed (Triton reads a kernel's globals from its module)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit  # type: ignore[untyped-decorator]
def add(x, y, out, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    """out = x + y over n floats."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + i, tl.load(x + i, mask=i < n) + tl.load(y + i, mask=i < n), mask=i < n)
