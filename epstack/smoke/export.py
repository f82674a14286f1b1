"""`smoke elastic --export-jit-cache FILE` and `jit export`: after a passing run, the kernels a JIT
compiled (DeepEP's in $EP_JIT_CACHE_DIR, epstack.jit.deepep; DeepGEMM's in SGLang's DeepGEMM cache,
epstack.jit.deepgemm), packed with the key they were compiled under, for a layer over the image (`epstack
jit layer`). The key's device half (arch, SM count) is read in the ranks' Python, in a child process,
as the preflight is: the supervisor never touches the GPU."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from epstack.cmd import run
from epstack.errors import EnvironmentProblem
from epstack.jit import deepep, deepgemm
from epstack.jit.shipped import sha256_hex
from epstack.output import write_file

TIMEOUT_S = 300.0
# How the supervisor asks for the device; the CPU tests point it at a stub.
DEVICE_PROBE: tuple[str, ...] = (sys.executable, "-m", "epstack.smoke.export")


def cache_dir(env: Mapping[str, str]) -> Path:
    """DeepEP's cache folder: $EP_JIT_CACHE_DIR, else ~/.deep_ep (csrc/jit/compiler.hpp)."""
    return Path(env.get("EP_JIT_CACHE_DIR") or Path(env.get("HOME", "~")).expanduser() / ".deep_ep")


def device_here() -> dict[str, Any]:
    """In the ranks' Python: GPU 0's compute capability, name and SM count."""
    import torch  # noqa: PLC0415

    props = torch.cuda.get_device_properties(0)
    return {
        "arch": f"{props.major}.{props.minor}",
        "device": props.name,
        "sm_count": props.multi_processor_count,
    }


def _pack(toolchain: str, env: Mapping[str, str], device: dict[str, Any]) -> tuple[bytes, Any]:
    if toolchain == "deepgemm":
        return deepgemm.pack(deepgemm.cache_dir(env), replace(deepgemm.image_key(env), **device))
    return deepep.pack(cache_dir(env), replace(deepep.image_key(env), **device))


TOOLCHAINS = ("deepep", "deepgemm")  # what `jit export --toolchain` names


def export(out: Path, env: Mapping[str, str], toolchain: str = "deepep") -> dict[str, Any]:
    """Write the export of `toolchain`'s cache and <out>.sha256; what the report says of it."""
    result = run(*DEVICE_PROBE, echo=False, timeout=TIMEOUT_S)
    try:
        device = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        detail = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
        raise EnvironmentProblem(f"could not read the GPU's properties for the export ({detail})") from None
    data, manifest = _pack(toolchain, env, device)
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
