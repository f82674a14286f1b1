"""The first call of FlashInfer's sampler in a new process, as SGLang's first request makes it: the
module loaded (or compiled) by FlashInfer's own build_and_load, then sampling on the GPU; timed, with
the ninja log of the module's folder before and after (a compile appends to it).

Usage: python -m benchmarks.elastic.flashinfer_first_call --json OUT   (FLASHINFER_WORKSPACE_BASE set)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from flashinfer.jit.sampling import gen_sampling_module
from flashinfer.sampling import sampling_from_probs


def _log(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    spec = gen_sampling_module()
    ninja_log = spec.build_dir / ".ninja_log"
    before = _log(ninja_log)
    probs = torch.softmax(torch.randn(8, 32000, device="cuda"), dim=-1)
    torch.cuda.synchronize()
    times = []
    for _ in range(2):
        start = time.perf_counter()
        tokens = sampling_from_probs(probs)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    result = {
        "module": spec.name,
        "library": str(spec.jit_library_path),
        "device": torch.cuda.get_device_name(),
        "first_call_s": round(times[0], 4),
        "second_call_s": round(times[1], 4),
        "ninja_log_unchanged": _log(ninja_log) == before and bool(before),
        "tokens_in_range": bool(((tokens >= 0) & (tokens < 32000)).all()),
    }
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
