"""Native libraries as a process really has them: what /proc/self/maps maps, and their own version
calls through ctypes. No dependencies beyond the standard library: GPU hosts import this bare.
"""

from __future__ import annotations

import ctypes
from pathlib import Path


def mapped_libraries(maps_text: str, prefix: str) -> list[str]:
    """Distinct paths in /proc/<pid>/maps text whose file name starts with prefix (e.g. libnccl.so),
    in the order first mapped. A prefix, not a substring: libnccl-net-ofi.so is not an NCCL."""
    paths: dict[str, None] = {}
    for line in maps_text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and Path(fields[5]).name.startswith(prefix):
            paths[fields[5]] = None
    return list(paths)


def library_version(library: str | Path, symbol: str) -> int:
    """Call `int symbol(int *version)` (ncclGetVersion, cudaRuntimeGetVersion, cuDriverGetVersion)."""
    function = getattr(ctypes.CDLL(str(library)), symbol)
    function.argtypes = [ctypes.POINTER(ctypes.c_int)]
    function.restype = ctypes.c_int
    value = ctypes.c_int(0)
    status = function(ctypes.byref(value))
    if status != 0:
        raise OSError(f"{symbol} returned {status}")
    return value.value


def decode_nccl_version(code: int) -> tuple[int, int, int]:
    """NCCL >= 2.9 encodes major*10000 + minor*100 + patch (23007); older major*1000 + ... (2708)."""
    major, rest = divmod(code, 10000) if code >= 10000 else divmod(code, 1000)
    return major, rest // 100, rest % 100


def nccl_version(library: str | Path) -> str:
    """ncclGetVersion of a library as text: 23007 -> 2.30.7."""
    return ".".join(map(str, decode_nccl_version(library_version(library, "ncclGetVersion"))))
