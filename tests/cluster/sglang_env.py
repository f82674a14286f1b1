"""The pinned SGLang's argument parser, installed as lightly as it runs: `pip install --no-deps
--target .cache/sglang-parser-<version>` of tests/cluster/sglang-parser.txt, used by the test venv's
Python (its CPU torch, numpy, requests) with PYTHONPATH pointing there. `python -m
tests.cluster.sglang_env` (or `make sglang-parser`) installs it and prints the size and the time.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
REPO = HERE.parent.parent
REQUIREMENTS = HERE / "sglang-parser.txt"
RUNNER = HERE / "sglang_parse.py"


def pinned_sglang() -> str:
    line = next(line for line in REQUIREMENTS.read_text().splitlines() if line.startswith("sglang=="))
    return line.split("==", 1)[1]


def env_dir() -> Path:
    return REPO / ".cache" / f"sglang-parser-{pinned_sglang()}"


def ensure() -> Path:
    """Install when missing or when the requirements changed; return the directory."""
    return install(env_dir(), REQUIREMENTS.read_text(), ["-r", str(REQUIREMENTS)])


def install(target: Path, stamp_text: str, requirements: list[str]) -> Path:
    """`pip install --no-deps --target` of `requirements` into `target`, again only when `stamp_text`
    (what the requirements say) changed; whole or not at all (a .partial folder renamed)."""
    stamp = target / ".epstack-requirements.sha256"
    digest = hashlib.sha256(stamp_text.encode()).hexdigest()
    if stamp.is_file() and stamp.read_text() == digest:
        return target
    shutil.rmtree(target, ignore_errors=True)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--target",
            str(partial),
            *requirements,
        ],
        check=True,
    )
    (partial / stamp.name).write_text(digest)
    partial.rename(target)
    return target


def parse(commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run SGLang's prepare_server_args over every {"id", "argv"} in one process; see sglang_parse.py."""
    env = dict(os.environ, PYTHONPATH=str(ensure()), PYTHONWARNINGS="always")
    result = subprocess.run(
        [sys.executable, str(RUNNER)],
        input=json.dumps(commands),
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if result.returncode != 0:
        raise RuntimeError(f"sglang_parse.py exited {result.returncode}: {result.stderr[-4000:]}")
    parsed: list[dict[str, Any]] = json.loads(result.stdout)
    return parsed


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


if __name__ == "__main__":
    started = time.perf_counter()
    shutil.rmtree(env_dir(), ignore_errors=True) if "--fresh" in sys.argv else None
    where = ensure()
    seconds = time.perf_counter() - started
    print(json.dumps({"dir": str(where), "mb": round(_size(where) / 2**20), "install_s": round(seconds, 1)}))
