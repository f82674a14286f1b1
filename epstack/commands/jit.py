"""`epstack jit probe|export|layer` and, in images, `epstack image jit-unpack|jit-install`: prove, ship
and install the JIT toolchains' caches (epstack.jit)."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from epstack import imagepaths
from epstack.commands.common import SubParsers, add_cuda_arch, path_arg, results_console, seconds
from epstack.errors import ENVIRONMENT, BadInput
from epstack.inputs import read_bytes
from epstack.jit import export, flashinfer, triton
from epstack.jit.buildship import WORKSPACE_VARIABLE, ship_flashinfer, ship_triton, shipping_workspace
from epstack.jit.gpuexport import export as export_cache
from epstack.jit.install import install
from epstack.jit.probe import PROBES, TIMEOUT_S, probe_layer
from epstack.jit.probereport import report_path
from epstack.jit.registry import EXPORTED, INSTALLED, by_kind, kinds
from epstack.jit.shipped import sha256_hex
from epstack.layers import LAYER_NAMES
from epstack.output import check_writable, write_file
from epstack.pins.load import read_layer_pins
from epstack.stack import GPU_ARCHS


def _archs(values: Sequence[str] | None) -> tuple[str, ...]:
    """--cuda-arch values, else the image's TORCH_CUDA_ARCH_LIST (its layer pins file, EPSTACK_PINS)."""
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
        raise BadInput(f"--cuda-arch {unknown[0]}: not a GPU architecture; fix: e.g. --cuda-arch 9.0a")
    return archs


def cmd_probe(args: argparse.Namespace, console: Console) -> int:
    archs = _archs(args.cuda_arch)
    if not archs and args.layer != "base":
        raise BadInput(
            "no arch to compile for: no --cuda-arch and no TORCH_CUDA_ARCH_LIST in $EPSTACK_PINS; "
            "fix: --cuda-arch 9.0a"
        )
    out = args.json or report_path(args.layer)
    # A layer's guard step runs again in built images (publish, a user's layer): what it shipped stays.
    flashinfer_into, triton_into = (
        (args.ship_into / flashinfer.SHIPPED.name, args.ship_into / triton.SHIPPED.name)
        if args.ship_into
        else (flashinfer.SHIPPED, triton.SHIPPED)
    )
    ships_flashinfer = args.ship and flashinfer.read_manifest(flashinfer_into) is None
    keep = shipping_workspace(os.environ) if ships_flashinfer else {}
    report = probe_layer(args.layer, archs, args.timeout, keep, args.toolchain or ())
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
    results = results_console(console, document=out)
    results.print(table)
    for probe in report.probes:
        if probe.verdict != "ok":
            results.print(f"[bold]{escape(probe.title)}[/] {probe.verdict}:\n{escape(probe.detail)}")
    write_file(out, report.to_json(), what="the JIT probe report")
    results.print(f"jit probe: {'ok' if report.ok else 'FAILED'}; report {escape(str(out))}")
    if not report.ok:
        return 1
    base = Path(keep[WORKSPACE_VARIABLE]) if ships_flashinfer else None
    shipped = ship_flashinfer(report, base, flashinfer_into) if base else None
    if shipped:
        console.print(
            f"jit probe: shipped FlashInfer's {', '.join(shipped.modules)} for {' '.join(shipped.key.archs)} "
            f"({len(shipped.files)} files, {shipped.bytes:,} bytes) into {escape(str(flashinfer_into))}"
        )
    launchers = (
        ship_triton(report, triton_into, os.environ)
        if args.ship and triton.read_manifest(triton_into) is None
        else None
    )
    if launchers:
        console.print(
            f"jit probe: shipped Triton {launchers.triton}'s launcher for libcuda.so.1 in "
            f"{', '.join(launcher.libcuda_dir for launcher in launchers.launchers)} "
            f"into {escape(str(triton_into))}"
        )
    return 0


def _read_export(path: Path) -> bytes:
    return read_bytes(path, what="a JIT cache export", limit=export.MAX_ARCHIVE_BYTES)


def cmd_unpack(args: argparse.Namespace, console: Console) -> int:
    """In the image: the export's kernels, if made for this install, into the image's kernel folder."""
    kind, manifest, files = export.unpack(args.export, _read_export(args.export), args.sha256, kinds())
    tool = by_kind(kind)
    differences = tool.install_differences(manifest.key, _archs(None), os.environ)
    if differences:
        raise BadInput(
            f"{args.export}: its kernels were made for another install ({'; '.join(differences)}), so "
            f"{tool.TITLE} here would compile each again; fix: export them from this image on a GPU "
            f"({tool.AGAIN})"
        )
    into = args.into or tool.SHIPPED
    tool.install(manifest, files, into)
    console.print(
        f"jit unpack: {manifest.kernels} {tool.TITLE} kernels ({manifest.bytes:,} bytes) "
        f"into {escape(str(into))}"
    )
    return 0


def cmd_export(args: argparse.Namespace, console: Console) -> int:
    """On a GPU, after any run that compiled the toolchain's kernels: pack them for `jit layer`."""
    check_writable(args.out, what="--out")
    made = export_cache(args.out, os.environ, args.toolchain)
    name = EXPORTED[args.toolchain].TITLE
    console.print(
        f"jit export: {made['kernels']} {name} kernels ({made['bytes']:,} bytes) to "
        f"{escape(made['path'])}, sha256 {made['sha256']}"
    )
    return 0


def cmd_layer(args: argparse.Namespace, console: Console) -> int:
    """Here, with Docker: the kernels layer over a built image."""
    # Rendering images (jinja2, the pins model) loads only here: every container start runs `jit install`.
    from epstack.image.engine import DockerEngine  # noqa: PLC0415
    from epstack.image.kernels import LayerExport, build_kernels_layer, kernels_tag  # noqa: PLC0415

    if args.sha256 and len(args.sha256) != len(args.export):
        raise BadInput(
            f"--sha256 given {len(args.sha256)} times for {len(args.export)} --export; fix: one per export"
        )
    exports = []
    for index, path in enumerate(args.export):
        data = _read_export(path)
        sha256 = sha256_hex(data)
        kind, manifest, _ = export.unpack(path, data, args.sha256[index] if args.sha256 else sha256, kinds())
        exports.append(LayerExport(tool=kind.tool, manifest=manifest, data=data, sha256=sha256))
    engine = DockerEngine.find()
    tag = args.tag or kernels_tag(args.image, [e.sha256 for e in exports])
    image_id = build_kernels_layer(engine, image=args.image, exports=exports, tag=tag)
    titles = {chain.TOOL: chain.TITLE for chain in EXPORTED.values()}
    kernels = ", ".join(f"{e.manifest.kernels} {titles[e.tool]} kernels" for e in exports)
    console.print(f"jit layer: {escape(tag)} ({image_id}), {kernels} over {escape(args.image)}")
    return 0


def cmd_install(args: argparse.Namespace, console: Console) -> int:
    """At container start: the shipped caches into the writable ones; `export` lines for the shell."""
    moved = install(INSTALLED, os.environ, lambda line: print(line, file=sys.stderr))
    if moved is None:
        return ENVIRONMENT
    for variable, folder in moved.items():
        print(f"export {variable}={shlex.quote(folder)}")
    return 0


def _sha256_hex(value: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{64}", value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a sha256 (64 lowercase hex)")
    return value


def register(subparsers: SubParsers) -> None:
    """Add `jit probe|export|layer` to the top-level subcommands."""
    jit = subparsers.add_parser("jit", help="prove the JIT toolchains an image runs at first use")
    actions = jit.add_subparsers(dest="action", required=True, metavar="ACTION")
    probe = actions.add_parser("probe", help="compile one real module of each toolchain of a layer, now")
    probe.add_argument("--layer", choices=(*LAYER_NAMES, "all"), default="all", help="default all")
    add_cuda_arch(probe, example="9.0a", default="the image's TORCH_CUDA_ARCH_LIST")
    probe.add_argument("--json", type=path_arg, metavar="FILE", help="default: the image's jit-<layer>.json")
    probe.add_argument("--timeout", type=seconds, default=TIMEOUT_S, help="seconds per toolchain")
    probe.add_argument(
        "--toolchain",
        action="append",
        choices=[toolchain.name for toolchain in PROBES],
        help="only this toolchain of the layer (repeatable; default every one)",
    )
    probe.add_argument(
        "--ship",
        action="store_true",
        help=f"in an image build: keep what compiles without a GPU, read-only under {imagepaths.JIT} "
        f"(FlashInfer's modules, compiled in ${WORKSPACE_VARIABLE}; Triton's launcher for each folder "
        "GPU nodes mount the driver in); the entrypoint copies them into the writable caches",
    )
    probe.add_argument(
        "--ship-into",
        type=path_arg,
        metavar="FOLDER",
        help=f"with --ship: the shipped caches' folder (default {imagepaths.JIT}, the image's)",
    )
    probe.set_defaults(func=cmd_probe)
    export_p = actions.add_parser(
        "export",
        help="on a GPU: pack a JIT's kernels (after a smoke or a serve run) for `jit layer`",
    )
    export_p.add_argument(
        "--out", type=path_arg, metavar="FILE", required=True, help="the tar.gz (and FILE.sha256) to write"
    )
    export_p.add_argument(
        "--toolchain",
        choices=tuple(EXPORTED),
        default="deepep",
        help="deepep: $EP_JIT_CACHE_DIR (default); deepgemm: SGLang's $SGLANG_DG_CACHE_DIR; sglang: "
        "SGLang's own $SGLANG_JIT_CACHE_DIR; triton-kernels: the kernels in $TRITON_CACHE_DIR",
    )
    export_p.set_defaults(func=cmd_export)
    layer = actions.add_parser("layer", help="build the kernels layer over a built sglang image (Docker)")
    layer.add_argument("--image", required=True, help="the image the kernels were exported from")
    layer.add_argument(
        "--export",
        type=path_arg,
        action="append",
        required=True,
        help="a `jit export` or `--export-jit-cache` file (repeatable: DeepEP's, DeepGEMM's, SGLang's, "
        "Triton's)",
    )
    layer.add_argument(
        "--sha256",
        type=_sha256_hex,
        action="append",
        help="refuse an export with another digest (one per --export, in order)",
    )
    layer.add_argument("--tag", help="default: the image's tag + -kernels-<12 hex of the export>")
    layer.set_defaults(func=cmd_layer)


def register_image(subparsers: SubParsers) -> None:
    """Add `jit-unpack` and `jit-install` to `epstack image`'s commands."""
    unpack_p = subparsers.add_parser(
        "jit-unpack",
        help="in an image: unpack kernels exported on a GPU (DeepEP, DeepGEMM, SGLang's, Triton's), "
        "checked by sha256",
    )
    unpack_p.add_argument("export", type=path_arg, help="the `jit export` (or `--export-jit-cache`) file")
    unpack_p.add_argument("--sha256", type=_sha256_hex, required=True, help="the export's digest")
    unpack_p.add_argument(
        "--into",
        type=path_arg,
        help=f"default {imagepaths.JIT}/<toolchain> (deep_ep, deep_gemm, sglang_jit, triton_kernels)",
    )
    unpack_p.set_defaults(func=cmd_unpack)
    install_p = subparsers.add_parser(
        "jit-install",
        help="at container start: the image's shipped JIT caches into the writable ones; prints an "
        "`export VAR=FOLDER` line for each cache moved to $TMPDIR (eval it; scripts/image/jit-caches.sh)",
    )
    install_p.set_defaults(func=cmd_install)
