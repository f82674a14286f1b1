"""The manifest writer against PyPI's YAML reader: what is written is what is read back."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from epstack.cluster.yamltext import dump, dump_all

TRICKY: dict[str, Any] = {
    "on": "yes",
    "plain": "1",
    "octal": "0755",
    "colon: key": "a: b # not a comment",
    "quotes": 'say "hi"\nand \\ leave',
    "nested": {"list": [1, "2", True, {"a": [], "b": {}}, [3, ["x"]]], "empty": []},
    "$(VAR)": "$(LWS_WORKER_INDEX):5000",
    "unicode": "µs",
}


def test_round_trip() -> None:
    assert yaml.safe_load(dump(TRICKY)) == TRICKY


def test_documents() -> None:
    assert list(yaml.safe_load_all(dump_all([TRICKY, {"kind": "Service"}]))) == [TRICKY, {"kind": "Service"}]


def test_refuses_what_it_cannot_write() -> None:
    with pytest.raises(TypeError, match="float"):
        dump({"x": 1.5})
