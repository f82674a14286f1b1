"""Fill DeepEP's JIT cache ($EP_JIT_CACHE_DIR) with every kernel test_ep.py compiles, in parallel.

test_ep compiles its kernels on first use, one nvcc at a time, so an empty cache costs more than a
10-minute device call before all 144 modes have run. This runs test_ep's own modes in SHARDS
concurrent copies (each copy's ranks on the same GPUs, its own MASTER_PORT, `--skip-perf-test`),
shard k taking every SHARDS-th group of 6 consecutive modes (one group shares its kernels), so
the kernels compile side by side. The unmodified test_ep then runs against the filled cache.
The copy differs from test_ep.py only in enumerate_ep_modes, which keeps the shard's modes.

Usage: python -m benchmarks.elastic.warm_jit_cache DEEPEP_CHECKOUT [--shards 8] [--nproc 2]
       [--timeout 420] [--run-dir DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from epstack.smoke.supervise import RankCommand, supervise
from epstack.smoke.upstream import EXPECTED_MODES, parse

MODES_PER_GROUP = 6  # the event/stream variants of one kernel configuration
_ENUMERATE = "def enumerate_ep_modes():"
_SHARD_FILTER = f"""def enumerate_ep_modes():
    shard, shards = map(int, os.environ["EPSTACK_MODE_SHARD"].split("/"))
    for index, mode in enumerate(_enumerate_all_ep_modes()):
        if index // {MODES_PER_GROUP} % shards == shard:
            yield mode


def _enumerate_all_ep_modes():"""


def sharded_copy(test_ep: Path, dest: Path) -> Path:
    """test_ep.py with enumerate_ep_modes limited to $EPSTACK_MODE_SHARD ("k/n")."""
    source = test_ep.read_text()
    if source.count(_ENUMERATE) != 1 or not re.search(r"^import os$", source, re.MULTILINE):
        raise SystemExit(f"{test_ep}: no single `{_ENUMERATE}` (or no `import os`); this DeepEP differs")
    dest.write_text(source.replace(_ENUMERATE, _SHARD_FILTER))
    return dest


def cache_entries(cache_dir: Path) -> int:
    return sum(1 for p in (cache_dir / "cache").glob("kernel.*") if p.is_dir())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("deepep", type=Path, help="DeepEP checkout at the installed commit")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--nproc", type=int, default=2, help="ranks per shard (test_ep --num-processes)")
    parser.add_argument("--timeout", type=float, default=420.0)
    parser.add_argument("--run-dir", type=Path, default=Path("/tmp/epstack-jit-warm"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    cache_dir = Path(os.environ.get("EP_JIT_CACHE_DIR") or Path.home() / ".deep_ep")
    args.run_dir.mkdir(parents=True, exist_ok=True)
    script = sharded_copy(args.deepep / "tests" / "elastic" / "test_ep.py", args.run_dir / "test_ep_shard.py")
    before = cache_entries(cache_dir)
    commands = [
        RankCommand(
            rank=shard,
            argv=[sys.executable, str(script), "--num-processes", str(args.nproc), "--skip-perf-test"],
            env=os.environ
            | {
                "EPSTACK_MODE_SHARD": f"{shard}/{args.shards}",
                "MASTER_PORT": str(8361 + 17 * (shard + 1)),
                "PYTHONUNBUFFERED": "1",
            },
        )
        for shard in range(args.shards)
    ]
    # A failing shard does not stop the others: their kernels still reach the cache.
    outcome = supervise(commands, run_dir=args.run_dir, timeout_s=args.timeout, failure_grace_s=args.timeout)
    results = [(o, parse(o.log.read_text(errors="replace"), o.returncode)) for o in outcome.outcomes]
    modes = sum(r.modes for _, r in results)
    report = {
        "command": " ".join(["python -m benchmarks.elastic.warm_jit_cache", *sys.argv[1:]]),
        "passed": outcome.ok and modes == EXPECTED_MODES,
        "reason": outcome.reason,
        "elapsed_s": round(outcome.elapsed_s, 1),
        "modes": modes,
        "cache_dir": str(cache_dir),
        "cache_kernels_before": before,
        "cache_kernels_after": cache_entries(cache_dir),
        "shards": [
            {"shard": o.rank, "returncode": o.returncode, "modes": r.modes, "error": r.error}
            for o, r in results
        ],
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
