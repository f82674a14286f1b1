"""The tiny profile's model folder: Qwen3-30B-A3B's MoE layer in 2 layers (tiny-qwen3-moe.json), its
weights drawn from a seed at the config's init scale (epstack.smoke.serving.tinyweights), and a word-level
tokenizer with one word per token id ("t0" .. "t151935").

The tokenizer is generated, not fetched: SGLang with --skip-tokenizer-init streams no text, and
sglang.benchmark.serving times the first token and each later one by the streamed text, so the server
gets a tokenizer whose every id decodes to a non-empty word. Requests still go by token ids.

Written once and reused: the folder's STAMP names its key (the config's bytes, the seed and WRITER), and
the files with their sizes. A folder whose stamp matches is used as it is; one with another key (an older
writer, another seed) is replaced; a folder without a stamp is not epstack's and is refused. A write goes
into a staging folder beside it, under a lock on the parent (a second writer waits, then finds it done),
and is renamed into place with its stamp written last: a partial write is never used, and what a killed
write left is removed by the next one.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epstack.errors import BadInput, EnvironmentProblem
from epstack.output import cannot_write, parent_lock
from epstack.smoke.serving import tinyweights

CONFIG = Path(__file__).with_name("tiny-qwen3-moe.json")
NAME = "tiny-qwen3-moe"  # the folder's name, in a cache or in a cluster job's model volume
WRITER = 1  # raise when what write() puts in the folder changes: every cached folder is written again
STAMP = "epstack-tiny-model.json"
SEED = 0  # the weights' seed unless told otherwise
_STAGING = ".epstack-writing-"


@dataclass(frozen=True, kw_only=True)
class Prepared:
    path: Path
    key: str
    reused: bool
    files: dict[str, int]  # name -> bytes
    seconds: float  # the write's (0 when reused)

    @property
    def bytes(self) -> int:
        return sum(self.files.values())


def config_text() -> str:
    return CONFIG.read_text()


def vocab_size() -> int:
    size: int = json.loads(config_text())["vocab_size"]
    return size


def key(config: str, seed: int) -> str:
    """What the folder's bytes follow from: the config, the seed and this writer."""
    return hashlib.sha256(f"{WRITER}\n{seed}\n{config}".encode()).hexdigest()[:16]


def _stamp(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _complete(folder: Path, wanted: str) -> dict[str, int] | None:
    """The files of a finished folder of key `wanted` (each there, at its size); None otherwise."""
    stamp = _stamp(folder)
    if stamp is None or stamp.get("key") != wanted or not isinstance(stamp.get("files"), dict):
        return None
    files: dict[str, int] = stamp["files"]
    for name, size in files.items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != size:
            return None
    return files


def write_tokenizer(folder: Path, vocab: int) -> None:
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
    words = {f"t{i}": i for i in range(vocab)}
    tokenizer = Tokenizer(WordLevel(words, unk_token="t0"))
    tokenizer.pre_tokenizer = WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="t0").save_pretrained(folder)


def _write(staging: Path, config: str, seed: int) -> dict[str, int]:
    (staging / "config.json").write_text(config)
    parsed = json.loads(config)
    write_tokenizer(staging, parsed["vocab_size"])
    files = tinyweights.write(staging, parsed, seed)
    for path in staging.iterdir():
        files.setdefault(path.name, path.stat().st_size)
    return dict(sorted(files.items()))


def ensure(folder: Path, *, seed: int = SEED, config: str | None = None) -> Prepared:
    """The model folder at `folder`: reused when its stamp matches, else written (see the module)."""
    config = config_text() if config is None else config
    wanted = key(config, seed)
    if (files := _complete(folder, wanted)) is not None:
        return Prepared(path=folder, key=wanted, reused=True, files=files, seconds=0.0)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with parent_lock(folder.parent):
            if (files := _complete(folder, wanted)) is not None:  # another writer finished meanwhile
                return Prepared(path=folder, key=wanted, reused=True, files=files, seconds=0.0)
            if folder.exists() and _stamp(folder) is None:
                raise BadInput(
                    f"{folder} exists and is not a model folder epstack wrote (no {STAMP}); fix: move it "
                    "away, or name another folder"
                )
            for stale in folder.parent.glob(f".{folder.name}{_STAGING}*"):  # a killed write's
                shutil.rmtree(stale)
            staging = folder.with_name(f".{folder.name}{_STAGING}{time.time_ns()}")
            staging.mkdir()
            began = time.monotonic()
            try:
                files = _write(staging, config, seed)
                seconds = round(time.monotonic() - began, 1)
                stamp = {"schema": "tiny-model/1", "key": wanted, "seed": seed, "writer": WRITER}
                stamp["files"] = files
                (staging / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
                if folder.exists():  # another key's: set aside, then removed
                    folder.rename(staging.with_name(staging.name + "-old"))
                staging.rename(folder)
            finally:
                for leftover in folder.parent.glob(f"{staging.name}*"):
                    shutil.rmtree(leftover)
    except OSError as exc:
        raise cannot_write(folder, exc) from None
    return Prepared(path=folder, key=wanted, reused=False, files=files, seconds=seconds)
