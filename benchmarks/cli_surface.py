"""Benchmark: how much command line a newcomer has to hold, before and after a change.

For this tree and for an earlier commit (its epstack/ package extracted with `git archive`, so no
worktree is touched) it counts, in a new process each, from the parser `epstack --help` is printed
from: the top-level commands, the leaf commands (those that run something), the options of every
leaf command together (--help and the global flags left out; those counted apart) and the distinct
option names among them; the same outside `epstack image` (what images run, not users); and how
many groups the largest command's --help shows its options in. Deprecated aliases (old command
paths, old option names) are not in the parser's help and are not counted. Writes
benchmarks/results/cli_surface.json. Run from the repository root:
`python -m benchmarks.cli_surface --before REV`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.cli_startup import extract

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
# What a user's `epstack --help` leads to: `epstack image` (what images run) left out.
users = [(p, l) for p, l in leaves if p[:1] != ["image"]]
largest = max(leaves, key=lambda pl: len(own(pl[1])))
groups = [g for g in largest[1]._action_groups if any(a in own(largest[1]) for a in g._group_actions)]
subs = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)][0]
print(json.dumps({
    "top_level_commands": len(listed(subs)),
    "leaf_commands": len(leaves),
    "options": len(every),
    "distinct_option_names": len(names),
    "global_options": len(options(top)),
    "largest_leaf": [" ".join(largest[0]), len(own(largest[1]))],
    "largest_leaf_help_groups": len(groups),
    "user_leaf_commands": len(users),
    "user_options": sum(len(own(l)) for _, l in users),
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
        "command": f"python -m benchmarks.cli_surface --before {args.before}",
        "machine": f"{platform.machine()}, CPython {platform.python_version()}",
        "measured": "the parser `epstack --help` prints: commands listed, leaf commands, their options "
        "(help and global flags left out), distinct option names; deprecated aliases not counted; "
        "user_*: the same outside `epstack image` (what images run); the largest command's --help groups",
        "before": {"revision": revision, **before},
        "after": {"revision": "this tree", **after},
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
