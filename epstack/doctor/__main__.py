"""`python3 -m epstack.doctor`: `epstack doctor` with the standard library only, for bare GPU hosts."""

from __future__ import annotations

import sys

# An entry point, imported by nothing: its arrow up to commands/ closes no loop; the address
# `python3 -m epstack.doctor` is what bare hosts and the docs run.
from epstack.commands.doctor import main

if __name__ == "__main__":
    sys.exit(main())
