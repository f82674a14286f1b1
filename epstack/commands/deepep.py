"""`epstack image deepep-build`: the deep_ep wheel at the pinned commit (epstack.image.deepep)."""

from __future__ import annotations

import argparse

from rich.console import Console

from epstack.commands.common import PINS, SubParsers, add_cuda_arch, path_arg, pins_path
from epstack.fabric import FABRICS
from epstack.image.deepep import build


def cmd_deepep_build(args: argparse.Namespace, console: Console) -> int:
    manifest = build(
        pins_file=pins_path(args.pins),
        sources=args.sources,
        wheel_dir=args.wheel_dir,
        arch=" ".join(args.cuda_arch) if args.cuda_arch else None,
        fabric=args.fabric,
    )
    console.print(
        f"deep_ep {manifest.commit[:12]} ({manifest.source}, {len(manifest.patches)} patches) "
        f"for {manifest.torch_cuda_arch_list}: "
        f"{args.wheel_dir / manifest.wheel}, linked NCCL {manifest.nccl.version} ({manifest.nccl.library})",
        markup=False,
    )
    return 0


def register(subparsers: SubParsers) -> None:
    """Add `deepep-build` to `epstack image`'s commands."""
    parser = subparsers.add_parser(
        "deepep-build",
        parents=[PINS],
        help="build the deep_ep wheel at the pinned commit (image and bare GPU host alike)",
    )
    parser.add_argument(
        "--sources",
        type=path_arg,
        help="folder of `git archive` tarballs, verified whole (without it: git clone)",
    )
    parser.add_argument("--wheel-dir", type=path_arg, required=True, help="where the wheel and manifest go")
    add_cuda_arch(parser, example="9.0", default="the pins' TORCH_CUDA_ARCH_LIST")
    parser.add_argument(
        "--fabric",
        choices=tuple(FABRICS),
        help="apply this fabric's DEEPEP_PATCHES_* (default: the file's FABRIC)",
    )
    parser.set_defaults(func=cmd_deepep_build)
