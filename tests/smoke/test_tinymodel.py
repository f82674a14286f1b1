"""The tiny profile's generated model folder, on a reduced config (the real one is 3.48 GiB): the same
seed gives the same bytes, the names are the ones a Qwen3-MoE checkpoint has (transformers' own
Qwen3MoeForCausalLM loads every tensor and misses none), the init scale, and the cache: reused when its
stamp matches, replaced when it names another key, a partial or foreign folder never used."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from epstack.commands.main import main as epstack_main
from epstack.errors import BAD_INPUT, OK, BadInput
from epstack.smoke.config import PRESETS
from epstack.smoke.serving import tinymodel, tinyweights

SMALL = {
    "hidden_size": 64,
    "intermediate_size": 96,
    "moe_intermediate_size": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 300,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def small_config(**changes: Any) -> str:
    config = json.loads(tinymodel.config_text()) | SMALL | changes
    return json.dumps(config, indent=1) + "\n"


def digests(folder: Path) -> dict[str, str]:
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.iterdir())
        if path.name != tinymodel.STAMP
    }


def test_the_same_seed_gives_the_same_bytes(tmp_path: Path) -> None:
    first = tinymodel.ensure(tmp_path / "a" / "tiny", seed=7, config=small_config())
    second = tinymodel.ensure(tmp_path / "b" / "tiny", seed=7, config=small_config())
    other = tinymodel.ensure(tmp_path / "c" / "tiny", seed=8, config=small_config())
    assert not first.reused and first.key == second.key != other.key
    assert digests(first.path) == digests(second.path)
    shards = [name for name in digests(first.path) if name.endswith(".safetensors")]
    assert shards == [tinyweights.shard_name(i, 3) for i in range(3)]  # outer tensors, then each layer
    for name, digest in digests(other.path).items():  # another seed: other weights, same everything else
        assert (digest == digests(first.path)[name]) == (name not in shards), name


def test_the_blocks_do_not_depend_on_the_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One worker draws the bytes many do; the block size is part of what the bytes follow."""
    many = tinymodel.ensure(tmp_path / "a" / "tiny", config=small_config())
    monkeypatch.setattr(tinyweights, "BLOCK", 1000)
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    few = tinymodel.ensure(tmp_path / "b" / "tiny", config=small_config())
    shard = tinyweights.shard_name(1, 3)
    assert digests(many.path)[shard] != digests(few.path)[shard]  # BLOCK is part of what the bytes follow
    monkeypatch.setattr(tinyweights, "BLOCK", 1 << 22)
    again = tinymodel.ensure(tmp_path / "c" / "tiny", config=small_config())
    assert digests(again.path) == digests(many.path)


def test_transformers_loads_every_tensor_at_the_init_scale(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    folder = tinymodel.ensure(tmp_path / "tiny", config=small_config()).path
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        folder, output_loading_info=True, dtype=torch.bfloat16
    )
    assert type(model).__name__ == "Qwen3MoeForCausalLM"
    assert info == {
        "missing_keys": set(),
        "unexpected_keys": set(),
        "mismatched_keys": set(),
        "error_msgs": [],
    }
    state = model.state_dict()
    for name, tensor in state.items():
        values = tensor.float()
        if name.endswith("norm.weight"):
            assert bool((values == 1).all()), name
        else:
            assert abs(values.std().item() - 0.02) < 0.002 and abs(values.mean().item()) < 0.002, name
    # the router and the experts are real numbers: a forward pass gives finite, prompt-dependent logits
    logits = model(torch.tensor([[3, 4, 5], [6, 7, 8]])).logits.float()
    assert bool(torch.isfinite(logits).all()) and not torch.equal(logits[0, -1], logits[1, -1])
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    assert tokenizer.decode([5, 299]) == "t5 t299" and tokenizer("t7 t8")["input_ids"] == [7, 8]


def test_the_shipped_config_keeps_qwen3_30b_a3bs_moe_shapes() -> None:
    config = json.loads(tinymodel.config_text())
    shape = PRESETS["qwen3-30b-a3b"]
    assert (config["hidden_size"], config["num_experts"], config["num_experts_per_tok"]) == (
        shape.hidden,
        shape.num_experts,
        shape.num_topk,
    )
    assert config["moe_intermediate_size"] == 768 and config["initializer_range"] == 0.02
    total = sum(t.numel for shard in tinyweights.shards(config) for t in shard) * 2
    assert total == 3_737_146_368  # bf16 bytes: 3.48 GiB (the shards add their headers)
    experts = [t for t in tinyweights.shards(config)[1] if ".experts." in t.name]
    assert len(experts) == 128 * 3 and experts[0].shape == (768, 2048)


def test_a_folder_is_written_once_then_reused(tmp_path: Path) -> None:
    folder = tmp_path / "tiny"
    written = tinymodel.ensure(folder, config=small_config())
    stamp = json.loads((folder / tinymodel.STAMP).read_text())
    assert stamp["key"] == written.key and stamp["files"] == written.files and not written.reused
    mtimes = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    again = tinymodel.ensure(folder, config=small_config())
    assert again.reused and again.files == written.files and again.seconds == 0.0
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == mtimes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]  # no staging left


def test_another_key_or_a_damaged_file_is_written_again(tmp_path: Path) -> None:
    folder = tmp_path / "tiny"
    first = tinymodel.ensure(folder, seed=1, config=small_config())
    other = tinymodel.ensure(folder, seed=2, config=small_config())
    assert not other.reused and other.key != first.key
    assert json.loads((folder / tinymodel.STAMP).read_text())["seed"] == 2
    shard = folder / tinyweights.shard_name(2, 3)
    shard.write_bytes(shard.read_bytes()[:100])  # a truncated shard: not that folder any more
    repaired = tinymodel.ensure(folder, seed=2, config=small_config())
    assert not repaired.reused and shard.stat().st_size == other.files[shard.name]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]


def test_a_killed_write_is_never_used_and_is_cleaned_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "tiny"
    left = tmp_path / f".tiny{tinymodel._STAGING}123"  # what a killed write leaves
    left.mkdir()
    (left / "model-00001-of-00003.safetensors").write_bytes(b"half")

    def dies(*args: object) -> dict[str, int]:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tinyweights, "write", dies)
    with pytest.raises(Exception, match="No space left on device"):
        tinymodel.ensure(folder, config=small_config())
    assert list(tmp_path.iterdir()) == []  # neither the folder nor any staging
    monkeypatch.undo()
    assert not tinymodel.ensure(folder, config=small_config()).reused


def test_a_folder_epstack_did_not_write_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    with pytest.raises(BadInput, match="not a model folder epstack wrote"):
        tinymodel.ensure(folder, config=small_config())
    assert [p.name for p in folder.iterdir()] == ["config.json"]


def test_the_command_writes_and_then_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "small.json"
    config.write_text(small_config())
    monkeypatch.setattr(tinymodel, "CONFIG", config)
    out = tmp_path / "models" / "tiny-qwen3-moe"
    assert epstack_main(["smoke", "tiny-model", "--out-dir", str(out), "--seed", "3"]) == OK
    assert "key " + tinymodel.key(small_config(), 3) in capsys.readouterr().err
    assert epstack_main(["smoke", "tiny-model", "--out-dir", str(out), "--seed", "3"]) == OK
    assert "found written" in capsys.readouterr().err
    assert epstack_main(["smoke", "tiny-model", "--out-dir", str(config)]) == BAD_INPUT
