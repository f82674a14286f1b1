"""`epstack doctor`: is this host set up for DeepEP V2 across nodes? Read-only checks (epstack.doctor.checks),
each failure with its fix. Facts come from epstack.host (sysfs/procfs under --root, so tests read
fixture trees), the image's CUDA and NCCL from the pins file (read as data).

Verdicts: ok; fail (exit 1); warn (works, with a limit named); skipped (nothing to check, reason
given). Exit 0 when nothing fails, 1 otherwise, 2 on bad input, as `epstack guard`. Standard library
only: `python3 -m epstack.doctor` runs on a bare GPU host.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from epstack import host
from epstack.commands.common import PINS, Parser, SubParsers, execute, parse, path_arg, pins_path
from epstack.doctor.report import Report, gather, run_doctor
from epstack.errors import BadInput
from epstack.output import STDOUT, check_writable, write_file
from epstack.pins.file import read_pins_file


def _image_versions(pins: Path | None, cuda: str | None) -> tuple[str, str]:
    """(CUDA_VERSION, NCCL_VERSION) from --cuda / the pins file (read as data, no model needed)."""
    path = pins_path(pins)
    entries = read_pins_file(path).entries
    for key in ("CUDA_VERSION", "NCCL_VERSION"):
        if key not in entries:
            raise BadInput(f"{path}: no {key}; fix: pass pins.env or the image's layer pins file")
    where = f"--cuda {cuda}" if cuda is not None else f"{path}: CUDA_VERSION {entries['CUDA_VERSION'].value}"
    cuda = cuda if cuda is not None else entries["CUDA_VERSION"].value
    if not re.fullmatch(r"[0-9]+(\.[0-9]+){0,2}", cuda):
        raise BadInput(f"{where}: not a CUDA version; fix: write e.g. 13.0")
    return cuda, entries["NCCL_VERSION"].value


def format_table(report: Report) -> str:
    """Plain text, printed literally (host text is never markup)."""
    headers = ("component", "expected", "found", "verdict")
    rows = [(c.component, c.expected, c.found, c.verdict) for c in report.checks]
    widths = [min(max(len(r[i]) for r in [headers, *rows]), 60) for i in range(len(headers))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    for check, row in zip(report.checks, rows, strict=True):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
        for label, text in (("fix", check.fix), ("note", check.detail)):
            if text and ((label == "fix" and (check.failed or check.verdict == "warn")) or label == "note"):
                lines.append(f"    {label}: {text}")
    failed = sum(c.failed for c in report.checks)
    lines.append(f"doctor: {'ok' if report.ok else f'{failed} of {len(report.checks)} checks failed'}")
    return "\n".join(lines) + "\n"


def cmd_doctor(args: argparse.Namespace, console: object = None) -> int:
    del console  # plain text: what the host reports is printed literally
    if args.json:
        check_writable(args.json, what="the --json report", inputs=[pins_path(args.pins)])
    cuda, nccl = _image_versions(args.pins, args.cuda)
    if not args.root.is_dir():
        raise BadInput(
            f"--root {args.root}: not a directory; fix: pass / or a copy of a host's /proc and /sys"
        )
    deepep = read_pins_file(pins_path(args.pins)).entries.get("DEEPEP_REF")
    report = run_doctor(
        gather(args.root, os.environ), cuda=cuda, nccl_version=nccl, deepep_ref=deepep.value if deepep else ""
    )
    # The table is the result, on stdout; unless stdout carries the JSON (`--json -`): then on stderr.
    (sys.stderr if args.json == STDOUT else sys.stdout).write(format_table(report))
    if args.json:
        write_file(args.json, report.to_json(), what="the --json report")
    return 0 if report.ok else 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cuda", help="the image's CUDA version instead of the pins file's (e.g. 13.0)")
    parser.add_argument(
        "--root", type=path_arg, default=host.ROOT, help="read /proc and /sys under here (default /)"
    )
    parser.add_argument(
        "--json", type=path_arg, metavar="FILE", help="also write the report as JSON (- for stdout)"
    )
    parser.set_defaults(func=cmd_doctor)


def register(subparsers: SubParsers) -> None:
    """Add `doctor` to the top-level subcommands."""
    add_arguments(
        subparsers.add_parser(
            "doctor", parents=[PINS], help="read-only host checks for DeepEP V2 across nodes"
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    """`python3 -m epstack.doctor`: the same command with the standard library only."""
    parser = Parser(prog="python3 -m epstack.doctor", description=__doc__, parents=[PINS])
    add_arguments(parser)
    args = parse(parser, sys.argv[1:] if argv is None else argv)
    if isinstance(args, int):
        return args
    return execute(lambda: cmd_doctor(args), lambda kind, line: print(f"{kind}: {line}", file=sys.stderr))
