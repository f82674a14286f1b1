"""Evidence for installing vLLM over the pinned torch: which torch symbols its native libraries import.

    python -m benchmarks.vllm.torch_abi --torch TORCH_WHEEL WHEEL... [--out FILE]

For every shared library inside each WHEEL that names a torch library (libtorch*.so, libc10*.so) as
NEEDED, the dynamic symbols it imports (`nm -D --undefined-only`, demangled), sorted into:
- stable: torch's stable C ABI, the unmangled `aoti_torch_*` / `torch_*` shims (torch/csrc/stable,
  torch/csrc/inductor/aoti_torch/c/shim.h), which torch keeps across releases;
- cxx: C++ symbols of at::, c10::, torch:: or caffe2:: (their vtables and typeinfo too), which
  change between torch builds and tie a library to the torch it was built against;
and, for each, whether TORCH_WHEEL's libraries (torch/lib/*.so) export it. A library whose torch
imports are all stable and all exported loads against that torch; a cxx import is the risk an
override takes. Writes JSON (default benchmarks/vllm/results/torch-abi.json) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import zipfile
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from epstack.cmd import run

RESULTS = Path(__file__).resolve().parent / "results" / "torch-abi.json"
_TORCH_LIB = re.compile(r"^lib(torch|c10)[\w]*\.so")
_STABLE = re.compile(r"^(aoti_torch_|torch_)\w+$")
_CXX = re.compile(r"^(?:(?:vtable|typeinfo|typeinfo name|VTT) for )?(?:at|c10|torch|caffe2)::")


@dataclass(kw_only=True)
class Library:
    path: str  # inside its wheel
    needs: list[str]  # its NEEDED torch libraries
    stable: int
    cxx: int
    unresolved: list[str] = field(default_factory=list)  # torch imports TORCH_WHEEL does not export


@dataclass(kw_only=True)
class Wheel:
    wheel: str
    requires_torch: list[str]
    libraries: list[Library]


def _symbols(path: Path, *flags: str) -> set[str]:
    done = run("nm", "-D", "--demangle", *flags, path, echo=False, timeout=300)
    names = set()
    for line in done.stdout.splitlines():
        parts = line.split(maxsplit=2) if flags == ("--defined-only",) else line.split(maxsplit=1)
        if parts:
            names.add(parts[-1].split("@", 1)[0].strip())
    return names


def _needed(path: Path) -> list[str]:
    done = run("readelf", "-d", path, echo=False, timeout=60)
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", done.stdout)


def _unpacked(wheel: Path, into: Path) -> list[Path]:
    with zipfile.ZipFile(wheel) as archive:
        members = [name for name in archive.namelist() if re.search(r"\.so(\.\d+)*$", name)]
        for name in members:
            archive.extract(name, into)
    return [into / name for name in members]


def _requires_torch(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        text = archive.read(metadata).decode()
    return re.findall(r"^Requires-Dist: (torch\b[^\n]*)$", text, flags=re.MULTILINE)


def torch_exports(wheel: Path, into: Path) -> set[str]:
    """Every dynamic symbol torch/lib/*.so of `wheel` defines."""
    exported: set[str] = set()
    for library in _unpacked(wheel, into):
        if library.parent.name == "lib" and _TORCH_LIB.match(library.name):
            exported |= _symbols(library, "--defined-only")
    return exported


def scan(wheel: Path, exported: set[str], into: Path) -> Wheel:
    libraries = []
    for path in sorted(_unpacked(wheel, into)):
        needs = [name for name in _needed(path) if _TORCH_LIB.match(name)]
        if not needs:
            continue
        imported = _symbols(path, "--undefined-only")
        torch_imports = {name for name in imported if _STABLE.match(name) or _CXX.match(name)}
        libraries.append(
            Library(
                path=str(path.relative_to(into)),
                needs=needs,
                stable=sum(1 for name in torch_imports if _STABLE.match(name)),
                cxx=sum(1 for name in torch_imports if _CXX.match(name)),
                unresolved=sorted(torch_imports - exported),
            )
        )
    return Wheel(wheel=wheel.name, requires_torch=_requires_torch(wheel), libraries=libraries)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", type=Path, required=True, help="the pinned torch wheel")
    parser.add_argument("wheels", type=Path, nargs="+")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="torch-abi-") as tmp:
        exported = torch_exports(args.torch, Path(tmp) / "torch")
        wheels = [scan(wheel, exported, Path(tmp) / wheel.name) for wheel in args.wheels]
    linked = [w for w in wheels if w.libraries]
    libraries = [library for w in linked for library in w.libraries]
    report = {
        "measured": datetime.now(UTC).date().isoformat(),
        "command": "python -m benchmarks.vllm.torch_abi --torch " + args.torch.name + " WHEEL...",
        "torch_wheel": args.torch.name,
        "torch_exports": len(exported),
        "wheels_scanned": sorted(w.wheel for w in wheels),
        "libraries_linking_torch": len(libraries),
        "libraries_with_cxx_imports": sum(1 for library in libraries if library.cxx),
        "unresolved_imports": sum(len(library.unresolved) for library in libraries),
        "wheels": [asdict(w) for w in linked],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for w in linked:
        for library in w.libraries:
            print(f"{w.wheel.split('-')[0]:<18} {library.path:<58} stable {library.stable:>3}  "
                  f"c++ {library.cxx:>3}  unresolved {len(library.unresolved)}")  # fmt: skip
    print(f"{len(libraries)} libraries link torch; {report['libraries_with_cxx_imports']} import C++ "
          f"symbols; {report['unresolved_imports']} imports {args.torch.name} does not export")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
