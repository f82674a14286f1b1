"""Samples every thread's Python stack of each process that starts with this folder on PYTHONPATH,
for benchmarks/serve/cold_start.py: where a serving start spends its seconds, by phase.

Only where EPSTACK_STACK_SAMPLES names a folder: every EPSTACK_STACK_EVERY_S seconds (default 1) for
EPSTACK_STACK_FOR_S seconds (default 400), faulthandler writes all threads' stacks to
<folder>/<pid>.txt after a line `@@ <unix time> <argv>`. faulthandler reads the frames without the GIL,
so a thread inside a long C call (a compile, a CUDA or NCCL call) shows the Python line that made it.
"""

import faulthandler
import os
import sys
import threading
import time


def _sample(folder: str, every: float, duration: float) -> None:
    end = time.monotonic() + duration
    with open(os.path.join(folder, f"{os.getpid()}.txt"), "a", buffering=1) as out:
        while time.monotonic() < end:
            out.write(f"@@ {time.time():.2f} {' '.join(sys.argv)[:200]}\n")
            faulthandler.dump_traceback(out, all_threads=True)
            time.sleep(every)


_folder = os.environ.get("EPSTACK_STACK_SAMPLES")
if _folder and os.path.isdir(_folder):
    threading.Thread(
        target=_sample,
        args=(
            _folder,
            float(os.environ.get("EPSTACK_STACK_EVERY_S", "1")),
            float(os.environ.get("EPSTACK_STACK_FOR_S", "400")),
        ),
        daemon=True,
        name="epstack-stack-sampler",
    ).start()
