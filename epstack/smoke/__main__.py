"""`python -m epstack.smoke elastic ...`: the same command without the rest of epstack's CLI."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rich.console import Console

from epstack.errors import EpstackError
from epstack.smoke.cli import register


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m epstack.smoke")
    register(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(["smoke", *(sys.argv[1:] if argv is None else argv)])
    console = Console(stderr=True, highlight=False)
    try:
        code: int = args.func(args, console)
    except EpstackError as exc:
        console.print(f"[red]error:[/] {exc}", soft_wrap=True)
        return exc.exit_code
    return code


if __name__ == "__main__":
    sys.exit(main())
