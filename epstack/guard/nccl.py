"""The version of an NCCL: a source tree (what its makefiles/version.mk declares), a built library (its
own ncclGetVersion) or the libnccl torch loads. `epstack image nccl-check` compares them with the pins.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from epstack.errors import BadInput, EnvironmentProblem
from epstack.guard.libraries import check_nccl_loaded
from epstack.guard.loaded import nccl_version
from epstack.inputs import read_text

_VERSION_MK = re.compile(r"^NCCL_(MAJOR|MINOR|PATCH)\s*:=\s*(\d+)\s*$", re.MULTILINE)


def source_version(tree: Path) -> str:
    """The version an NCCL source tree declares (makefiles/version.mk), e.g. 2.30.7."""
    found = sorted(tree.glob("makefiles/version.mk")) or sorted(tree.glob("*/makefiles/version.mk"))
    if not found:
        raise BadInput(f"{tree}: no makefiles/version.mk; fix: pass an NCCL source tree")
    parts = dict(_VERSION_MK.findall(read_text(found[0], what="NCCL's version.mk")))
    if set(parts) != {"MAJOR", "MINOR", "PATCH"}:
        raise BadInput(f"{found[0]}: no NCCL_MAJOR/MINOR/PATCH; fix: pass an NCCL source tree")
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"


def library_version(library: Path) -> str:
    try:
        return nccl_version(library)
    except (OSError, AttributeError) as exc:
        raise BadInput(f"{library}: not a loadable libnccl ({exc}); fix: pass the built libnccl.so") from None


def loaded_version(expected: str) -> tuple[str, str]:
    """(version, path) of the libnccl mapped after `import torch`, as the guard reads it."""
    try:
        importlib.import_module("torch")
    except Exception as exc:  # an import can fail any way
        raise EnvironmentProblem(f"import torch failed ({type(exc).__name__}: {exc})") from None
    row = check_nccl_loaded(expected, Path("/proc/self/maps").read_text())
    return row.found, row.detail
