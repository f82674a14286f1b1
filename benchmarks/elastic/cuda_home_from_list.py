"""A CUDA_HOME made from an image's own file list, each file copied from a full toolkit.

    python -m benchmarks.elastic.cuda_home_from_list LIST TOOLKIT DEST --json OUT

LIST is `find CUDA_HOME -printf '%y %P %l\\n'` run in the built image (benchmarks/images.py writes it):
a type (f file, l link, d folder), the path under CUDA_HOME, and a link's target. Files are copied from
TOOLKIT (the host's /usr/local/cuda-13.0), links made as the image has them. What the toolkit lacks is
listed, never guessed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("list", type=Path)
    parser.add_argument("toolkit", type=Path)
    parser.add_argument("dest", type=Path)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    copied, links, missing = 0, 0, []
    for line in args.list.read_text().splitlines():
        kind, _, rest = line.partition(" ")
        path, _, target = rest.partition(" ")
        if not path:
            continue
        destination = args.dest / path
        if kind == "d":
            destination.mkdir(parents=True, exist_ok=True)
        elif kind == "l":
            destination.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, destination)
            links += 1
        elif (args.toolkit / path).exists():
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(args.toolkit / path, destination)  # follows the toolkit's own links
            copied += 1
        else:
            missing.append(path)
    size = sum(f.stat().st_size for f in args.dest.rglob("*") if f.is_file() and not f.is_symlink())
    summary = {"list": str(args.list), "toolkit": str(args.toolkit), "files": copied, "links": links,
               "bytes": size, "missing_from_toolkit": missing}  # fmt: skip
    args.json.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"CUDA_HOME {args.dest}: {copied} files, {links} links, {size} bytes; missing: {missing or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
