"""epstack.journal.exclusive: one run at a time holds a file from reading it to its commit; a second is
refused naming the first, and a commit that replaces the file ends the hold for the next run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from epstack.errors import BadInput
from epstack.journal import exclusive


def test_a_second_hold_is_refused_naming_the_first(tmp_path: Path) -> None:
    path = tmp_path / "pins.env"
    path.write_text("A=1\n")
    with exclusive(path, what="pins bump"):
        with pytest.raises(BadInput) as raised, exclusive(path, what="pins bump"):
            pass
        assert str(raised.value).startswith(f"{path}: another pins bump is moving it (pid {os.getpid()}: ")
        assert str(raised.value).endswith("); fix: wait for it to end, then run again")
    with exclusive(path, what="pins bump"):
        pass  # the first ended


def test_the_hold_ends_with_the_file_a_commit_replaces(tmp_path: Path) -> None:
    path = tmp_path / "pins.env"
    path.write_text("A=1\n")
    with exclusive(path, what="pins bump"):
        (tmp_path / "new").write_text("A=2\n")
        os.replace(tmp_path / "new", path)
        with exclusive(path, what="pins bump"):  # the new file: the next run reads what was committed
            assert path.read_text() == "A=2\n"


def test_a_missing_file_is_left_to_its_reader(tmp_path: Path) -> None:
    with exclusive(tmp_path / "none.env", what="pins bump"):
        pass
