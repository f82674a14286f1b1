"""The pinned vLLM's argument parser, installed as lightly as it runs: `pip install --no-deps --target
.cache/vllm-parser-<version>` of tests/cluster/vllm-parser.txt (sglang_env.install), then vllm's native
libraries removed (vLLM's parser path loads none of them: 878 MB of the install), used by the test venv's
Python (its CPU torch, numpy, pydantic) with PYTHONPATH pointing there. vLLM picks its platform by the GPU
it finds; with none, VLLM_TARGET_DEVICE=cpu is vLLM's own switch for running its CUDA wheel's Python on a
CPU (its CPU-only CI jobs do), so the parser builds its configs. `python -m tests.cluster.vllm_env`
installs it and prints the size and the time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.cluster.sglang_env import REPO, _size, install

HERE = Path(__file__).parent
REQUIREMENTS = HERE / "vllm-parser.txt"
RUNNER = HERE / "vllm_parse.py"


def pinned_vllm() -> str:
    line = next(line for line in REQUIREMENTS.read_text().splitlines() if line.startswith("vllm=="))
    return line.split("==", 1)[1]


def env_dir() -> Path:
    return REPO / ".cache" / f"vllm-parser-{pinned_vllm()}"


def ensure() -> Path:
    """Install when missing or when the requirements changed; drop vllm's native libraries; return it."""
    target = install(env_dir(), REQUIREMENTS.read_text(), ["-r", str(REQUIREMENTS)])
    for library in (target / "vllm").rglob("*.so"):
        library.unlink()
    return target


def parse(commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run vLLM's `vllm serve` parser over every {"id", "argv"} in one process; see vllm_parse.py."""
    env = dict(os.environ, PYTHONPATH=str(ensure()), PYTHONWARNINGS="always", VLLM_TARGET_DEVICE="cpu")
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
        raise RuntimeError(f"vllm_parse.py exited {result.returncode}: {result.stderr[-4000:]}")
    parsed: list[dict[str, Any]] = json.loads(result.stdout.strip().splitlines()[-1])
    return parsed


if __name__ == "__main__":
    started = time.perf_counter()
    shutil.rmtree(env_dir(), ignore_errors=True) if "--fresh" in sys.argv else None
    where = ensure()
    seconds = time.perf_counter() - started
    print(json.dumps({"dir": str(where), "mb": round(_size(where) / 2**20), "install_s": round(seconds, 1)}))
