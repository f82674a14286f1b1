"""The tiny profile's generated checkpoint: its bytes, the time to write it and to find it again, and each
file's sha256 (the same seed gives the same bytes: compare two hosts' JSON).

    python -m benchmarks.serve.tiny_checkpoint OUT.json [FOLDER]

FOLDER (default: a new temporary folder, removed afterwards) gets the model as `epstack smoke serve`
writes it (epstack.smoke.serving.tinymodel.ensure); run with the serving Python (torch, safetensors,
tokenizers, transformers).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from epstack.smoke.serving import tinymodel


def sha256(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    out = Path(argv[0])
    root = Path(argv[1]) if len(argv) > 1 else Path(tempfile.mkdtemp(prefix="tiny-checkpoint-"))
    folder = root / tinymodel.NAME
    try:
        import torch  # noqa: PLC0415 (the serving Python's)

        began = time.monotonic()
        written = tinymodel.ensure(folder)
        wall = time.monotonic() - began
        began = time.monotonic()
        again = tinymodel.ensure(folder)
        reuse_s = time.monotonic() - began
        result = {
            "schema": "tiny-checkpoint/1",
            "host": {
                "cpus": os.cpu_count(),
                "machine": platform.machine(),
                "torch_version": torch.__version__,
            },
            "key": written.key,
            "reused_first": written.reused,
            "write_s": written.seconds,
            "ensure_wall_s": round(wall, 1),
            "reused_second": again.reused,
            "reuse_s": round(reuse_s, 4),
            "bytes": written.bytes,
            "gib": round(written.bytes / 2**30, 3),
            "files": {
                name: {"bytes": size, "sha256": sha256(folder / name)} for name, size in written.files.items()
            },
        }
    finally:
        if len(argv) == 1:
            shutil.rmtree(root, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "files"}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
