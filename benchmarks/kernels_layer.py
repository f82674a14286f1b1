"""Benchmark: what shipping the JIT caches costs and saves (issue 17), in one file of figures.

    python benchmarks/kernels_layer.py --image SGLANG_IMAGE --export deep_ep-kernels.tar.gz

1. Here, with Docker: `epstack jit layer` over the built sglang image with an export made on a GPU;
   the bytes the layer adds (image sizes before and after, `docker image inspect`) and the guard's
   row for the kernels from the layer's own build-time report; in a container of the new image, the
   entrypoint's copies into $EP_JIT_CACHE_DIR, with a writable root and with `--read-only --tmpfs /tmp`.
2. From the committed H200 run (benchmarks/elastic/results/kernels-*.json, run_h200.sh
   kernels-export kernels-shipped): each preset's first-call seconds with an empty cache and with the
   shipped kernels, and the nvcc runs its wrapper logged.
3. FlashInfer's modules, which the sglang image's build compiles and ships itself: their bytes and key
   (the image's manifest), the build's guard row, and from the committed H200 run (run_h200.sh
   flashinfer-shipped) the sampler's first call with them and from an empty workspace.
Writes benchmarks/results/kernels_layer.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from epstack import imagepaths
from epstack.image.kernels import kernels_tag
from epstack.layers import TOP

REPO = Path(__file__).resolve().parent.parent
GUARD_LAYER = TOP.name  # the kernels layer guards and records as the image it is built on
GPU_RESULTS = REPO / "benchmarks" / "elastic" / "results"
RESULTS = REPO / "benchmarks" / "results" / "kernels_layer.json"
PRESETS = ("qwen3", "deepseek-v3")
LINKS = 'ls "$EP_JIT_CACHE_DIR/cache" | wc -l; echo "$EP_JIT_CACHE_DIR"'


def docker(*args: str) -> str:
    return subprocess.run(["/usr/bin/docker", *args], capture_output=True, text=True, check=True).stdout


def image_size(ref: str) -> int:
    return int(docker("image", "inspect", "--format", "{{.Size}}", ref).strip())


def copied(image: str, *flags: str) -> dict[str, object]:
    """The entrypoint's view: kernels copied into which cache (EPSTACK_GUARD=off: the guard is timed
    by benchmarks/guard_start.py)."""
    out = docker("run", "--rm", *flags, "-e", "EPSTACK_GUARD=off", image, "bash", "-c", LINKS)
    count, cache = out.split()
    return {"flags": " ".join(flags), "kernels_copied": int(count), "cache_dir": cache}


def layer_figures(image: str, export: Path) -> dict[str, Any]:
    tag = kernels_tag(image, hashlib.sha256(export.read_bytes()).hexdigest())
    layer = ["jit", "layer", "--image", image, "--export", str(export), "--tag", tag]
    subprocess.run([sys.executable, "-m", "epstack", *layer], capture_output=True, check=True)
    report_file = f"{imagepaths.REPORTS}/{GUARD_LAYER}.json"
    report = json.loads(docker("run", "--rm", "--entrypoint", "cat", tag, report_file))
    row = next(c for c in report["checks"] if c["component"] == "JIT cache DeepEP")
    before, after = image_size(image), image_size(tag)
    return {
        "image": image,
        "kernels_image": tag,
        "export_bytes": export.stat().st_size,
        "image_bytes_before": before,
        "image_bytes_after": after,
        "bytes_added": after - before,
        "guard_row": {key: row[key] for key in ("expected", "found", "verdict")},
        "entrypoint": [copied(tag), copied(tag, "--read-only", "--tmpfs", "/tmp")],
    }


def nvcc_compiles(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if "--version" not in line.split())


def gpu_figures() -> dict[str, object]:
    figures: dict[str, object] = {}
    for preset in PRESETS:
        for cache in ("empty", "shipped"):
            name = f"kernels-{cache}-{preset}"
            report = json.loads((GPU_RESULTS / f"{name}.json").read_text())
            jit = report["ranks"][0]["jit"]
            log = GPU_RESULTS / f"{name}.nvcc.log"
            figures[name] = {
                "verdict": report["verdict"],
                "first_call_s": {k: round(v, 4) for k, v in jit.items() if k.startswith("first_")},
                "nvcc_compiles": nvcc_compiles(log) if log.exists() else None,
            }
    return figures


def flashinfer_figures(image: str) -> dict[str, Any]:
    manifest = json.loads(
        docker("run", "--rm", "--entrypoint", "cat", image, f"{imagepaths.JIT}/flashinfer.json")
    )
    report = json.loads(
        docker("run", "--rm", "--entrypoint", "cat", image, f"{imagepaths.REPORTS}/sglang.json")
    )
    row = next(c for c in report["checks"] if c["component"] == "JIT cache FlashInfer")
    h200 = {}
    for cache in ("shipped", "empty"):
        run = json.loads((GPU_RESULTS / f"flashinfer-{cache}.json").read_text())
        h200[cache] = {
            "first_call_s": run["first_call_s"],
            "nvcc_compiles": nvcc_compiles(GPU_RESULTS / f"flashinfer-{cache}.nvcc.log"),
            "ninja_log_unchanged": run["ninja_log_unchanged"],
        }
    return {
        "modules": manifest["modules"],
        "key": manifest["key"],
        "files": len(manifest["files"]),
        "bytes": sum(f["bytes"] for f in manifest["files"]),
        "guard_row": {key: row[key] for key in ("expected", "found", "verdict")},
        "h200": h200,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True, help="a built sglang image")
    parser.add_argument("--export", type=Path, required=True, help="an `--export-jit-cache` file")
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    layer, flashinfer = layer_figures(args.image, args.export), flashinfer_figures(args.image)
    result = {
        "layer": layer,
        "h200": gpu_figures(),
        "flashinfer": flashinfer,
        "cache_bytes_added": layer["bytes_added"] + flashinfer["bytes"],
    }
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
