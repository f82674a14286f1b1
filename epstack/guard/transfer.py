"""The KV transfer engine of the sglang layer: NIXL at its pin, and the module SGLang imports loading the
build for the image's CUDA major (SGLang's prefill and decode servers run `from nixl._api import
nixl_agent`; the `nixl` distribution picks nixl_cu12 or nixl_cu13 by torch's CUDA)."""

from __future__ import annotations

from epstack.checkrow import Check, Verdict
from epstack.guard.distributions import check_distribution
from epstack.guard.expected import Expected
from epstack.guard.libraries import try_import
from epstack.python.distinfo import find

NIXL_MODULE = "nixl._api"  # what sglang/srt/disaggregation/nixl/conn.py imports (SGLang 0.5.23)


def nixl_checks(pins: Expected) -> list[Check]:
    """Both distributions at NIXL_VERSION, then the import."""
    build = pins.wheels.nixl
    return [
        check_distribution("nixl", pins.nixl_version),
        check_distribution(build, pins.nixl_version),
        check_nixl_import(build.replace("-", "_")),
    ]


def check_nixl_import(backend: str) -> Check:
    """`import nixl._api` works and is `backend`'s (nixl_cu13 in a CUDA 13 image); imported only when
    installed."""
    component, expected = f"{NIXL_MODULE} (SGLang's import)", f"{backend}._api"
    if find("nixl") is None:
        return Check(component=component, expected=expected, found="nixl not installed", verdict="missing")
    module, error = try_import(NIXL_MODULE)
    if module is None:
        return Check(
            component=component, expected=expected, found="import failed", verdict="mismatch", detail=error
        )
    found = module.__name__
    verdict: Verdict = "ok" if found == expected and hasattr(module, "nixl_agent") else "mismatch"
    return Check(component=component, expected=expected, found=found, verdict=verdict)
