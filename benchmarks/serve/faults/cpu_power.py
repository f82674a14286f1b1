"""The serve smoke's comparison rule against a real model's answers, on a CPU: the tiny profile's generated
checkpoint (the 3.48 GiB one SGLang serves) run by transformers' own Qwen3-MoE, greedy, the smoke's 8
prompts and 32 tokens with top-5 logprobs, each variant compared with an untouched run by
epstack.smoke.serving.checks.without_deepep (the deepep-v2-vs-none row and its control):

  rounding   each expert layer's output moved by up to one bf16 step (2^-8 of itself, uniform): what
             another kernel's rounding does; the rule must accept it
  zero       the MoE output zeroed (a combine that returns zeros)
  scale      the MoE output times 0.5 (a combine scaled)
  permute    every token routed to the next expert (dispatch's top-k ids permuted)

No SGLang and no DeepEP here: the faults are made in transformers' MoE block where DeepEP's combine and
dispatch would sit. The GPU run (run_gpu.py) does the same with SGLang and DeepEP V2 themselves.

    python -m benchmarks.serve.faults.cpu_power OUT.json [MODEL_CACHE]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from epstack.smoke.serving import checks, generation, tinymodel
from epstack.smoke.serving.checks import PROMPT_LEN, PROMPT_VOCAB, PROMPTS
from epstack.smoke.serving.generation import TOP_N, Generation

TOKENS = 32
VARIANTS = ("rounding", "zero", "scale", "permute")


class Broken:
    """One MoE block's experts call as the variant breaks it."""

    def __init__(self, original: Any, count: int, variant: str) -> None:
        self.original, self.count, self.variant = original, count, variant
        self.noise = torch.Generator().manual_seed(1)

    def __call__(self, hidden: Any, index: Any, weights: Any) -> Any:
        if self.variant == "permute":
            return self.original(hidden, (index + 1) % self.count, weights)
        out = self.original(hidden, index, weights)
        if self.variant == "zero":
            return torch.zeros_like(out)
        if self.variant == "scale":
            return out * 0.5
        step = (torch.rand(out.shape, generator=self.noise) * 2 - 1) * 2**-8
        return (out.float() * (1 + step)).to(out.dtype)


def patch(model: Any, variant: str | None) -> None:
    """Every MoE block's experts call, as the variant breaks it (None: as transformers wrote it)."""
    for layer in model.model.layers:
        experts = layer.mlp.experts
        original = type(experts).forward.__get__(experts)
        experts.forward = original if variant is None else Broken(original, experts.num_experts, variant)


@torch.no_grad()
def greedy(model: Any, prompts: list[list[int]]) -> list[Generation]:
    ids = torch.tensor(prompts)
    past = None
    chosen: list[list[int]] = [[] for _ in prompts]
    logprobs: list[list[float]] = [[] for _ in prompts]
    tops: list[list[dict[int, float]]] = [[] for _ in prompts]
    for _ in range(TOKENS):
        out = model(input_ids=ids, past_key_values=past, use_cache=True, logits_to_keep=1)
        past = out.past_key_values
        scores = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
        top = scores.topk(TOP_N, dim=-1)
        for row in range(len(prompts)):
            token = int(top.indices[row, 0])
            chosen[row].append(token)
            logprobs[row].append(float(scores[row, token]))
            tops[row].append(
                {int(i): float(v) for i, v in zip(top.indices[row], top.values[row], strict=True)}
            )
        ids = top.indices[:, :1]
    return [Generation(output_ids=chosen[r], logprobs=logprobs[r], top=tops[r]) for r in range(len(prompts))]


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    cache = Path(argv[1]) if len(argv) > 1 else Path.home() / ".cache" / "epstack"
    torch.set_num_threads(max(1, torch.get_num_threads()))
    began = time.monotonic()
    prepared = tinymodel.ensure(cache / tinymodel.NAME)
    model = AutoModelForCausalLM.from_pretrained(prepared.path, dtype=torch.bfloat16).eval()
    prompts = [generation.prompt(0, i, PROMPT_LEN, PROMPT_VOCAB) for i in range(PROMPTS)]
    patch(model, None)
    reference = greedy(model, prompts)
    result: dict[str, Any] = {
        "schema": "serve-rule-cpu/1",
        "model": {"path": str(prepared.path), "key": prepared.key, "bytes": prepared.bytes},
        "torch_version": torch.__version__,
        "tolerance": generation.TOLERANCE,
        "variants": {},
    }
    for variant in VARIANTS:
        patch(model, variant)
        rows, kept = checks.without_deepep(greedy(model, prompts), reference)
        result["variants"][variant] = {
            "rows": {
                row.component: {"verdict": row.verdict, "found": row.found, "detail": row.detail}
                for row in rows
            },
            **{k: v for k, v in kept.items() if k not in ("through", "reference")},
        }
        print(
            variant,
            rows[0].verdict,
            rows[0].found,
            "|",
            rows[0].detail,
            "| control",
            rows[1].found,
            flush=True,
        )
    result["seconds"] = round(time.monotonic() - began, 1)
    Path(argv[0]).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
