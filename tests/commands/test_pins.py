"""`epstack pins`'s options: --candidates is one declaration, with one help and default, in `pins bump`
and `pins outdated`."""

from __future__ import annotations

from epstack.commands import clireference


def test_candidates_is_one_option_in_bump_and_outdated() -> None:
    found = {
        path: (action.help, action.default, action.metavar, action.type)
        for path, action in clireference.uses()
        if "--candidates" in action.option_strings
    }
    assert sorted(found) == ["epstack pins bump", "epstack pins outdated"]
    assert len(set(found.values())) == 1
