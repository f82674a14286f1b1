"""What Triton's launcher costs a new process's first kernel launch: `CudaUtils()`, which loads
cuda_utils from $TRITON_CACHE_DIR or builds it there (gcc), timed, with the cache's key folders
before and after (a build adds one).

Usage: python -m benchmarks.elastic.triton_first_launch --json OUT   (TRITON_CACHE_DIR set)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from triton.backends.nvidia.driver import CudaUtils, libcuda_dirs


def _keys(cache: Path) -> list[str]:
    return sorted(path.name for path in cache.iterdir()) if cache.is_dir() else []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    cache = Path(os.environ["TRITON_CACHE_DIR"])
    before = _keys(cache)
    start = time.perf_counter()
    CudaUtils()
    seconds = time.perf_counter() - start
    result = {
        "libcuda_dirs": libcuda_dirs(),
        "launcher_s": round(seconds, 4),
        "keys_before": before,
        "keys_built": sorted(set(_keys(cache)) - set(before)),
    }
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
