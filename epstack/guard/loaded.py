"""Native libraries as a process really has them: what /proc/self/maps maps, and their own version
calls through ctypes. No dependencies beyond the standard library: GPU hosts import this bare.
"""

from __future__ import annotations

import ctypes
import functools
import re
from collections.abc import Iterable
from pathlib import Path

from epstack.cmd import call


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


def decode_cuda_version(code: int) -> str:
    """cudaRuntimeGetVersion / cuDriverGetVersion encoding: 13000 -> 13.0, 12080 -> 12.8."""
    return f"{code // 1000}.{code % 1000 // 10}"


def cuda_driver_version(library: str = "libcuda.so.1") -> str | None:
    """The CUDA version the installed driver supports (cuDriverGetVersion); None without libcuda."""
    try:
        return decode_cuda_version(library_version(library, "cuDriverGetVersion"))
    except (OSError, AttributeError):
        return None


def cuda_device_problem(library: str = "libcuda.so.1") -> str:
    """Why this process has no GPU to use, as torch.cuda.is_available() decides it ("" if it has one):
    no driver library, cuInit failing (the driver stub, no device, CUDA_VISIBLE_DEVICES=""), no device."""
    try:
        cuda = ctypes.CDLL(library)
    except OSError as exc:
        return f"no GPU: {exc}"
    status = cuda.cuInit(0)
    if status != 0:
        return f"no GPU: cuInit returned {status}"
    count = ctypes.c_int(0)
    status = cuda.cuDeviceGetCount(ctypes.byref(count))
    if status != 0 or count.value == 0:
        return f"no GPU: cuDeviceGetCount returned {status}, {count.value} devices"
    return ""


def decode_nccl_version(code: int) -> tuple[int, int, int]:
    """NCCL >= 2.9 encodes major*10000 + minor*100 + patch (23007); older major*1000 + ... (2708)."""
    major, rest = divmod(code, 10000) if code >= 10000 else divmod(code, 1000)
    return major, rest // 100, rest % 100


def nccl_version(library: str | Path) -> str:
    """ncclGetVersion of a library as text: 23007 -> 2.30.7."""
    return ".".join(map(str, decode_nccl_version(library_version(library, "ncclGetVersion"))))


_STRONG = frozenset("TDBRGSi")  # defined, not weak: these interpose on libstdc++'s own


def defined_symbols(nm_text: str) -> dict[str, str]:
    """`nm -D --defined-only` output -> {symbol: type letter}."""
    out: dict[str, str] = {}
    for line in nm_text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and len(parts[1]) == 1:
            out[parts[2].split("@")[0]] = parts[1]
        elif len(parts) == 2 and len(parts[0]) == 1:  # no address column (absolute symbols)
            out[parts[1].split("@")[0]] = parts[0]
    return out


def _is_std(symbol: str) -> bool:
    return symbol.startswith(("_ZNSt", "_ZNKSt", "_ZSt", "_ZTVSt", "_ZTISt", "_ZTSSt", "_ZGVNSt"))


def interposed_symbols(c_so_nm: str, libstdcxx_nm: str | None) -> list[str]:
    """Symbols deep_ep/_C.so exports that libstdc++ itself defines (the interposition).

    Weak template instantiations (std::vector<T> members) are normal in any C++ extension; a
    strong definition of a symbol libstdc++ also exports, or anything codecvt, is not. Without
    libstdc++'s own list, strong std:: definitions are the evidence.
    """
    ours = defined_symbols(c_so_nm)
    theirs = defined_symbols(libstdcxx_nm) if libstdcxx_nm is not None else None
    found: Iterable[str]
    if theirs is not None:
        found = (s for s, t in ours.items() if s in theirs and (t in _STRONG or "codecvt" in s))
    else:
        found = (s for s, t in ours.items() if _is_std(s) and (t in _STRONG or "codecvt" in s))
    return sorted(found)


@functools.cache
def _ldd(shared_object: Path) -> str:
    """ldd's answer, once per process (the guard asks it of deep_ep's _C.so for NCCL and libstdc++)."""
    return call("ldd", shared_object, capture=True, echo=False)


# ldd's line for a needed library: "\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x...)", or
# "=> not found"; the loader's own and the vDSO have no "=>".
_LDD_NEEDED = re.compile(r"^\s*(\S+)\s+=>\s*(\S*)")


def linked_library(shared_object: Path, prefix: str) -> str | None:
    """The file the loader resolves `shared_object`'s needed library starting with `prefix` to (ldd),
    or None when it needs none or the loader finds none. Raises EpstackError when ldd cannot run."""
    for line in _ldd(shared_object).splitlines():
        needed = _LDD_NEEDED.match(line)
        if needed and needed[1].startswith(prefix):
            return needed[2] if needed[2].startswith("/") else None
    return None


def libstdcxx_interposition(shared_object: Path) -> list[str]:
    """What `shared_object` interposes on the libstdc++ it loads with (nm -D and ldd): a C++
    extension linked against a second g++'s libstdc++ exports its symbols, and DeepEP's JIT then
    reaches the wrong std::codecvt and SEGFAULTs. Raises EpstackError when nm or ldd cannot run."""
    ours = call("nm", "-D", "--defined-only", shared_object, capture=True, echo=False)
    libstdcxx = linked_library(shared_object, "libstdc++")
    theirs = call("nm", "-D", "--defined-only", libstdcxx, capture=True, echo=False) if libstdcxx else None
    return interposed_symbols(ours, theirs)


def interposition_example(symbols: list[str]) -> str:
    """The symbol to name in a message: a codecvt one where there is one (the facet DeepEP's JIT
    crashes in), else the first."""
    return next((symbol for symbol in symbols if "codecvt" in symbol), symbols[0])
