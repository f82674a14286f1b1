"""`python -m epstack.smoke elastic ...`: exactly `epstack smoke elastic ...` (epstack's own entry point,
the same arguments and exit codes; only the smoke's module is imported)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

# An entry point, imported by nothing: its arrow up to commands/ closes no loop; the address
# `python -m epstack.smoke` is the documented one (docs/guides/smoke.md, the exit-code page).
from epstack.commands.main import main as epstack_main


def main(argv: Sequence[str] | None = None) -> int:
    return epstack_main(["smoke", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
