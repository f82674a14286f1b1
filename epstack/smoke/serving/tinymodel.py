"""The tiny profile's model folder: Qwen3-30B-A3B's MoE layer in 2 layers (tiny-qwen3-moe.json), served
with --load-format dummy, and a word-level tokenizer with one word per token id ("t0" .. "t151935").

The tokenizer is generated, not fetched: SGLang with --skip-tokenizer-init streams no text, and
sglang.benchmark.serving times the first token and each later one by the streamed text, so the server
gets a tokenizer whose every id decodes to a non-empty word. Requests still go by token ids.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from epstack.errors import EnvironmentProblem

CONFIG = Path(__file__).with_name("tiny-qwen3-moe.json")


def vocab_size() -> int:
    size: int = json.loads(CONFIG.read_text())["vocab_size"]
    return size


def write_model(folder: Path) -> Path:
    """config.json and the tokenizer files in `folder` (made, or replaced); returns the folder."""
    try:
        from tokenizers import Tokenizer  # noqa: PLC0415 (SGLang's dependency, on the serving host)
        from tokenizers.models import WordLevel  # noqa: PLC0415
        from tokenizers.pre_tokenizers import WhitespaceSplit  # noqa: PLC0415
        from transformers import PreTrainedTokenizerFast  # noqa: PLC0415
    except ImportError as exc:
        raise EnvironmentProblem(
            f"the tiny model's tokenizer needs SGLang's tokenizers and transformers ({exc}); fix: run "
            "`epstack smoke serve` where SGLang is installed (the sglang image), or pass --model-path"
        ) from None
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    shutil.copyfile(CONFIG, partial / "config.json")
    words = {f"t{i}": i for i in range(vocab_size())}
    tokenizer = Tokenizer(WordLevel(words, unk_token="t0"))
    tokenizer.pre_tokenizer = WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="t0").save_pretrained(partial)
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    return folder
