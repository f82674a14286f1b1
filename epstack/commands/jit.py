"""`epstack jit probe`: compile one real module of each JIT toolchain of a layer, now, and write the
report the guard reads (epstack.guard.jitprobe)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from epstack.commands.common import SubParsers, path_arg, seconds
from epstack.errors import BadInput
from epstack.guard.jitprobe import TIMEOUT_S, probe_layer, report_path
from epstack.layers import LAYER_NAMES
from epstack.output import write_file
from epstack.pins.load import read_layer_pins
from epstack.stack import GPU_ARCHS


def _archs(values: Sequence[str] | None) -> tuple[str, ...]:
    """--arch values, else the image's TORCH_CUDA_ARCH_LIST (its layer pins file, EPSTACK_PINS)."""
    if values:
        archs = tuple(values)
    else:
        pins = os.environ.get("EPSTACK_PINS")
        listed = ""
        if pins and Path(pins).is_file():
            listed = read_layer_pins(Path(pins)).get("TORCH_CUDA_ARCH_LIST", "")
        archs = tuple(listed.split())
    unknown = [arch for arch in archs if arch not in GPU_ARCHS]
    if unknown:
        raise BadInput(f"--arch {unknown[0]}: not a GPU architecture; fix: e.g. --arch 9.0a")
    return archs


def cmd_probe(args: argparse.Namespace, console: Console) -> int:
    archs = _archs(args.arch)
    if not archs and args.layer != "base":
        raise BadInput(
            "no arch to compile for: no --arch and no TORCH_CUDA_ARCH_LIST in $EPSTACK_PINS; fix: --arch 9.0a"
        )
    out = args.json or report_path(args.layer)
    report = probe_layer(args.layer, archs, args.timeout)
    table = Table(
        "toolchain", "module", "compiler", "seconds", "verdict", title=f"epstack jit probe {args.layer}"
    )
    for probe in report.probes:
        style = {"ok": "green", "failed": "red", "skipped": "yellow"}[probe.verdict]
        table.add_row(
            escape(probe.title),
            escape(probe.module),
            escape(f"{probe.compiler_version} ({probe.compiler})"),
            f"{probe.seconds:g}",
            f"[{style}]{probe.verdict}[/]",
        )
    console.print(table)
    for probe in report.probes:
        if probe.verdict != "ok":
            console.print(f"[bold]{escape(probe.title)}[/] {probe.verdict}:\n{escape(probe.detail)}")
    write_file(out, report.to_json(), what="the JIT probe report")
    console.print(f"jit probe: {'ok' if report.ok else 'FAILED'}; report {escape(str(out))}")
    return 0 if report.ok else 1


def register(subparsers: SubParsers) -> None:
    """Add `jit probe` to the top-level subcommands."""
    jit = subparsers.add_parser("jit", help="prove the JIT toolchains an image runs at first use")
    actions = jit.add_subparsers(dest="action", required=True, metavar="ACTION")
    probe = actions.add_parser("probe", help="compile one real module of each toolchain of a layer, now")
    probe.add_argument("--layer", choices=(*LAYER_NAMES, "all"), default="all", help="default all")
    probe.add_argument(
        "--arch", action="append", help="GPU arch to compile for (repeatable; default: the image's)"
    )
    probe.add_argument("--json", type=path_arg, metavar="FILE", help="default: the image's jit-<layer>.json")
    probe.add_argument("--timeout", type=seconds, default=TIMEOUT_S, help="seconds per toolchain")
    probe.set_defaults(func=cmd_probe)
