"""Which CUDA, NCCL and NVIDIA libraries each recorded process mapped, and from where.

    python -m benchmarks.elastic.mapped_libraries MAPS_DIR --cuda-home SUBSET --toolkit FULL --json OUT

MAPS_DIR holds <pid>.maps files (maps_hook/sitecustomize.py writes them). Each library is placed as:
the venv's wheels (site-packages), the image's CUDA_HOME (SUBSET), the host's whole toolkit (FULL: a
CUDA copy the image does not carry), the driver, or elsewhere. Exit 1 when any process mapped a library
from FULL: the image would not have had it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

LIBRARY = re.compile(r"(/\S*/lib(?:cu|nv|nccl|cudart|nvrtc|nvJitLink|nvshmem)[^/\s]*\.so[^/\s]*)$")


def place(path: str, cuda_home: str, toolkit: str) -> str:
    if "/site-packages/" in path:
        return "venv wheels"
    if path.startswith(cuda_home + "/"):
        return "image CUDA_HOME"
    if path.startswith(toolkit + "/"):
        return "host toolkit (not in the image)"
    if "libcuda.so" in path or "libnvidia" in path:
        return "driver"
    return "elsewhere"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("maps", type=Path)
    parser.add_argument("--cuda-home", required=True)
    parser.add_argument("--toolkit", required=True)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    processes = []
    for maps in sorted(args.maps.glob("*.maps")):
        lines = maps.read_text().splitlines()
        argv = lines[0].removeprefix("# argv: ")
        libraries = sorted({m[1] for line in lines[1:] if (m := LIBRARY.search(line))})
        where: dict[str, list[str]] = {}
        for library in libraries:
            where.setdefault(place(library, args.cuda_home, args.toolkit), []).append(library)
        processes.append({"pid": maps.stem, "argv": argv, "libraries": where})
    outside = [p["pid"] for p in processes if "host toolkit (not in the image)" in p["libraries"]]
    summary = {"processes": len(processes), "from_a_cuda_the_image_lacks": outside, "by_process": processes}
    args.json.write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"{len(processes)} processes; mapped from the host's toolkit (not in the image): {outside or 'none'}"
    )
    return 1 if outside or not processes else 0


if __name__ == "__main__":
    sys.exit(main())
