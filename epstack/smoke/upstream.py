"""DeepEP's own tests/elastic/test_ep.py, run in the same stack; its verdict and bandwidth parsed.

test_ep spawns its ranks itself (`--num-processes N`), asserts on any mismatch, and prints one
`> Testing with ...` line per mode (144 in all) and, per rank and mode, lines such as
`   * EP:   0/2 | dispatch: 0 GB/s (SO), 585 GB/s (SU), 103.000 us, ... bytes | copy: ...`
(`*` dispatch, `@` combine; `-` expanded, `#` cached dispatch, `+` reduced combine).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from epstack import host
from epstack.errors import BadInput
from epstack.smoke.supervise import RankCommand, supervise

EXPECTED_MODES = 144  # 2 handle-copy x 2 alignments x 2 fp8 x 3 bias x 6 event/stream combos

_MODE = re.compile(r"^\s*> Testing with (.*?) \.\.\.\s*$")
_PERF = re.compile(
    r"^\s*(?P<mark>[*\-#@+]) EP:\s*(?P<rank>\d+)/(?P<ranks>\d+) \| (?P<op>[a-z ]+): "
    r"(?P<so>[\d.]+) GB/s \(SO\), (?P<su>[\d.]+) GB/s \(SU\), (?P<us>[\d.]+) us"
)
_OPS = {
    "*": "dispatch",
    "-": "expanded_dispatch",
    "#": "cached_dispatch",
    "@": "combine",
    "+": "reduced_combine",
}


@dataclass(frozen=True, kw_only=True)
class PerfLine:
    mode: int  # index of the mode it belongs to (0 = the first, fp8 dispatch)
    op: str
    rank: int
    so_gbps: float
    su_gbps: float
    us: float


@dataclass(frozen=True, kw_only=True)
class UpstreamResult:
    returncode: int | None
    modes: int
    mode_names: list[str]
    perf: list[PerfLine] = field(default_factory=list)
    error: str = ""
    elapsed_s: float = 0.0
    expected_modes: int = EXPECTED_MODES  # 1 with --test-first-only

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and self.modes == self.expected_modes

    def first_mode(self, op: str) -> dict[str, float]:
        """The first mode's figures for `op` (what the 585/605 GB/s references are): per-rank
        mean of SU GB/s and of µs."""
        lines = [p for p in self.perf if p.mode == 0 and p.op == op]
        if not lines:
            return {}
        return {
            "su_gbps": sum(p.su_gbps for p in lines) / len(lines),
            "us": sum(p.us for p in lines) / len(lines),
            "ranks": len(lines),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "returncode": self.returncode,
            "modes": self.modes,
            "expected_modes": self.expected_modes,
            "elapsed_s": self.elapsed_s,
            "error": self.error,
            "first_mode": self.mode_names[0] if self.mode_names else "",
            "first_mode_dispatch": self.first_mode("dispatch"),
            "first_mode_combine": self.first_mode("combine"),
            "perf_lines": len(self.perf),
        }


def parse(output: str, returncode: int | None) -> UpstreamResult:
    modes: list[str] = []
    perf: list[PerfLine] = []
    error = ""
    for line in output.splitlines():
        if m := _MODE.match(line):
            modes.append(m.group(1))
        elif (p := _PERF.match(line)) and modes:
            perf.append(
                PerfLine(
                    mode=len(modes) - 1,
                    op=_OPS[p.group("mark")],
                    rank=int(p.group("rank")),
                    so_gbps=float(p.group("so")),
                    su_gbps=float(p.group("su")),
                    us=float(p.group("us")),
                )
            )
        elif re.search(r"(AssertionError|Error|Exception)\b.*", line) and not error:
            error = line.strip()
    return UpstreamResult(returncode=returncode, modes=len(modes), mode_names=modes, perf=perf, error=error)


def run(
    checkout: Path,
    *,
    nproc: int,
    timeout_s: float,
    run_dir: Path,
    env: Mapping[str, str] | None = None,
    extra: tuple[str, ...] = (),
) -> UpstreamResult:
    """Run test_ep.py from a DeepEP checkout against the installed deep_ep, in its own group."""
    script = checkout / "tests" / "elastic" / "test_ep.py"
    if not script.is_file():
        raise BadInput(f"{script}: not found; pass --upstream-tests a DeepEP checkout")
    full_env = dict(os.environ if env is None else env) | {"PYTHONUNBUFFERED": "1"}
    full_env.setdefault(
        "EP_DISABLE_GIN",
        "0" if host.rdma_devices() else "1",
    )
    outcome = supervise(
        [
            RankCommand(
                rank=0,
                argv=[sys.executable, str(script), "--num-processes", str(nproc), *extra],
                env=full_env,
            )
        ],
        run_dir=run_dir,
        timeout_s=timeout_s,
    )
    only = outcome.outcomes[0]
    result = parse(only.log.read_text(errors="replace"), only.returncode)
    return UpstreamResult(
        returncode=result.returncode,
        modes=result.modes,
        mode_names=result.mode_names,
        perf=result.perf,
        error=result.error or ("" if outcome.ok else outcome.reason),
        elapsed_s=outcome.elapsed_s,
        expected_modes=1 if "--test-first-only" in extra else EXPECTED_MODES,
    )
