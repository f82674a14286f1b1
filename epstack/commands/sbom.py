"""`epstack image sbom`: write or validate this image's CycloneDX SBOM (epstack.image.sbom,
epstack.image.cdx)."""

from __future__ import annotations

import argparse
import os

from rich.console import Console
from rich.markup import escape

from epstack.commands.common import LOCKS, PINS, SubParsers, path_arg, pins_path, rename, results_console
from epstack.errors import BadInput
from epstack.image.sbom import SBOM_DIR, collect
from epstack.inputs import read_text
from epstack.layers import LAYER_NAMES
from epstack.output import check_writable, write_file
from epstack.python.lockfile import locks_dir


def cmd_sbom(args: argparse.Namespace, console: Console) -> int:
    from epstack.image import cdx  # noqa: PLC0415  (cyclonedx-python-lib takes 0.7 s to import: only here)

    if args.validate:
        try:
            errors = cdx.validate(read_text(args.validate, what="a CycloneDX SBOM"))
        except ValueError as exc:
            fix = f"pass a CycloneDX {cdx.SPEC_VERSION} JSON SBOM"
            raise BadInput(f"{args.validate}: {exc}; fix: {fix}") from None
        results = results_console(console)
        for error in errors:
            results.print(f"{args.validate}: {error}", style="red", markup=False)
        if not errors:
            results.print(f"{args.validate}: valid CycloneDX {cdx.SPEC_VERSION}", style="green", markup=False)
        return 1 if errors else 0
    layer = args.layer or os.environ.get("EPSTACK_GUARD_LAYER", "")
    pins_file = pins_path(args.pins)
    if layer not in LAYER_NAMES or not pins_file.name:
        raise BadInput(
            "epstack image sbom: no --layer or --pins (nor EPSTACK_GUARD_LAYER, EPSTACK_PINS); fix: pass both"
        )
    locks = locks_dir(args.locks)
    out = args.out or SBOM_DIR / f"{layer}.cdx.json"
    check_writable(out, what="the SBOM", inputs=[pins_file, locks])
    facts = collect(layer=layer, target=args.target, version=args.image_tag, base_image=args.base_image,
                    pins_file=pins_file, locks=locks)  # fmt: skip
    text = cdx.document(facts)
    errors = cdx.validate(text)
    if errors:
        raise BadInput(f"the SBOM does not validate as CycloneDX {cdx.SPEC_VERSION}: {errors[0]}")
    write_file(out, text, what="the SBOM")
    groups = {group: sum(1 for p in facts.parts if p.group == group) for group in ("python", "native", "os")}
    console.print(
        f"sbom: {escape(str(out))}: CycloneDX {cdx.SPEC_VERSION}, valid; {groups['python']} Python, "
        f"{groups['native']} native, {groups['os']} OS components"
    )
    return 0


def register(subparsers: SubParsers) -> None:
    """Add `sbom` to `epstack image`'s commands."""
    parser = subparsers.add_parser(
        "sbom", parents=[PINS, LOCKS], help="write this image's CycloneDX SBOM (run inside an image)"
    )
    parser.add_argument("--layer", choices=LAYER_NAMES, help="default $EPSTACK_GUARD_LAYER")
    parser.add_argument(
        "--target", default="", help="the image target the image was built for, e.g. hopper-ib"
    )
    parser.add_argument(
        "--image-tag", default="", metavar="TAG", help="the image's tag (its pins hash at the end)"
    )
    rename(parser, "--image-tag", "--version")
    parser.add_argument("--base-image", default="", help="NAME:TAG@sha256:... the image is built FROM")
    parser.add_argument("--out", type=path_arg, metavar="FILE", help=f"default {SBOM_DIR}/<layer>.cdx.json")
    parser.add_argument(
        "--validate", type=path_arg, metavar="FILE", help="only validate FILE (exit 1 if invalid)"
    )
    parser.set_defaults(func=cmd_sbom)
