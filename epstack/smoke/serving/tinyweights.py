"""The tiny model's weights: every tensor of a Qwen3-MoE checkpoint at the config's own init scale, drawn
from a seed, written as safetensors shards by safetensors' own writer.

Why not SGLang's `--load-format dummy`: it fills every weight uniformly in [-1e-3, 1e-3], so the MoE output
sits below bf16's resolution of the residual and a DeepEP combine that returns zeros still gives the same
greedy tokens. Here every matrix is normal with std = `initializer_range` (0.02, as transformers
initialises Qwen3-MoE) and every norm is 1: the MoE layer's output moves the logits, so a broken
dispatch or combine changes them.

The names are those SGLang's Qwen3MoeForCausalLM.load_weights reads (sglang/srt/models/qwen3_moe.py:
q/k/v_proj stacked into qkv_proj, `mlp.experts.{e}.gate_proj|up_proj|down_proj` mapped by
FusedMoE.make_expert_params_mapping, the router `mlp.gate`); a name it does not know is skipped without a
word and leaves that parameter uninitialised, so tests load the files with transformers' own Qwen3-MoE.

Deterministic: each block of BLOCK values has a generator of its own, seeded from (seed, tensor name,
block), and torch draws it on the CPU (normal_ in float32, rounded to bf16): the same seed gives the same
bytes with the same torch on the same kind of CPU, whatever the order or the number of threads the blocks
are drawn in. Shards: the embeddings, norm and lm_head, then one per layer (SGLang reads every
`*.safetensors` the index names).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from epstack.errors import EnvironmentProblem

BLOCK = 1 << 22  # values drawn by one generator
INDEX = "model.safetensors.index.json"  # transformers' SAFE_WEIGHTS_INDEX_NAME, which SGLang's loader reads

Init = Literal["normal", "ones"]


@dataclass(frozen=True, kw_only=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    init: Init  # normal: N(0, initializer_range); ones: a norm's weight

    @property
    def numel(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count


def _layer(config: dict[str, Any], layer: int) -> list[Tensor]:
    hidden, head_dim = config["hidden_size"], config["head_dim"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    prefix = f"model.layers.{layer}"
    tensors = [
        Tensor(name=f"{prefix}.input_layernorm.weight", shape=(hidden,), init="ones"),
        Tensor(name=f"{prefix}.post_attention_layernorm.weight", shape=(hidden,), init="ones"),
        Tensor(name=f"{prefix}.self_attn.q_proj.weight", shape=(heads * head_dim, hidden), init="normal"),
        Tensor(name=f"{prefix}.self_attn.k_proj.weight", shape=(kv_heads * head_dim, hidden), init="normal"),
        Tensor(name=f"{prefix}.self_attn.v_proj.weight", shape=(kv_heads * head_dim, hidden), init="normal"),
        Tensor(name=f"{prefix}.self_attn.o_proj.weight", shape=(hidden, heads * head_dim), init="normal"),
        Tensor(name=f"{prefix}.self_attn.q_norm.weight", shape=(head_dim,), init="ones"),
        Tensor(name=f"{prefix}.self_attn.k_norm.weight", shape=(head_dim,), init="ones"),
    ]
    step = config["decoder_sparse_step"]
    if layer in config.get("mlp_only_layers", []) or (layer + 1) % step:
        inner = config["intermediate_size"]
        return tensors + _mlp(f"{prefix}.mlp", hidden, inner)
    router = Tensor(name=f"{prefix}.mlp.gate.weight", shape=(config["num_experts"], hidden), init="normal")
    tensors.append(router)
    for expert in range(config["num_experts"]):
        tensors += _mlp(f"{prefix}.mlp.experts.{expert}", hidden, config["moe_intermediate_size"])
    return tensors


def _mlp(prefix: str, hidden: int, inner: int) -> list[Tensor]:
    return [
        Tensor(name=f"{prefix}.gate_proj.weight", shape=(inner, hidden), init="normal"),
        Tensor(name=f"{prefix}.up_proj.weight", shape=(inner, hidden), init="normal"),
        Tensor(name=f"{prefix}.down_proj.weight", shape=(hidden, inner), init="normal"),
    ]


def shards(config: dict[str, Any]) -> list[list[Tensor]]:
    """Every tensor of the checkpoint, by shard: the embeddings, final norm and lm_head, then each layer."""
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    outer = [
        Tensor(name="model.embed_tokens.weight", shape=(vocab, hidden), init="normal"),
        Tensor(name="model.norm.weight", shape=(hidden,), init="ones"),
    ]
    if not config.get("tie_word_embeddings", False):
        outer.append(Tensor(name="lm_head.weight", shape=(vocab, hidden), init="normal"))
    return [outer, *(_layer(config, layer) for layer in range(config["num_hidden_layers"]))]


def shard_name(index: int, count: int) -> str:
    return f"model-{index + 1:05d}-of-{count:05d}.safetensors"


def _seed(seed: int, name: str, block: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{name}/{block}".encode()).digest()[:8], "little")


def _blocks(tensors: list[Tensor]) -> Iterator[tuple[Tensor, int]]:
    for tensor in tensors:
        if tensor.init == "normal":
            yield from ((tensor, start) for start in range(0, tensor.numel, BLOCK))


def write(folder: Path, config: dict[str, Any], seed: int) -> dict[str, int]:
    """The shards and their index in `folder` (which exists); returns each file's bytes."""
    try:
        import torch  # noqa: PLC0415 (the serving Python's, as SGLang's; not epstack's own dependency)
        from safetensors.torch import save_file  # noqa: PLC0415
    except ImportError as exc:
        raise EnvironmentProblem(
            f"the tiny model's weights need torch and safetensors ({exc}); fix: run it where SGLang is "
            "installed (the sglang image), or pass --model-path"
        ) from None
    std = float(config["initializer_range"])
    grouped = shards(config)
    weight_map: dict[str, str] = {}
    written: dict[str, int] = {}
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for index, tensors in enumerate(grouped):
            flat = {
                t.name: (torch.ones if t.init == "ones" else torch.empty)(t.numel, dtype=torch.bfloat16)
                for t in tensors
            }

            def fill(block: tuple[Tensor, int], flat: dict[str, Any] = flat) -> None:
                tensor, start = block
                generator = torch.Generator().manual_seed(_seed(seed, tensor.name, start // BLOCK))
                count = min(BLOCK, tensor.numel - start)
                drawn = torch.empty(count, dtype=torch.float32).normal_(0.0, std, generator=generator)
                flat[tensor.name][start : start + count].copy_(drawn)

            list(pool.map(fill, _blocks(tensors)))
            name = shard_name(index, len(grouped))
            save_file({t.name: flat[t.name].view(t.shape) for t in tensors}, folder / name, {"format": "pt"})
            (folder / name).chmod(0o644)  # safetensors writes 0600: the server may run as another user
            weight_map |= dict.fromkeys(flat, name)
            written[name] = (folder / name).stat().st_size
            del flat
    total = sum(t.numel for tensors in grouped for t in tensors) * 2  # bf16
    index_text = json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1) + "\n"
    (folder / INDEX).write_text(index_text)
    written[INDEX] = len(index_text.encode())
    return written
