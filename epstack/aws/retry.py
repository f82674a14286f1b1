"""on-failure: RETRY[-count][-regex], as the runner may run it.

CodeBuild retries a failed phase 3 times by default and takes counts 0 to 100 (build-spec-ref,
phases/*/on-failure); its pattern is matched with Go's linear-time regexp. Python's re backtracks, so
epstack caps a pattern's length and refuses nested quantifiers (`(a+)+$`), the patterns it takes
minutes over; the runner also searches with a time limit (runner.PATTERN_SECONDS).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from re import _parser  # type: ignore[attr-defined]  # the stdlib's own regex parser
from typing import Any

from epstack.errors import shown

DEFAULT_RETRIES = 3
MAX_RETRIES = 100
MAX_PATTERN = 256
_RETRY = re.compile(r"^RETRY(?:-(?P<count>\d+))?(?:-(?P<regex>.+))?$", re.DOTALL)


@dataclass(frozen=True, kw_only=True)
class Retry:
    """on-failure: RETRY[-count][-regex]: the phase runs again, at most `count` more times, while its
    output matches `pattern`."""

    count: int = DEFAULT_RETRIES
    pattern: str = ".*"


def parse_retry(on_failure: Any) -> Retry | None:
    """The retry an on-failure value asks for (None: none); ValueError("what; fix: how") for a count
    over CodeBuild's or a pattern epstack will not run."""
    match = _RETRY.match(on_failure) if isinstance(on_failure, str) else None
    if match is None:
        return None
    digits, pattern = match.group("count"), match.group("regex")
    count = int(digits.lstrip("0") or "0") if digits and len(digits.lstrip("0")) <= 3 else None
    if digits and (count is None or count > MAX_RETRIES):
        raise ValueError(
            f"retries {digits} times, over CodeBuild's {MAX_RETRIES}; fix: RETRY-{MAX_RETRIES} or fewer"
        )
    if pattern is not None:
        _check_pattern(pattern)
    return Retry(count=DEFAULT_RETRIES if count is None else count, pattern=pattern or ".*")


def _check_pattern(pattern: str) -> None:
    if len(pattern) > MAX_PATTERN:
        raise ValueError(
            f"a retry pattern of {len(pattern)} characters, over {MAX_PATTERN}; "
            "fix: match a shorter part of the error message"
        )
    # Python warns of sets it may read another way one day ("[0--"): the pattern is the user's, judged
    # only by whether it compiles and how it repeats, so the warning is no finding and must not escape.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(
                f"{shown(pattern)} is not a regular expression ({exc.msg}); fix: correct it"
            ) from None
        parsed = _parser.parse(pattern)
    if _nested_repeat(parsed, inside=False):
        raise ValueError(
            f"{shown(pattern)} repeats a group that itself repeats, which backtracks for minutes on a long "
            "log; fix: drop the inner or the outer quantifier"
        )


def _nested_repeat(items: Any, *, inside: bool) -> bool:
    """Whether a quantifier that can match more than once holds another, in a parsed pattern."""
    for op, argument in items:
        if op in (_parser.MAX_REPEAT, _parser.MIN_REPEAT, _parser.POSSESSIVE_REPEAT):
            _, most, body = argument
            repeats = most > 1
            if (repeats and inside) or _nested_repeat(body, inside=inside or repeats):
                return True
        elif any(_nested_repeat(part, inside=inside) for part in _subpatterns(argument)):
            return True
    return False


def _subpatterns(argument: Any) -> Iterator[Any]:
    if isinstance(argument, _parser.SubPattern):
        yield argument
    elif isinstance(argument, tuple | list):
        for item in argument:
            yield from _subpatterns(item)
