"""`python3 -m epstack.doctor`: `epstack doctor` with the standard library only, for bare GPU hosts."""

from __future__ import annotations

import sys

from epstack.commands.doctor import main

if __name__ == "__main__":
    sys.exit(main())
