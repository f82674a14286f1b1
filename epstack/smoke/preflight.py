"""Before any rank starts: can this Python run the smoke at all? torch importable, a CUDA build of it,
enough GPUs for the ranks of this node, deep_ep importable. Each missing piece is one
EnvironmentProblem (exit 3) in words, instead of N ranks failing with N tracebacks.

`python -m epstack.smoke.preflight` prints what it found as JSON; the supervisor runs it as a child
(through epstack.cmd, with a timeout), so the supervisor itself never imports torch or touches a GPU.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import asdict, dataclass
from typing import Any

from epstack.cmd import run
from epstack.errors import CommandFailed, EnvironmentProblem

# How the supervisor asks; the CPU tests point it at a stub that reports a GPU host.
PROBE: tuple[str, ...] = (sys.executable, "-m", "epstack.smoke.preflight")
TIMEOUT_S = 300.0  # importing torch and counting GPUs: seconds, unless the driver hangs


@dataclass(frozen=True, kw_only=True)
class Found:
    """What the probe found in the Python the ranks will run."""

    python: str
    torch: str = ""  # version; "" when torch does not import
    torch_error: str = ""
    cuda: str = ""  # torch.version.cuda; "" for a CPU build
    gpus: int = 0  # torch.cuda.device_count()
    gpu_error: str = ""
    deep_ep: bool = False


def probe_here() -> Found:
    """Run in the ranks' Python: import torch, count GPUs, look for deep_ep (not imported)."""
    deep_ep = importlib.util.find_spec("deep_ep") is not None
    try:
        import torch  # type: ignore[import-not-found, unused-ignore]  # noqa: PLC0415
    except Exception as exc:  # an import can fail any way (ImportError, OSError from a .so, ...)
        return Found(python=sys.executable, torch_error=f"{type(exc).__name__}: {exc}", deep_ep=deep_ep)
    found = Found(python=sys.executable, torch=str(torch.__version__), cuda=str(torch.version.cuda or ""))
    try:
        gpus = int(torch.cuda.device_count())
    except Exception as exc:  # a broken driver raises from inside torch.cuda
        return Found(**(asdict(found) | {"gpu_error": f"{type(exc).__name__}: {exc}", "deep_ep": deep_ep}))
    return Found(**(asdict(found) | {"gpus": gpus, "deep_ep": deep_ep}))


def probe() -> Found:
    """Run the probe (PROBE) as a child process and read its JSON line."""
    try:
        result = run(*PROBE, echo=False, timeout=TIMEOUT_S)
    except CommandFailed as exc:  # still running at the timeout: a hung driver, as a rule
        raise EnvironmentProblem(f"{exc}; fix: check the NVIDIA driver (nvidia-smi) on this host") from None
    try:
        data: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
        return Found(**data)
    except (ValueError, IndexError, TypeError):
        detail = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
        raise EnvironmentProblem(
            f"`{result.command}` could not check the Python the ranks run ({detail}); "
            "fix: run the smoke with the image's Python"
        ) from None


def require(found: Found, *, local_ranks: int, first_local_rank: int, need_deep_ep: bool) -> None:
    """EnvironmentProblem, in words, for the first thing that keeps the ranks from running."""
    where = f"in {found.python}"
    if not found.torch:
        raise EnvironmentProblem(
            f"torch does not import {where} ({found.torch_error}); "
            "fix: run the smoke in the image, or in a venv with the pinned torch"
        )
    if not found.cuda:
        raise EnvironmentProblem(
            f"torch {found.torch} {where} is a CPU build (torch.version.cuda is None); "
            "fix: install the pinned CUDA build of torch (TORCH_CUDA_TAG)"
        )
    if found.gpu_error or found.gpus == 0:
        why = found.gpu_error or "torch.cuda.device_count() is 0"
        raise EnvironmentProblem(
            f"no GPU visible {where} ({why}); fix: run on a GPU host with the NVIDIA driver "
            "(docker run --gpus all), and check CUDA_VISIBLE_DEVICES"
        )
    if first_local_rank + local_ranks > found.gpus:
        raise EnvironmentProblem(
            f"this node's ranks need GPUs {first_local_rank}..{first_local_rank + local_ranks - 1} but "
            f"{found.gpus} are visible; fix: start at most {found.gpus} ranks per node (--gpus-per-node)"
        )
    if need_deep_ep and not found.deep_ep:
        raise EnvironmentProblem(
            f"deep_ep is not installed {where}; fix: run the smoke in the deepep or sglang image, "
            "or install DeepEP (epstack image deepep-build)"
        )


def main() -> int:
    print(json.dumps(asdict(probe_here())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
