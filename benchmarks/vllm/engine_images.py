"""What the sglang and vllm images of one target share, from the built images' own layers.

    python -m benchmarks.vllm.engine_images BUILD_REPORT

BUILD_REPORT is what `epstack build --engine all --report FILE` wrote (both engines' images of one
target). For each engine's image: its size and layers (diff IDs, bytes, the step that made them, read
with benchmarks/images.py's `layers`); then the layers both hold and the bytes a node holding one image
pulls for the other (the layers it lacks), both ways. Sizes are uncompressed, as `docker history`
reports them. Writes benchmarks/vllm/results/engine-images.json.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.images import layers
from epstack.image.build import BUILD_REPORT
from epstack.image.engine import DockerEngine

RESULTS = Path(__file__).resolve().parent / "results" / "engine-images.json"


def _bytes(entries: list[dict[str, object]]) -> int:
    return sum(int(str(entry["bytes"])) for entry in entries)


def compare(report_path: Path) -> dict[str, object]:
    report = BUILD_REPORT.read(report_path)
    engine = DockerEngine.find()
    built = {image.layer: image for image in report.built}
    found = {name: layers(engine, built[name].ref) for name in ("deepep", "sglang", "vllm")}
    ids = {name: {str(layer["diff_id"]) for layer in entries} for name, entries in found.items()}
    shared = [layer for layer in found["vllm"] if layer["diff_id"] in ids["sglang"]]

    def pulled(have: str, want: str) -> list[dict[str, object]]:
        return [layer for layer in found[want] if layer["diff_id"] not in ids[have]]

    return {
        "command": "python -m benchmarks.vllm.engine_images " + " ".join(sys.argv[1:]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "target": report.target,
        "standin": report.standin is not None,
        "images": {
            name: {"ref": built[name].ref, "bytes": built[name].size, "layers": len(found[name])}
            for name in ("deepep", "sglang", "vllm")
        },
        "shared_layers": len(shared),
        "shared_bytes": _bytes(shared),
        "shared_is_the_deepep_image": ids["deepep"] == {str(layer["diff_id"]) for layer in shared},
        "node_with_sglang_pulls_for_vllm": {
            "bytes": _bytes(pulled("sglang", "vllm")),
            "layers": pulled("sglang", "vllm"),
        },
        "node_with_vllm_pulls_for_sglang": {
            "bytes": _bytes(pulled("vllm", "sglang")),
            "layers": pulled("vllm", "sglang"),
        },
        "build_s": {image.stage: round(image.seconds, 1) for image in report.built},
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    results = compare(Path(argv[0]))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    summary = {key: value for key, value in results.items() if not key.startswith("node_")}
    print(json.dumps(summary, indent=2))
    for key in ("node_with_sglang_pulls_for_vllm", "node_with_vllm_pulls_for_sglang"):
        print(key, results[key]["bytes"])  # type: ignore[index]
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
