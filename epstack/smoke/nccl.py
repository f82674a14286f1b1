"""The NCCL a process really runs: the libnccl mapped into it, asked through ctypes.

Never torch.cuda.nccl.version(): that is the number torch was compiled against (2.28.9 printed
while 2.30.7 was loaded, on the H200 machine). Call after `import torch`, which maps libnccl.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

MIN_NCCL = (2, 30, 4)  # DeepEP V2's GIN device API (ncclDevCommCreate, ncclCommQueryProperties)


@dataclass(frozen=True, kw_only=True)
class NcclInfo:
    path: str
    code: int  # what ncclGetVersion returns, e.g. 23007
    paths: tuple[str, ...]  # every libnccl mapped (more than one is itself a problem)

    @property
    def version(self) -> tuple[int, int, int]:
        return decode_version(self.code)

    @property
    def text(self) -> str:
        return ".".join(map(str, self.version))

    @property
    def new_enough(self) -> bool:
        return self.version >= MIN_NCCL


def decode_version(code: int) -> tuple[int, int, int]:
    """NCCL >= 2.9 encodes major*10000 + minor*100 + patch; older major*1000 + minor*100 + patch."""
    if code >= 10000:
        return code // 10000, (code % 10000) // 100, code % 100
    return code // 1000, (code % 1000) // 100, code % 100


def mapped_nccl(maps_text: str) -> tuple[str, ...]:
    """The distinct libnccl paths in a /proc/<pid>/maps text, in the order first mapped."""
    seen: list[str] = []
    for line in maps_text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and "libnccl" in Path(parts[5]).name and parts[5] not in seen:
            seen.append(parts[5])
    return tuple(seen)


def loaded_nccl(maps: Path = Path("/proc/self/maps")) -> NcclInfo | None:
    """The version of the libnccl mapped into this process, or None when none is mapped."""
    paths = mapped_nccl(maps.read_text())
    if not paths:
        return None
    lib = ctypes.CDLL(paths[0])  # already mapped: dlopen hands back that same library
    code = ctypes.c_int(0)
    if lib.ncclGetVersion(ctypes.byref(code)) != 0:
        raise RuntimeError(f"ncclGetVersion failed in {paths[0]}")
    return NcclInfo(path=paths[0], code=code.value, paths=paths)
