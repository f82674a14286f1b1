"""The NCCL a process really runs: the libnccl mapped into it, asked through ctypes.

Never torch.cuda.nccl.version(): that is the number torch was compiled against (2.28.9 printed
while 2.30.7 was loaded, on the H200 machine). Call after `import torch`, which maps libnccl.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from epstack.guard.loaded import decode_nccl_version, library_version, mapped_libraries
from epstack.stack import DEEPEP_V2_MIN_NCCL, release


@dataclass(frozen=True, kw_only=True)
class NcclInfo:
    path: str
    code: int  # what ncclGetVersion returns, e.g. 23007
    paths: tuple[str, ...]  # every libnccl mapped (more than one is itself a problem)

    @property
    def version(self) -> tuple[int, int, int]:
        return decode_nccl_version(self.code)

    @property
    def text(self) -> str:
        return ".".join(map(str, self.version))

    @property
    def new_enough(self) -> bool:
        return self.version >= release(DEEPEP_V2_MIN_NCCL)


def loaded_nccl(maps: Path = Path("/proc/self/maps")) -> NcclInfo | None:
    """The version of the libnccl mapped into this process, or None when none is mapped."""
    paths = tuple(mapped_libraries(maps.read_text(), "libnccl.so"))
    if not paths:
        return None
    # Already mapped: dlopen hands back that same library.
    return NcclInfo(path=paths[0], code=library_version(paths[0], "ncclGetVersion"), paths=paths)
