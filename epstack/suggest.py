"""The near miss for a misspelt name: "did you mean NCCL_VERSION?". Standard library only."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def _norm(name: str) -> str:
    return name.upper().replace("-", "_")


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice `word` most likely meant: the same name in another case or separator, the one name
    it abbreviates (NCCL_VER for NCCL_VERSION), else the closest spelling; None when nothing is close."""
    by_norm = {_norm(choice): choice for choice in choices}
    norm = _norm(word)
    if norm in by_norm:
        return by_norm[norm]
    longer = [choice for key, choice in by_norm.items() if len(norm) >= 4 and key.startswith(norm)]
    if len(longer) == 1:
        return longer[0]
    near = difflib.get_close_matches(norm, by_norm, n=1)
    return by_norm[near[0]] if near else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """'did you mean X?', or '' when nothing is close."""
    near = closest(word, choices)
    return f"did you mean {near}?" if near else ""
