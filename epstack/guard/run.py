"""`epstack guard`: is what this Python has installed and loaded exactly what pins.env pins?

Each check is a small function returning Check rows; a layer runs its own checks and those of the
layers below it, because an upper layer's install is what moves a lower layer's pins. Runtime facts
beat package claims: NCCL is the libnccl mapped into this process, never torch.cuda.nccl.version().
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from importlib import metadata
from pathlib import Path
from types import ModuleType

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from epstack.checkrow import Check, Verdict, broken
from epstack.commands.common import PINS, SubParsers, path_arg, pins_path
from epstack.document import Schema
from epstack.errors import BadInput, EpstackError
from epstack.guard.jitprobe import layer_rows as jit_rows
from epstack.guard.loaded import (
    decode_cuda_version,
    interposition_example,
    library_version,
    libstdcxx_interposition,
    linked_library,
    mapped_libraries,
    nccl_version,
)
from epstack.guard.onecuda import cuda_home, cuda_home_checks, other_major_check, release_wheel_checks
from epstack.image.deepepmanifest import DEEPEP_MANIFEST, manifest_path
from epstack.image.sources import fabric_patches
from epstack.layers import GUARD_CHOICES, GUARD_SCOPES, guard_scopes
from epstack.output import write_file
from epstack.pins.load import pin_values
from epstack.pins.model import CudaFacts
from epstack.python import closure
from epstack.python.distinfo import files, find, name_of, requirements
from epstack.stack import DEEP_EP_PROVIDERS

LIBSTDCXX_FIX = "rebuild DeepEP with CC=/usr/bin/gcc CXX=/usr/bin/g++ and CUDAHOSTCXX unset"


@dataclass(frozen=True, kw_only=True)
class Expected(CudaFacts):
    """What the guard compares with: the pins of one image layer (the layer pins file render puts in
    each image), or of a whole pins.env, which names no fabric and so pins no one set of patches."""

    cuda_version: str = ""
    cuda_minor_exceptions: str = "none"  # absent from the layer pins files of images before it
    torch_version: str = ""
    torch_cuda_tag: str = ""
    nccl_version: str = ""
    nvshmem_version: str = ""
    deepep_repo: str = ""
    deepep_ref: str = ""
    sglang_version: str = ""
    # The DeepEP patches of the image's fabric (None: a pins.env, which pins them per fabric).
    deepep_patches: tuple[str, ...] | None = None


def load_expected(path: Path, scopes: list[str]) -> Expected:
    """A full pins.env (validated by load_pins), or a layer pins file (validated by the same value
    rules) holding every key the guard `scopes` read (epstack.layers.GuardScope.keys)."""
    values = pin_values(path)
    fabric = values.get("FABRIC") if "DEFAULT_TARGET" not in values else None
    for scope in GUARD_SCOPES:
        missing = [key for key in scope.keys if key not in values] if scope.name in scopes else []
        if missing:
            raise BadInput(
                f"{path}: no {missing[0]}, which guard --layer {scope.name} needs; "
                "fix: pass pins.env or the layer pins file of this image"
            )
    known = {f.name for f in fields(Expected)} - {"deepep_patches"}
    return Expected(
        **{key.lower(): value for key, value in values.items() if key.lower() in known},
        deepep_patches=tuple(str(patch) for patch in fabric_patches(values, fabric)) if fabric else None,
    )


@dataclass(frozen=True, kw_only=True)
class GuardReport:
    """What `epstack guard --json` writes and `epstack publish` reads back from each image."""

    pins: Path
    layer: str
    checks: tuple[Check, ...]
    # Every distribution of the venv and of the layer's locks, ok ones included (the table shows a
    # summary row and the failing ones only).
    distributions: tuple[closure.Distribution, ...] = ()

    @property
    def ok(self) -> bool:
        return not any(check.failed for check in self.checks)

    def to_json(self) -> str:
        """The report, with the verdicts derived from its rows ("ok", each distribution's) written out."""
        checks = [check.json_fields(*ROW_FIELDS) for check in self.checks]
        distributions = [{**asdict(d), "verdict": d.verdict} for d in self.distributions]
        document = {"pins": str(self.pins), "layer": self.layer, "checks": checks, "ok": self.ok}
        if self.distributions:
            document["distributions"] = distributions
        return GUARD_REPORT.dumps(document)


# The fields of a check row in the --json report.
ROW_FIELDS = ("component", "expected", "found", "verdict", "detail", "layer")
GUARD_REPORT = Schema(
    name="guard-report",
    version=1,
    model=GuardReport,
    what="an epstack guard report",
    fix="run `epstack guard --json` of this epstack (rebuild the image with it)",
)


# ---- Python distributions --------------------------------------------------------------------


def _same_release(found: str, pinned: str) -> bool:
    try:
        return Version(found).public == Version(pinned).public
    except InvalidVersion:
        return False


def check_distribution(name: str, pinned: str) -> Check:
    """The installed distribution's version (local tag ignored) equals the pin."""
    dist = find(name)
    if dist is None:
        return Check(component=name, expected=pinned, found="not installed", verdict="missing")
    if dist.problem:
        return broken(name, pinned, dist)
    verdict: Verdict = "ok" if _same_release(dist.version, pinned) else "mismatch"
    return Check(component=name, expected=pinned, found=dist.version, verdict=verdict)


_NVSHMEM_VERSION = re.compile(r"#define NVSHMEM_VENDOR_(MAJOR|MINOR|PATCH)_VERSION (\d+)")


def check_nvshmem_headers(pinned: str, header: Path | None) -> Check:
    """The NVSHMEM that DeepEP compiles and links against (headers and libnvshmem_device.a come
    together) is the pinned one, whatever the wheel's metadata says."""
    component = "NVSHMEM (headers)"
    if header is None or not header.is_file():
        return Check(component=component, expected=pinned, found="no nvshmem_version.h", verdict="missing")
    parts = dict(_NVSHMEM_VERSION.findall(header.read_text(errors="replace")))
    found = ".".join(parts.get(k, "?") for k in ("MAJOR", "MINOR", "PATCH"))
    verdict: Verdict = "ok" if _same_release(found, pinned) else "mismatch"
    return Check(component=component, expected=pinned, found=found, verdict=verdict, detail=str(header))


def _cuda_of_tag(tag: str) -> str:
    """cu130 -> 13.0"""
    return f"{tag[2:-1]}.{tag[-1]}"


def check_torch_cuda(pins: Expected, torch: ModuleType | None, import_error: str) -> Check:
    """torch's local tag (+cu130) if any; PyPI's default wheel has none, so then torch.version.cuda."""
    expected = f"{pins.torch_cuda_tag} (CUDA {_cuda_of_tag(pins.torch_cuda_tag)})"
    dist = find("torch")
    if dist is None:
        return Check(
            component="torch CUDA", expected=expected, found="torch not installed", verdict="missing"
        )
    if dist.problem:
        return broken("torch CUDA", expected, dist)
    local = Version(dist.version).local
    if local:
        verdict: Verdict = "ok" if local == pins.torch_cuda_tag else "mismatch"
        return Check(component="torch CUDA", expected=expected, found=local, verdict=verdict)
    if torch is None:
        return Check(
            component="torch CUDA",
            expected=expected,
            found="unknown",
            verdict="mismatch",
            detail=f"no local tag and import torch failed: {import_error}",
        )
    cuda = torch.version.cuda
    found = f"CUDA {cuda}" if cuda else "CPU build"
    verdict = (
        "ok"
        if cuda and ".".join(str(cuda).split(".")[:2]) == _cuda_of_tag(pins.torch_cuda_tag)
        else "mismatch"
    )
    return Check(
        component="torch CUDA", expected=expected, found=found, verdict=verdict, detail="torch.version.cuda"
    )


def check_requirements(owner: str, pinned: Mapping[str, str]) -> list[Check]:
    """An installed package's requirements on pinned packages; "override (pinned)" where the pin differs."""
    parsed, malformed = requirements(owner)
    rows = [
        Check(
            component=f"{owner} requires ?",
            expected="a valid Requires-Dist",
            found="malformed",
            verdict="mismatch",
            detail=f"{owner}'s metadata: {line}",
        )
        for line in malformed
    ]
    for requirement in parsed:
        name = canonicalize_name(requirement.name)
        if name not in pinned or not _applies(requirement):
            continue
        agrees = requirement.specifier.contains(pinned[name], prereleases=True)
        rows.append(
            Check(
                component=f"{owner} requires {name}",
                expected=f"{pinned[name]} (pinned)",
                found=f"{requirement.specifier}" or "any",
                verdict="ok" if agrees else "override (pinned)",
                detail="" if agrees else f"pins.env installs {name} {pinned[name]} on purpose",
            )
        )
    return rows


def _applies(requirement: Requirement) -> bool:
    """The requirement's marker holds here (no extra asked for); an unevaluable marker counts as holding."""
    if requirement.marker is None:
        return True
    try:
        return requirement.marker.evaluate({"extra": ""})
    except Exception:  # packaging raises several kinds for markers it cannot evaluate
        return True


# ---- libraries loaded into this process ------------------------------------------------------


def check_nccl_loaded(pinned: str, maps_text: str) -> Check:
    """Exactly one libnccl mapped, and its own ncclGetVersion equals the pin."""
    libraries = mapped_libraries(maps_text, "libnccl.so")
    if not libraries:
        return Check(
            component="NCCL (loaded)",
            expected=pinned,
            found="not loaded",
            verdict="missing",
            detail="no libnccl mapped after import torch",
        )
    if len(libraries) > 1:
        found = f"{len(libraries)} libnccl mapped"
        return Check(
            component="NCCL (loaded)",
            expected=pinned,
            found=found,
            verdict="mismatch",
            detail=" ".join(libraries),
        )
    try:
        version = nccl_version(libraries[0])
    except (OSError, AttributeError) as exc:
        return Check(
            component="NCCL (loaded)",
            expected=pinned,
            found="unreadable",
            verdict="mismatch",
            detail=str(exc),
        )
    verdict: Verdict = "ok" if _same_release(version, pinned) else "mismatch"
    return Check(
        component="NCCL (loaded)", expected=pinned, found=version, verdict=verdict, detail=libraries[0]
    )


def check_cuda(pins: Expected, torch: ModuleType | None, maps: Callable[[], str]) -> list[Check]:
    """CUDA runtime (the loaded libcudart) equals the pin, driver at least as new; skipped without a GPU."""
    expected = pins.cuda_major_minor
    if torch is None or not torch.cuda.is_available():
        reason = "torch not importable" if torch is None else "no GPU: torch.cuda.is_available() is False"
        return [
            Check(
                component="CUDA runtime/driver",
                expected=expected,
                found="-",
                verdict="skipped",
                detail=reason,
            )
        ]
    torch.cuda.init()
    runtimes = mapped_libraries(maps(), "libcudart.so")
    runtime = "not loaded"
    if runtimes:
        runtime = decode_cuda_version(library_version(runtimes[0], "cudaRuntimeGetVersion"))
    driver = decode_cuda_version(library_version("libcuda.so.1", "cuDriverGetVersion"))
    driver_ok = Version(driver) >= Version(expected)
    return [
        Check(
            component="CUDA runtime (loaded)",
            expected=expected,
            found=runtime,
            verdict="ok" if runtime == expected else "mismatch",
            detail=" ".join(runtimes),
        ),
        Check(
            component="CUDA driver",
            expected=f">= {expected}",
            found=driver,
            verdict="ok" if driver_ok else "mismatch",
        ),
    ]


# ---- deep_ep ---------------------------------------------------------------------------------


def deep_ep_owners(distributions: Iterable[metadata.Distribution]) -> dict[str, list[Path]]:
    """Distributions whose RECORD lists files under deep_ep/, with those files' paths."""
    owners: dict[str, list[Path]] = {}
    for dist in distributions:
        owned = [f for f in files(dist)[0] if f.parts and f.parts[0] == "deep_ep"]
        if owned:
            owners.setdefault(name_of(dist), []).extend(Path(str(dist.locate_file(f))) for f in owned)
    return owners


def unreadable_deep_ep_records(distributions: Iterable[metadata.Distribution]) -> dict[str, str]:
    """Distributions that would bring deep_ep (by name) whose RECORD cannot be read: what is wrong."""
    names = {canonicalize_name(name) for name in DEEP_EP_PROVIDERS}
    return {
        name_of(dist): problem
        for dist in distributions
        if canonicalize_name(name_of(dist)) in names and (problem := files(dist)[1])
    }


def check_deep_ep_owner(
    owners: Mapping[str, list[Path]], unreadable: Mapping[str, str] | None = None
) -> Check:
    names = ", ".join(sorted(owners))
    if unreadable:
        return Check(
            component="deep_ep owner",
            expected="1 distribution",
            found=names or "unknown",
            verdict="mismatch",
            detail="; ".join(f"{name}: {problem}" for name, problem in sorted(unreadable.items())),
        )
    if not owners:
        return Check(component="deep_ep owner", expected="1 distribution", found="none", verdict="missing")
    if len(owners) > 1:
        return Check(
            component="deep_ep owner",
            expected="1 distribution",
            found=names,
            verdict="mismatch",
            detail=f"{len(owners)} distributions own deep_ep files; keep only the one built from DEEPEP_REF",
        )
    return Check(component="deep_ep owner", expected="1 distribution", found=names, verdict="ok")


def check_deep_ep_source(pins: Expected, manifest: Path) -> Check:
    """The build-time manifest records the repo and commit deep_ep was built from."""
    expected = f"{pins.deepep_repo}@{pins.deepep_ref[:12]}"
    if not manifest.exists():
        return Check(
            component="deep_ep source",
            expected=expected,
            found="no manifest",
            verdict="missing",
            detail=str(manifest),
        )
    try:
        source = DEEPEP_MANIFEST.read(manifest)
    except BadInput as exc:
        return Check(
            component="deep_ep source",
            expected=expected,
            found="unreadable manifest",
            verdict="mismatch",
            detail=str(exc),
        )
    same = source.repo == pins.deepep_repo and source.commit == pins.deepep_ref
    return Check(
        component="deep_ep source",
        expected=expected,
        found=f"{source.repo}@{source.commit[:12]}",
        verdict="ok" if same else "mismatch",
        detail=f"{manifest}; TORCH_CUDA_ARCH_LIST={source.torch_cuda_arch_list}",
    )


def _patch_files(patches: Iterable[str]) -> str:
    return ", ".join(patch.split("#")[0].rsplit("/", 1)[-1] for patch in patches) or "none"


def check_deep_ep_patches(pins: Expected, manifest: Path) -> Check:
    """The patches applied at build time (the manifest) are the ones the image's pins name."""
    component, expected = "deep_ep patches", pins.deepep_patches
    try:
        found = DEEPEP_MANIFEST.read(manifest).patches
    except BadInput as exc:
        detail = str(exc)
        return Check(component=component, expected="-", found="no manifest", verdict="skipped", detail=detail)
    if expected is None:
        detail = "pins.env names no fabric: the image's deepep.pins.env does"
        return Check(
            component=component, expected="-", found=_patch_files(found), verdict="skipped", detail=detail
        )
    return Check(
        component=component,
        expected=_patch_files(expected),
        found=_patch_files(found),
        verdict="ok" if found == expected else "mismatch",
        detail=str(manifest),
    )


def check_elastic_buffer(owners: Mapping[str, list[Path]]) -> Check:
    """`import deep_ep` works and has ElasticBuffer (DeepEP V2); imported only when installed."""
    if not owners:
        return Check(
            component="deep_ep.ElasticBuffer",
            expected="importable",
            found="deep_ep not installed",
            verdict="missing",
        )
    module, error = _try_import("deep_ep")
    if module is None:
        return Check(
            component="deep_ep.ElasticBuffer",
            expected="importable",
            found="import failed",
            verdict="mismatch",
            detail=error,
        )
    has = hasattr(module, "ElasticBuffer")
    return Check(
        component="deep_ep.ElasticBuffer",
        expected="importable",
        found="importable" if has else "absent",
        verdict="ok" if has else "mismatch",
    )


def check_libstdcxx(shared_object: Path | None) -> Check:
    """A _C.so exporting libstdc++ definitions interposes them: DeepEP's JIT segfaults on first dispatch."""
    component, expected = "deep_ep _C.so libstdc++", "no libstdc++ exports"
    if shared_object is None:
        return Check(component=component, expected=expected, found="no _C.so", verdict="missing")
    try:
        symbols = libstdcxx_interposition(shared_object)
    except EpstackError as exc:
        return Check(component=component, expected=expected, found="-", verdict="skipped", detail=str(exc))
    if not symbols:
        return Check(
            component=component, expected=expected, found="none", verdict="ok", detail=str(shared_object)
        )
    example = interposition_example(symbols)
    return Check(
        component=component,
        expected=expected,
        found=f"{len(symbols)} exported (e.g. {example})",
        verdict="mismatch",
        detail=f"{shared_object} was built with a mismatched toolchain; fix: {LIBSTDCXX_FIX}",
    )


def check_nccl_link(extension: Path | None, maps_text: str) -> Check:
    """The libnccl deep_ep/_C.so resolves to (its rpath: the pinned wheel's) is the one the process
    loaded; two NCCLs in one process, or DeepEP's calls landing in another, break its GIN setup."""
    component, loaded = "deep_ep NCCL link", mapped_libraries(maps_text, "libnccl.so")
    expected = os.path.realpath(loaded[0]) if loaded else "the loaded libnccl"
    if extension is None:
        return Check(component=component, expected=expected, found="no _C.so", verdict="missing")
    try:
        linked = linked_library(extension, "libnccl.so")
    except EpstackError as exc:
        return Check(component=component, expected=expected, found="-", verdict="skipped", detail=str(exc))
    if linked is None or not loaded:
        found = "no libnccl resolved" if linked is None else os.path.realpath(linked)
        return Check(
            component=component, expected=expected, found=found, verdict="missing", detail=str(extension)
        )
    found = os.path.realpath(linked)
    verdict: Verdict = "ok" if found == expected else "mismatch"
    return Check(component=component, expected=expected, found=found, verdict=verdict, detail=str(extension))


def check_jit_prerequisites(env: Mapping[str, str], nccl_header: Path | None) -> list[Check]:
    """DeepEP V2 JITs its kernels at run time: nvcc, cuobjdump, CUDA and NCCL headers, a writable cache."""
    cuda_home = Path(env.get("CUDA_HOME") or env.get("CUDA_PATH") or "/usr/local/cuda")
    rows = []
    for tool in ("nvcc", "cuobjdump"):
        local = cuda_home / "bin" / tool
        found = shutil.which(tool, path=env.get("PATH", "")) or (
            str(local) if os.access(local, os.X_OK) else None
        )
        rows.append(
            Check(
                component=tool,
                expected="on PATH or $CUDA_HOME/bin",
                found=found or "not found",
                verdict="ok" if found else "missing",
            )
        )
    for component, header in (
        ("CUDA headers", cuda_home / "include" / "cuda.h"),
        ("NCCL headers", nccl_header),
    ):
        present = header is not None and header.is_file()
        rows.append(
            Check(
                component=component,
                expected="present",
                found=str(header) if present else "not found",
                verdict="ok" if present else "missing",
            )
        )
    cache = Path(env.get("EP_JIT_CACHE_DIR") or Path(env.get("HOME", "~")).expanduser() / ".deep_ep")
    existing = next(p for p in (cache, *cache.parents) if p.exists())
    writable = os.access(existing, os.W_OK | os.X_OK) and existing.is_dir()
    rows.append(
        Check(
            component="EP_JIT_CACHE_DIR",
            expected="writable",
            found=str(cache),
            verdict="ok" if writable else "mismatch",
            detail="" if writable else f"{existing} is not a writable directory",
        )
    )
    return rows


# ---- collecting and reporting ----------------------------------------------------------------


def _try_import(name: str) -> tuple[ModuleType | None, str]:
    try:
        return importlib.import_module(name), ""
    except Exception as exc:  # an import can fail any way (ImportError, OSError from a .so, ...)
        return None, f"{type(exc).__name__}: {exc}"


def _read_maps() -> str:
    return Path("/proc/self/maps").read_text()


def _package_file(distribution: str, name: str) -> Path | None:
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return None
    return next((Path(str(dist.locate_file(f))) for f in files(dist)[0] if f.name == name), None)


def python_checks(pins: Expected) -> list[Check]:
    wheels = pins.wheels
    return [
        check_distribution(wheels.nccl, pins.nccl_version),
        check_distribution(wheels.nvshmem, pins.nvshmem_version),
        check_nvshmem_headers(pins.nvshmem_version, _package_file(wheels.nvshmem, "nvshmem_version.h")),
        *release_wheel_checks(pins.cuda_major_minor, wheels, pins.cuda_exceptions),
        other_major_check(wheels.major, metadata.distributions()),
    ]


def base_checks(pins: Expected) -> list[Check]:
    torch, error = _try_import("torch") if find("torch") else (None, "torch not installed")
    return [
        check_distribution("torch", pins.torch_version),
        check_torch_cuda(pins, torch, error),
        *check_requirements("torch", pins.base_packages),
        check_nccl_loaded(pins.nccl_version, _read_maps()),
        *check_cuda(pins, torch, _read_maps),
        *cuda_home_checks(pins.cuda_major_minor, cuda_home(os.environ)),
        *jit_rows("base", os.environ),
    ]


def deepep_checks(pins: Expected) -> list[Check]:
    distributions = list(metadata.distributions())
    owners = deep_ep_owners(distributions)
    extensions = [p for paths in owners.values() for p in paths if re.match(r"^_C\..*so$", p.name)]
    manifest = manifest_path()
    return [
        check_deep_ep_source(pins, manifest),
        check_deep_ep_patches(pins, manifest),
        check_deep_ep_owner(owners, unreadable_deep_ep_records(distributions)),
        check_elastic_buffer(owners),
        check_nccl_link(extensions[0] if extensions else None, _read_maps()),
        check_libstdcxx(extensions[0] if extensions else None),
        *check_jit_prerequisites(os.environ, _package_file(pins.wheels.nccl, "nccl.h")),
        *jit_rows("deepep", os.environ),
    ]


def sglang_checks(pins: Expected) -> list[Check]:
    return [
        check_distribution("sglang", pins.sglang_version),
        *check_requirements("sglang", pins.base_packages),
        *jit_rows("sglang", os.environ),
    ]


# ---- every distribution against the locks ----------------------------------------------------

_DISTRIBUTION_VERDICT: dict[closure.Verdict, Verdict] = {
    "ok": "ok",
    "missing": "missing",
    "extra": "extra",
    "other version": "mismatch",
}
_GROUPS: tuple[closure.Verdict, ...] = ("missing", "extra", "other version")


def check_closure(distributions: list[closure.Distribution], files: list[str]) -> list[Check]:
    """A summary row, then one row per distribution that is missing, extra or at another version,
    grouped in that order (an image of 200 distributions does not print 200 ok rows)."""
    failing = {group: [d for d in distributions if d.verdict == group] for group in _GROUPS}
    locked = sum(1 for d in distributions if d.locked)
    present = sum(1 for d in distributions if d.installed)
    counts = ", ".join(f"{len(rows)} {group}" for group, rows in failing.items() if rows)
    sources = ", ".join(Path(file).name for file in files)
    rows = [
        Check(
            component="Python distributions",
            expected=f"{locked} locked",
            found=f"{present} installed",
            verdict="mismatch" if counts else "ok",
            detail=f"{counts} (rows below; all in --json); {sources}" if counts else f"exactly {sources}",
        )
    ]
    for group in _GROUPS:
        rows += [
            Check(
                component=d.name,
                expected=d.locked or "in no lock",
                found=d.installed or "not installed",
                verdict=_DISTRIBUTION_VERDICT[group],
                detail=d.source,
            )
            for d in failing[group]
        ]
    return rows


def closure_report(layer: str, locks: Path) -> tuple[list[Check], list[closure.Distribution]]:
    """The venv's distributions against the locks of `layer` (and the deep_ep manifest above base)."""
    manifest = manifest_path()
    want, files = closure.expected(layer, locks, manifest)
    distributions = closure.compare(want, closure.installed(closure.venv_paths()))
    return check_closure(distributions, files), distributions


# The checks of each guard scope (epstack.layers.GUARD_SCOPES, in the same order).
SCOPE_CHECKS: dict[str, Callable[[Expected], list[Check]]] = {
    "python": python_checks,
    "base": base_checks,
    "deepep": deepep_checks,
    "sglang": sglang_checks,
}


def run_guard(pins_path: Path, layer: str, locks: Path | None = None) -> GuardReport:
    """The checks of `layer` and every layer below it ("all": every layer); with `locks`, every
    distribution of the venv against the layer's locks too."""
    scopes, owner = guard_scopes(layer)
    selected = [scope.name for scope in scopes]
    pins = load_expected(pins_path, selected)
    checks = [replace(check, layer=name) for name in selected for check in SCOPE_CHECKS[name](pins)]
    distributions: list[closure.Distribution] = []
    if locks is not None and scopes[-1].closure:
        rows, distributions = closure_report(owner.name, locks)
        checks += [replace(row, layer=owner.name) for row in rows]
    return GuardReport(pins=pins_path, layer=layer, checks=tuple(checks), distributions=tuple(distributions))


_STYLE: dict[Verdict, str] = {
    "ok": "green",
    "mismatch": "red",
    "missing": "red",
    "extra": "red",
    "fail": "red",
    "warn": "yellow",
    "skipped": "yellow",
    "override (pinned)": "cyan",
}


def cmd_guard(args: argparse.Namespace, console: Console) -> int:
    locks = args.locks or (Path(os.environ["EPSTACK_LOCKS"]) if os.environ.get("EPSTACK_LOCKS") else None)
    report = run_guard(pins_path(args.pins), args.layer, locks)
    table = Table(
        "layer", "component", "expected", "found", "verdict", "detail", title=f"epstack guard {args.layer}"
    )
    for column in table.columns:
        column.overflow = "fold"
    for check in report.checks:
        style = _STYLE[check.verdict]
        table.add_row(
            check.layer,
            escape(check.component),
            escape(check.expected),
            escape(check.found),
            f"[{style}]{check.verdict}[/]",
            escape(check.detail),
        )
    console.print(table)
    if args.json:
        write_file(args.json, report.to_json(), what="the --json report")
    failed = sum(check.failed for check in report.checks)
    console.print(
        f"[green]guard: ok[/] ({len(report.checks)} checks)"
        if report.ok
        else f"[red]guard: {failed} of {len(report.checks)} checks failed[/]"
    )
    return 0 if report.ok else 1


def register(subparsers: SubParsers) -> None:
    """Add `guard` to the top-level subcommands."""
    guard = subparsers.add_parser(
        "guard", parents=[PINS], help="compare what is installed and loaded with pins.env"
    )
    guard.add_argument(
        "--layer",
        choices=GUARD_CHOICES,
        default="all",
        help="check this layer and those below it (default all)",
    )
    guard.add_argument(
        "--locks",
        type=path_arg,
        help="also check every distribution of this Python against the layer's locks in this folder "
        "(default $EPSTACK_LOCKS, set in the images; none: no such check)",
    )
    guard.add_argument("--json", type=path_arg, metavar="FILE", help="also write the report as JSON")
    guard.set_defaults(func=cmd_guard)
