"""Print C source for a libcuda.so stub: every function cuda.h declares, returning CUDA_ERROR_STUB_LIBRARY.

NVIDIA's devel image carries such a stub (lib64/stubs/libcuda.so) so programs link and load where no
driver is installed; no wheel ships it. Usage: python3 libcuda-stub.py path/to/cuda.h > stub.c
The header is preprocessed first, so the names are the ones programs link against (cuMemAlloc_v2).
"""

import re
import subprocess
import sys
from pathlib import Path

CUDA_ERROR_STUB_LIBRARY = 34


def main() -> None:
    header = Path(sys.argv[1])
    preprocessed = subprocess.run(
        ["gcc", "-E", "-P", "-x", "c", f"-I{header.parent}", "-"],
        input=f'#include "{header.name}"\n',
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    names = sorted(set(re.findall(r"\bCUresult\s+(cu\w+)\s*\(", preprocessed)))
    if len(names) < 100:
        sys.exit(f"{header}: only {len(names)} driver functions found; not NVIDIA's cuda.h?")
    print(f"/* libcuda stub for {header}: {len(names)} functions. */")
    for name in names:
        print(f"int {name}(void) {{ return {CUDA_ERROR_STUB_LIBRARY}; }}")


if __name__ == "__main__":
    main()
