"""The JIT warm-up's test_ep copy runs whole mode groups per shard and every mode exactly once."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from benchmarks.elastic.warm_jit_cache import MODES_PER_GROUP, sharded_copy

# The shape of DeepEP's tests/elastic/test_ep.py that the copy edits: `import os` and a generator
# of 144 modes in groups of 6 that share their leading (kernel-selecting) fields.
TEST_EP = """import os


def enumerate_ep_modes():
    for group in range(24):
        for variant in range(6):
            yield (group, variant)
"""


def _modes(script: Path, shard: str, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    monkeypatch.setenv("EPSTACK_MODE_SHARD", shard)
    return list(runpy.run_path(str(script))["enumerate_ep_modes"]())


def test_shards_cover_every_mode_once_in_whole_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "test_ep.py"
    source.write_text(TEST_EP)
    script = sharded_copy(source, tmp_path / "shard.py")
    seen: list[tuple[int, int]] = []
    for shard in range(8):
        modes = _modes(script, f"{shard}/8", monkeypatch)
        groups = {group for group, _ in modes}
        assert len(modes) == len(groups) * MODES_PER_GROUP == 18
        seen += modes
    assert sorted(seen) == [(g, v) for g in range(24) for v in range(6)]


def test_a_test_ep_without_the_generator_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "test_ep.py"
    source.write_text(TEST_EP.replace("enumerate_ep_modes", "modes"))
    with pytest.raises(SystemExit, match="no single `def enumerate_ep_modes"):
        sharded_copy(source, tmp_path / "shard.py")
    assert not (tmp_path / "shard.py").exists()
