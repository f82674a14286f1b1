"""Benchmark: how much command line a newcomer has to hold, before and after a change.

For this tree and for an earlier commit (its epstack/ package extracted with `git archive`, so no
worktree is touched) it counts, in a new process each, from the parser `epstack --help` is printed
from: the top-level commands, the leaf commands (those that run something), the options of every
leaf command together (--help and the global flags left out; those counted apart) and the distinct option
names among them. Deprecated aliases (old command paths, old option names) are not in the parser's
help and are not counted. Writes benchmarks/results/cli_surface.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "cli_surface.json"

# Run in the tree being measured: its own parser, whatever its module layout.
COUNT = """
import argparse, json
from epstack.commands.main import build_parser

def listed(action):
    # the commands a subparsers action shows in --help (an alias without help is not listed)
    shown = {choice.dest for choice in action._choices_actions}
    return {name: parser for name, parser in action.choices.items() if name in shown}

def walk(parser, path):
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups:
        yield path, parser
    for group in groups:
        for name, child in listed(group).items():
            yield from walk(child, path + [name])

top = build_parser()
leaves = list(walk(top, []))
skip = (argparse._HelpAction, argparse._SubParsersAction, argparse._VersionAction)
def options(parser):
    return [a for a in parser._actions if a.option_strings and not isinstance(a, skip)]
global_names = {name for a in options(top) for name in a.option_strings}
def own(parser):
    return [a for a in options(parser) if not set(a.option_strings) & global_names]
every = [a for _, leaf in leaves for a in own(leaf)]
names = {max(a.option_strings, key=len) for a in every}
subs = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)][0]
print(json.dumps({
    "top_level_commands": len(listed(subs)),
    "leaf_commands": len(leaves),
    "options": len(every),
    "distinct_option_names": len(names),
    "global_options": len(options(top)),
    "largest_leaf": max(((" ".join(p), len(own(l))) for p, l in leaves), key=lambda x: x[1]),
}))
"""


def measure(source: Path) -> dict[str, object]:
    """The counts of the parser in `source` (a folder holding the epstack package)."""
    result = subprocess.run(
        [sys.executable, "-c", COUNT],
        cwd=source,
        env={**os.environ, "PYTHONPATH": str(source)},
        capture_output=True,
        text=True,
        check=True,
    )
    counts: dict[str, object] = json.loads(result.stdout)
    return counts


def extract(revision: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", revision, "epstack"], capture_output=True, check=True
    )
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--before", required=True, help="the commit to compare with, e.g. main's")
    args = parser.parse_args()
    revision = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", args.before],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="epstack-before-") as tmp:
        before = measure(extract(args.before, Path(tmp)))
    after = measure(REPO)
    result = {
        "command": f"python benchmarks/cli_surface.py --before {args.before}",
        "machine": f"{platform.machine()}, CPython {platform.python_version()}",
        "measured": "the parser `epstack --help` prints: commands listed, leaf commands, their options "
        "(help and global flags left out), distinct option names; deprecated aliases not counted",
        "before": {"revision": revision, **before},
        "after": {"revision": "this tree", **after},
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
