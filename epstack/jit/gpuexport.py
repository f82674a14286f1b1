"""`jit export` and `smoke elastic --export-jit-cache FILE`: after a run on a GPU, the kernels a JIT
compiled (epstack.jit.registry: DeepEP's, DeepGEMM's, SGLang's own, Triton's), packed with the key they
were compiled under, for a layer over the image (`epstack jit layer`). The key's device half (arch, SM count)
is read in the application's Python, in a child process, as the smoke's preflight is: the caller never
touches the GPU."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from epstack.cmd import run
from epstack.errors import EnvironmentProblem
from epstack.jit.registry import EXPORTED
from epstack.jit.shipped import sha256_hex
from epstack.output import write_file

TIMEOUT_S = 300.0
# How the caller asks for the device; the CPU tests point it at a stub.
DEVICE_PROBE: tuple[str, ...] = (sys.executable, "-m", "epstack.jit.gpuexport")


def device_here() -> dict[str, Any]:
    """In the application's Python: GPU 0's compute capability, name and SM count."""
    import torch  # noqa: PLC0415

    props = torch.cuda.get_device_properties(0)
    return {
        "arch": f"{props.major}.{props.minor}",
        "device": props.name,
        "sm_count": props.multi_processor_count,
    }


def export(out: Path, env: Mapping[str, str], toolchain: str = "deepep") -> dict[str, Any]:
    """Write the export of `toolchain`'s cache and <out>.sha256; what the report says of it."""
    result = run(*DEVICE_PROBE, echo=False, timeout=TIMEOUT_S)
    try:
        device = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        detail = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
        raise EnvironmentProblem(f"could not read the GPU's properties for the export ({detail})") from None
    chain = EXPORTED[toolchain]
    data, manifest = chain.pack(chain.cache_dir(env), replace(chain.image_key(env), **device))
    digest = sha256_hex(data)
    write_file(out, data, what="--export-jit-cache")
    write_file(
        out.with_name(f"{out.name}.sha256"), f"{digest}  {out.name}\n", what="--export-jit-cache's digest"
    )
    return {
        "path": str(out),
        "sha256": digest,
        "kernels": manifest.kernels,
        "files": len(manifest.files),
        "bytes": manifest.bytes,
        "archive_bytes": len(data),
        "key": asdict(manifest.key),
    }


if __name__ == "__main__":
    print(json.dumps(device_here()))
