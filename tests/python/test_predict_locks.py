"""`pins predict` on pins whose locks are fresh answers from the locks (uv's cache, offline), not the
index: against a package index on 127.0.0.1 that is stopped before the question is asked."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from epstack.commands.main import main
from tests.conftest import PINS, pins_variant
from tests.python.localindex import build_index, served, use_index


def test_fresh_locks_answer_without_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pins, locks = tmp_path / "pins.env", tmp_path / "locks"
    shutil.copy(PINS, pins)
    with served(build_index(tmp_path / "index")) as url:
        use_index(monkeypatch, url, tmp_path / "uv-cache")
        assert main(["pins", "lock", "--pins", str(pins), "--locks", str(locks)]) == 0
        (tmp_path / "bumped").mkdir()
        bumped = pins_variant(tmp_path / "bumped", SGLANG_VERSION="0.5.24")
        capsys.readouterr()
        assert main(["pins", "predict", "--pins", str(bumped), "--locks", str(locks)]) == 0
        assert "answered from the index" in "".join(capsys.readouterr()), "stale locks: the index is asked"
    # The index is gone: the fresh locks still answer, from uv's cache.
    assert main(["pins", "predict", "--pins", str(pins), "--locks", str(locks)]) == 0
    err = " ".join("".join(capsys.readouterr()).split())
    assert "uv would install 5 distributions for sglang==0.5.23" in err
    assert "answered from the fresh locks" in err and "(uv's cache, offline)" in err
    assert "moves no pinned package" in err
    # Without the cache the locks cannot be checked offline: the index is asked, and cannot be reached.
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "empty-cache"))
    assert main(["pins", "predict", "--pins", str(pins), "--locks", str(locks)]) == 3
    assert "cannot reach the package index" in "".join(capsys.readouterr())
