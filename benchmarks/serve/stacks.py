"""Where a serving start spends its seconds: the samples stack_sampler/sitecustomize.py wrote, as a
timeline per process (which code ran most in each bucket of seconds) and the code that ran longest.

    python -m benchmarks.serve.stacks FOLDER [--bucket-s 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# Frames of waiting, not working: a thread whose top frame is one of these is idle.
IDLE = re.compile(
    r"/(threading|queue|selectors|socket|multiprocessing/connection|asyncio/\w+|concurrent/futures/\w+"
    r"|tqdm/_monitor)\.py"
)
FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
SITE = re.compile(r".*/(site-packages|sgl|dist-packages|lib/python3\.\d+)/")


@dataclass(frozen=True)
class Sample:
    at: float
    argv: str
    busy: tuple[str, ...]  # each busy thread's top frames, shortened


def idle(frames: list[str]) -> bool:
    """Waiting on nothing of the start's: an idle top frame, unless the wait is for a child process
    (a compiler that subprocess.run waits on in selectors is work)."""
    return bool(IDLE.search(frames[0])) and not any("/subprocess.py" in frame for frame in frames[:4])


def short(frame: str) -> str:
    match = FRAME.search(frame)
    if not match:
        return frame.strip()
    return f"{SITE.sub('', match['file'])}:{match['line']} {match['func']}"


def samples(path: Path, depth: int = 6) -> list[Sample]:
    """One file's samples: the top `depth` frames of each thread that is not idle or the sampler."""
    found: list[Sample] = []
    for block in path.read_text(errors="replace").split("@@ ")[1:]:
        head, _, body = block.partition("\n")
        at, _, argv = head.partition(" ")
        busy = []
        for thread in re.split(r"\n(?=(?:Current thread|Thread) 0x)", body):
            frames = [line for line in thread.splitlines()[1:] if "File " in line]
            if not frames or "sitecustomize.py" in frames[0] or idle(frames):
                continue
            busy.append(" < ".join(short(f) for f in frames[:depth]))
        found.append(Sample(float(at), argv, tuple(busy)))
    return found


def gaps(found: list[Sample], over_s: float = 3.0) -> list[dict[str, object]]:
    """Spans with no sample: a C call held the GIL (the sampler needs it between dumps); the sample
    before a gap shows the Python line that made the call."""
    return [
        {
            "at": round(before.at, 1),
            "seconds": round(after.at - before.at, 1),
            "before": list(before.busy),
            "after": list(after.busy),
        }
        for before, after in itertools.pairwise(found)
        if after.at - before.at > over_s
    ]


def timeline(folder: Path, bucket_s: float = 5.0, gap_s: float = 3.0) -> dict[str, object]:
    """Per process (pid and argv): for each bucket, the busiest stack and its share; and the stacks
    with the most samples over the whole start."""
    files = sorted(folder.glob("*.txt"))
    per_pid = {path.stem: samples(path) for path in files}
    start = min((s[0].at for s in per_pid.values() if s), default=0.0)
    processes = {}
    for pid, found in per_pid.items():
        if not found:
            continue
        buckets: dict[int, Counter[str]] = {}
        total: Counter[str] = Counter()
        for sample in found:
            index = int((sample.at - start) // bucket_s)
            counter = buckets.setdefault(index, Counter())
            for stack in sample.busy or ("(idle)",):
                counter[stack] += 1
                total[stack] += 1
        processes[pid] = {
            "argv": found[0].argv,
            "first_s": round(found[0].at - start, 1),
            "last_s": round(found[-1].at - start, 1),
            "timeline": [
                {
                    "from_s": index * bucket_s,
                    "top": counter.most_common(1)[0][0],
                    "share": round(counter.most_common(1)[0][1] / sum(counter.values()), 2),
                }
                for index, counter in sorted(buckets.items())
            ],
            "most_sampled": total.most_common(12),
            "gaps": gaps(found, gap_s),
        }
    return {"start": start, "bucket_s": bucket_s, "processes": processes}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folder", type=Path)
    parser.add_argument("--bucket-s", type=float, default=5.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = timeline(args.folder, args.bucket_s)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    for pid, process in result["processes"].items():  # type: ignore[attr-defined]
        print(f"== {pid} {process['argv'][:100]} ({process['first_s']}-{process['last_s']} s)")
        for row in process["timeline"]:
            print(f"  {row['from_s']:6.0f} s {row['share']:4.0%}  {row['top'][:150]}")
        for gap in process["gaps"]:
            at = gap["at"] - result["start"]
            print(f"  gap of {gap['seconds']} s at {at:.0f} s after {gap['before']}, then {gap['after']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
