"""The CLI convention's helpers (epstack.commands.common) a test can see on their own."""

from __future__ import annotations

import io
import time

from rich.console import Console

from epstack.commands.common import working


def test_long_work_spins_on_a_terminal_and_says_nothing_in_a_log() -> None:
    shown, logged = io.StringIO(), io.StringIO()
    with working(Console(file=shown, force_terminal=True, width=100), "pins outdated: asking [upstream]"):
        time.sleep(0.3)  # a refresh or two
    with working(Console(file=logged, force_terminal=False), "pins outdated: asking [upstream]"):
        pass
    assert "pins outdated: asking [upstream]" in shown.getvalue(), "the text as given, no markup"
    assert logged.getvalue() == ""
