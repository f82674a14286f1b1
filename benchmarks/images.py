"""Benchmark: the images of one target, built for real, and what an SGLang bump costs.

    python benchmarks/images.py [--target hopper-ib] [--sources DIR] [--cold]

In one run, on this machine's engine (on the CUDA stand-in where nvidia/cuda cannot be pulled):
1. build the target (`--cold`: after `docker builder prune -af`, so every step runs and every
   download happens; the stand-in's OS image is kept): seconds per layer, as `epstack build` times them;
2. each image's size and its largest layers (`docker history`);
3. an SGLang bump: what moves with an SGLang release is the SGLang family (sglang, its kernels,
   flashinfer), installed last in a layer of its own. No other SGLang release can be locked today
   (0.5.20-0.5.22 need cuda-tile 1.6.0rc5, which has no wheels), so the bump is a change confined to
   that step: the render's sglang-family.txt gains a line, and the target is built again. Measured:
   the rebuild's seconds against the full build's, and the bytes a node must pull for the new sglang
   image given the old one: the layers (RootFS diff IDs) the old image lacks, against its size.
Sizes are uncompressed (what `docker history` reports); a registry's gzip layers are smaller, about
alike across layers. Writes benchmarks/results/images.json; `--against FILE` (an earlier images.json)
adds each image's size there and the bytes saved. Also writes the top image's CUDA_HOME file list,
benchmarks/elastic/results/image-cuda-home.txt, which the GPU run makes its CUDA_HOME from.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from epstack.image.build import BuildReport, build_target
from epstack.image.engine import DockerEngine
from epstack.image.render import plan_render, source_date, source_revision, write_plan
from epstack.pins.load import load_pins

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "images.json"
CUDA_HOME_LIST = REPO / "benchmarks" / "elastic" / "results" / "image-cuda-home.txt"


def docker(engine: DockerEngine, *args: str) -> str:
    return subprocess.run([engine.cli, *args], capture_output=True, text=True, check=True).stdout


def layers(engine: DockerEngine, ref: str) -> list[dict[str, object]]:
    """The image's layers, bottom-up: diff ID, size in bytes, and the step that made it."""
    diff_ids = json.loads(docker(engine, "image", "inspect", "--format", "{{json .RootFS.Layers}}", ref))
    records = docker(engine, "history", "--human=false", "--no-trunc", "--format", "{{json .}}", ref)
    history = [json.loads(line) for line in records.splitlines()][::-1]
    # Steps that changed no file (ENV, LABEL, ...) made no layer; the rest pair with the diff IDs in order.
    made = [
        (int(h["Size"]), h["CreatedBy"])
        for h in history
        if int(h["Size"]) > 0 or "buildkit" in h["CreatedBy"]
    ]
    made = [entry for entry in made if not entry[1].startswith(("ENV ", "LABEL ", "ENTRYPOINT ", "ARG "))]
    made = made[-len(diff_ids) :]
    return [
        {"diff_id": diff_id, "bytes": size, "step": " ".join(step.split())[:160]}
        for diff_id, (size, step) in zip(diff_ids, made, strict=True)
    ]


def build(
    pins_path: Path, target: str, sources: Path | None, out: Path, engine: DockerEngine
) -> tuple[BuildReport, float]:
    pins = load_pins(pins_path)
    plan = plan_render(pins, created=source_date(), revision=source_revision(), sources=sources)
    write_plan(plan, out)
    start = time.monotonic()
    report = build_target(
        pins=pins, plan=plan, context=out, target=target, engine=engine, console=Console(stderr=True)
    )
    return report, time.monotonic() - start


def rebuild(
    pins_path: Path, target: str, sources: Path | None, context: Path, engine: DockerEngine
) -> tuple[BuildReport, float]:
    """The target again from the same context (as edited since): the cache serves what did not change."""
    pins = load_pins(pins_path)
    plan = plan_render(pins, created=source_date(), revision=source_revision(), sources=sources)
    start = time.monotonic()
    report = build_target(
        pins=pins, plan=plan, context=context, target=target, engine=engine, console=Console(stderr=True)
    )
    return report, time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="hopper-ib")
    parser.add_argument("--sources", type=Path)
    parser.add_argument("--cold", action="store_true", help="prune BuildKit's cache first")
    parser.add_argument("--against", type=Path, help="an earlier images.json to compare sizes with")
    args = parser.parse_args()
    earlier = json.loads(args.against.read_text()) if args.against else None
    engine = DockerEngine.find()
    if args.cold:
        docker(engine, "builder", "prune", "-af")
    with tempfile.TemporaryDirectory(prefix="epstack-bench-") as tmp:
        context = Path(tmp) / "render"
        first, first_s = build(REPO / "pins.env", args.target, args.sources, context, engine)
        # Read now: the rebuild moves the tag to the new image.
        before = {image.stage: layers(engine, image.ref) for image in first.built}
        family = context / "targets" / args.target / "locks" / "sglang-family.txt"
        family.write_text(family.read_text() + "# the SGLang family moved (benchmarks/images.py)\n")
        bumped, bumped_s = rebuild(REPO / "pins.env", args.target, args.sources, context, engine)
    images: dict[str, dict[str, object]] = {}
    for image in first.built:
        image_layers = before[image.stage]
        images[image.stage] = {
            "ref": image.ref,
            "build_s": round(image.seconds, 1),
            "bytes": image.size,
            "largest_layers": sorted(image_layers, key=lambda layer: -int(str(layer["bytes"])))[:5],
        }
        if earlier and image.stage in earlier["images"]:
            was = int(earlier["images"][image.stage]["bytes"])
            images[image.stage]["earlier_bytes"] = was
            images[image.stage]["saved_bytes"] = was - image.size
    top = first.built[-1]
    home = load_pins(REPO / "pins.env").cuda_home
    CUDA_HOME_LIST.write_text(
        docker(engine, "run", "--rm", "--entrypoint", "find", top.ref, home, "-printf", "%y %P %l\n")
    )
    results: dict[str, object] = {
        "command": "python benchmarks/images.py " + " ".join(sys.argv[1:]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": "2 cores, 24 GiB, this project's CI-like machine; Docker 20.10 BuildKit",
        "target": args.target,
        "standin": first.standin is not None,
        "full_build_s": round(first_s, 1),
        "standin_and_overhead_s": round(first_s - sum(image.seconds for image in first.built), 1),
        "images": images,
        "not_built": first.not_built,
    }
    if earlier:
        results["earlier"] = {key: earlier[key] for key in ("command", "date", "full_build_s")}
    old_top, new_top = first.built[-1], bumped.built[-1]
    if old_top.stage == "sglang" and new_top.stage == "sglang":
        have = {layer["diff_id"] for layer in before[old_top.stage]}
        new_layers = layers(engine, new_top.ref)
        pulled = sum(int(str(layer["bytes"])) for layer in new_layers if layer["diff_id"] not in have)
        rebuilt = [image.stage for image in bumped.built if image.seconds > 5]
        results["sglang_bump"] = {
            "change": "one line added to the render's sglang-family.txt (the SGLang family's install step)",
            "rebuild_s": round(bumped_s, 1),
            "rebuild_over_full_build": round(bumped_s / first_s, 3),
            "stages_taking_over_5_s": rebuilt,
            "pull_bytes": pulled,
            "image_bytes": new_top.size,
            "pull_over_image": round(pulled / new_top.size, 3),
            "new_layers": [layer for layer in new_layers if layer["diff_id"] not in have],
        }
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps({k: v for k, v in results.items() if k != "images"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
