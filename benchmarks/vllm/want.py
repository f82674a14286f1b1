"""The wheels a GPU host needs for vLLM beyond the SGLang ferry (benchmarks/serve/ferry-pack.sh): every
distribution of locks/vllm.txt that locks/sglang.txt does not hold at the same version, less those vLLM
imports only for features the tiny profile does not touch, one `name==version` a line.

    python -m benchmarks.vllm.want > .ferry-vllm/want.txt

The SGLang ferry brings the pinned torch 2.14.1, triton, NCCL, DeepEP and what SGLang shares with vLLM;
this list is the rest (vllm itself, its FlashInfer, xgrammar, transformers, torchvision 0.29.0, ...).
"""

from __future__ import annotations

from pathlib import Path

from epstack.python.lockfile import read_lock

LOCKS = Path(__file__).resolve().parents[2] / "locks"
# Imported by vLLM only inside the features that need them (no module-level import in vllm 0.33.0):
# video decoding, OpenCV's image ops, MLA kernels, two weight loaders.
LAZY = {
    "opencv-python-headless": "cv2: video and image processing of multimodal models",
    "pynvvideocodec": "video decoding",
    "tokenspeed-mla": "MLA attention kernels (DeepSeek-style models)",
    "tokenspeed-triton": "tokenspeed-mla's Triton",
    "instanttensor": "--load-format instanttensor",
    "fastsafetensors": "--load-format fastsafetensors",
}


def wanted() -> list[str]:
    vllm, sglang = read_lock(LOCKS, "vllm"), read_lock(LOCKS, "sglang")
    assert vllm is not None and sglang is not None, "epstack pins lock writes both"
    shared = {p.pin for p in sglang.resolution.packages}
    return [p.pin for p in vllm.resolution.packages if p.pin not in shared and p.name not in LAZY]


if __name__ == "__main__":
    print("\n".join(wanted()))
