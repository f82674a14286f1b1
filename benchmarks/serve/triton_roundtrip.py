"""Triton's serve-time kernels shipped as a GPU export (epstack.jit.tritonserve), end to end on a GPU
host, at the image's paths: two Triton kernels (the JIT probe's, at two block sizes) compiled into an
empty $TRITON_CACHE_DIR (the image's, /var/cache/epstack-jit/triton), `epstack jit export --toolchain
triton-kernels`, the cache emptied, `epstack image jit-unpack` by sha256 into the image's shipped
folder, the entrypoint's copy (`epstack image jit-install`), the guard's row, then the same kernels in
a new process: their first calls and what Triton compiled again. Last, the export unpacked where
TRITON_CACHE_DIR names another folder: refused.

    python -m benchmarks.serve.triton_roundtrip            # on a GPU host, as root; JSON to $OUT

The kernels run in child processes (`... kernels`), each a fresh Triton, as a serving start is.
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

CACHE = Path("/var/cache/epstack-jit/triton")  # the image's TRITON_CACHE_DIR (images/base)
EXPORT = Path("/tmp/triton-roundtrip/triton_kernels-kernels.tar.gz")


def kernels() -> dict[str, Any]:
    """In a child: the probe's kernel (epstack.jit.tritonkernel.add) at two block sizes, two kernels to
    Triton, each called twice; their seconds and whether the sums are right."""
    import torch  # noqa: PLC0415
    import triton  # noqa: PLC0415

    from epstack.jit.tritonkernel import add  # noqa: PLC0415

    n = 1 << 20
    x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
    calls: dict[str, list[float]] = {}
    right = True
    for block in (1024, 512, 1024, 512):
        out = torch.empty_like(x)
        began = time.perf_counter()
        add[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block)
        torch.cuda.synchronize()
        calls.setdefault(f"add BLOCK={block}", []).append(round(time.perf_counter() - began, 4))
        right = right and bool(torch.allclose(out, x + y))
    return {"triton": triton.__version__, "calls_s": calls, "right": right}


def step(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    began = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    return {
        "argv": argv[2:] if argv[:2] == [sys.executable, "-m"] else argv,
        "exit": done.returncode,
        "seconds": round(time.monotonic() - began, 2),
        "output": (done.stdout + done.stderr).strip().splitlines()[-6:],
    }


def run() -> dict[str, Any]:
    from epstack.jit import tritonserve  # noqa: PLC0415

    env = {**os.environ, "TRITON_CACHE_DIR": str(CACHE)}
    for folder in (CACHE, tritonserve.SHIPPED, EXPORT.parent):
        shutil.rmtree(folder, ignore_errors=True)
    CACHE.mkdir(parents=True)
    EXPORT.parent.mkdir(parents=True)
    epstack = [sys.executable, "-m", "epstack"]
    child = [sys.executable, "-m", "benchmarks.serve.triton_roundtrip", "kernels"]
    result: dict[str, Any] = {"cache": str(CACHE), "shipped": str(tritonserve.SHIPPED)}
    result["compile"] = step(child, env)
    result["compiled_entries"] = [p.name for p in tritonserve.published(CACHE)]
    result["all_entries"] = sorted(p.name for p in CACHE.iterdir())
    result["export"] = step(
        [*epstack, "jit", "export", "--toolchain", "triton-kernels", "--out", str(EXPORT)], env
    )
    sha256 = EXPORT.with_name(f"{EXPORT.name}.sha256").read_text().split()[0] if EXPORT.is_file() else ""
    elsewhere = {**env, "TRITON_CACHE_DIR": "/tmp/triton-roundtrip/other"}
    result["unpack_other_folder"] = step(
        [*epstack, "image", "jit-unpack", str(EXPORT), "--sha256", sha256], elsewhere
    )
    shutil.rmtree(tritonserve.SHIPPED, ignore_errors=True)  # were it not refused
    shutil.rmtree(CACHE)
    CACHE.mkdir()
    result["unpack"] = step([*epstack, "image", "jit-unpack", str(EXPORT), "--sha256", sha256], env)
    result["install"] = step([*epstack, "image", "jit-install"], env)
    rows = tritonserve.guard_rows(env, ["9.0a"])
    result["guard_rows"] = [{"verdict": r.verdict, "found": r.found, "detail": r.detail} for r in rows]
    result["shipped_run"] = step(child, env)
    manifest = tritonserve.read_manifest()
    result["compiled_again"] = tritonserve.compiled_since(CACHE, manifest)
    return result


def main() -> int:
    if sys.argv[1:] == ["kernels"]:
        print(json.dumps(kernels()))
        return 0
    result = run()
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "triton-roundtrip.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
