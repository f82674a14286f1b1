"""One home for the stack's facts: the contributor greps of docs/contributing.md, run as written there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def _contributor_commands() -> list[str]:
    section = REPO.joinpath("docs", "contributing.md").read_text()
    return re.findall(r"```bash\n(.*?)```", section, re.DOTALL)


def _run(command: str) -> list[str]:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    result = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {command}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr  # git grep: 1 when nothing matched
    return result.stdout.splitlines()


def _alternatives(pattern: str) -> list[str]:
    """The top-level alternatives of a regex (a|b(c|d) -> a, b(c|d))."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(pattern):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
    return [*parts, pattern[start:]]


def test_each_stack_fact_is_written_once_in_stack_py() -> None:
    facts, _, _ = _contributor_commands()
    alternatives = _alternatives(re.search(r"git grep -nE '([^']*)'", facts).group(1))  # type: ignore[union-attr]
    lines = _run(facts)
    for fact in alternatives:
        hits = [line for line in lines if re.search(fact, line.split(":", 2)[2])]
        assert len(hits) == 1, f"{fact!r} is written {len(hits)} times: {hits}"
        assert hits[0].startswith("epstack/stack.py:"), hits[0]
    assert len(lines) == len(alternatives)


def test_no_script_template_or_buildspec_carries_a_pinned_version() -> None:
    _, pins, _ = _contributor_commands()
    assert _run(pins) == []


def test_no_module_names_a_layer_or_a_fabric_outside_its_record() -> None:
    _, _, names = _contributor_commands()
    assert _run(names) == []
