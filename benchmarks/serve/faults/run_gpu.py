"""The serve smoke's power on a GPU host (issue 45): the healthy tiny profile passes, each fault injected into
DeepEP V2 (site/sitecustomize.py) fails the comparison, and the generated checkpoint's start-up against
SGLang's dummy weights. After the ferry and `epstack image deepep-build` (benchmarks/serve/README.md), from
the repository root, with the ferried stack on PYTHONPATH (PYTHONPATH=/opt/sgl:$PWD:/opt/epstack-deps):

    python3 -m benchmarks.serve.faults.run_gpu start [PHASE...]   # detached; default: healthy startup faults
    WAIT_S=560 python3 -m benchmarks.serve.faults.run_gpu wait    # until done or WAIT_S, results to $OUT

Phases, in the order named (one driver runs them one after another; a phase whose result is there is not
run again, so `start` after a lost call goes on where it stopped):
  healthy   the checkpoint written (benchmarks/serve/tiny_checkpoint.py: bytes, seconds, sha256), then
            `epstack smoke serve --profile tiny` with the sweep: exit 0, every level, no errors
  startup   launch to first answer with SGLang's dummy weights (`--load-format dummy`) and with the
            generated checkpoint, one start each, same flags, --no-compare --no-sweep: exit 0 each
  faults    `epstack smoke serve --no-sweep --reference <healthy's report>` (one server each: the healthy
            run's answers without DeepEP stand in for the second; none passed, two servers each): with
            EPSTACK_FAULT=zero, scale, permute (FAULTS to choose): exit 1, deepep-v2-vs-none failed, and
            the fault's line in the DeepEP server's log; then unfaulted (reference-healthy, exit 0: the
            recorded answers stand in)

Every run uses the same JIT caches (the environment's, by default each tool's own folder under $HOME), so
only the first start compiles. The driver runs from a copy of this tree in $WORK/src (a device call's copy is
replaced by the next call's). `wait` copies at most 8 files to $OUT/faults: run.json (every step: command,
exit, seconds, expected or not, the rows), the reports (healthy, reference-healthy, fault-zero,
fault-scale, fault-permute) and logs.tar.gz (server logs, consoles, sweep logs, the startup reports).
Settings: WORK (/tmp/faults), WAIT_S (540), FAULTS (zero,scale,permute), HEALTHY_LEVELS (the healthy
run's sweep, default 1,2,4,8,16,32,64), SERVE_ARGS (default
--sglang-arg=--attention-backend=triton: the ferried sglang-kernel has no FA3).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from benchmarks.elastic.h200.host import FIXED_ENVIRONMENT, NO_COMPILERS, Host

WORK = Path(os.environ.get("WORK", "/tmp/faults"))
SRC = WORK / "src"
RESULTS = WORK / "out"
SITE = Path("benchmarks/serve/faults/site")  # in SRC
PHASES = ("healthy", "startup", "faults")
FAULTS = ("zero", "scale", "permute")
REPORTS = ("healthy", "reference-healthy", *(f"fault-{fault}" for fault in FAULTS))  # the 8-file limit
SKIP_IN_COPY = shutil.ignore_patterns(
    ".git", ".venv", ".ferry", ".cache", "*_cache", "__pycache__", "results", "build"
)


def environment() -> dict[str, str]:
    """The host's, without its compilers (gpu-notes.md), with the GPU host's fixed settings, and this copy
    of the tree in front of PYTHONPATH."""
    env = {key: value for key, value in os.environ.items() if key not in NO_COMPILERS}
    paths = [
        str(SRC),
        *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(Path.cwd())),
    ]
    return env | FIXED_ENVIRONMENT | {"FLASHINFER_USE_CUDA_NORM": "1", "PYTHONPATH": os.pathsep.join(paths)}


def serve_args() -> list[str]:
    return os.environ.get("SERVE_ARGS", "--sglang-arg=--attention-backend=triton").split()


def rows(report: dict[str, Any]) -> dict[str, str]:
    """Each check row as `verdict: found` (the second server's under `none:`)."""
    seen: dict[str, str] = {}
    for row in report.get("checks", []):
        name = row["component"] if row["component"] not in seen else f"none:{row['component']}"
        seen[name] = f"{row['verdict']}: {row['found']}"
    return seen


def step(name: str, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """One command, its console in RESULTS/<name>.console; its exit and seconds."""
    began = time.monotonic()
    with (RESULTS / f"{name}.console").open("w") as console:
        code = subprocess.run(argv, env=env, stdout=console, stderr=subprocess.STDOUT, check=False).returncode
    return {"argv": argv, "exit": code, "seconds": round(time.monotonic() - began, 1)}


def smoke(name: str, extra: list[str], env: dict[str, str]) -> dict[str, Any]:
    """`epstack smoke serve --profile tiny` into RESULTS/<name>.json, its run folder WORK/<name>."""
    argv = [sys.executable, "-m", "epstack", "smoke", "serve", "--profile", "tiny"]
    argv += ["--model-cache", str(WORK / "models"), "--run-dir", str(WORK / name)]
    argv += ["--json", str(RESULTS / f"{name}.json"), *serve_args(), *extra]
    done = step(name, argv, env)
    path = RESULTS / f"{name}.json"
    report = json.loads(path.read_text()) if path.is_file() else {}
    runs = report.get("runs", [])
    return done | {
        "verdict": report.get("verdict"),
        "failure": report.get("failure"),
        "rows": rows(report),
        "launch_to_healthy_s": {run["a2a"]: run["launch_to_healthy_s"] for run in runs},
        "weights_loaded_s": {
            run["a2a"]: (run.get("startup") or {}).get("milestones_s", {}).get("weights_loaded")
            for run in runs
        },
        "sweep_levels": len(report.get("sweep", [])),
        "sweep_errors": sum(level["errors"] for level in report.get("sweep", [])),
        "comparison": {
            k: v for k, v in (report.get("comparison") or {}).items() if k not in ("through", "reference")
        },
    }


def healthy(env: dict[str, str]) -> dict[str, Any]:
    checkpoint = RESULTS / "checkpoint.json"
    argv = [sys.executable, "-m", "benchmarks.serve.tiny_checkpoint", str(checkpoint), str(WORK / "models")]
    written = step("checkpoint", argv, env)
    written["result"] = json.loads(checkpoint.read_text()) if checkpoint.is_file() else None
    levels = os.environ.get("HEALTHY_LEVELS", "1,2,4,8,16,32,64")
    served = smoke("healthy", ["--concurrency", levels], env)
    served["as_expected"] = (
        served["exit"] == 0
        and served["sweep_levels"] == len(levels.split(","))
        and served["sweep_errors"] == 0
    )
    return {"checkpoint": written, "healthy": served}


def startup(env: dict[str, str]) -> dict[str, Any]:
    quick = ["--no-compare", "--no-sweep"]
    dummy = smoke("startup-dummy", [*quick, "--sglang-arg=--load-format=dummy"], env)
    generated = smoke("startup-generated", quick, env)
    for each in (dummy, generated):
        each["as_expected"] = each["exit"] == 0
    return {"startup-dummy": dummy, "startup-generated": generated}


def faults(env: dict[str, str]) -> dict[str, Any]:
    chosen = [f for f in os.environ.get("FAULTS", ",".join(FAULTS)).split(",") if f]
    healthy_report = RESULTS / "healthy.json"
    passed = healthy_report.is_file() and json.loads(healthy_report.read_text()).get("verdict") == "pass"
    reference = ["--reference", str(healthy_report)] if passed else []
    results = {}
    for fault in chosen:
        name = f"fault-{fault}"
        faulted = env | {"EPSTACK_FAULT": fault, "PYTHONPATH": f"{SRC / SITE}{os.pathsep}{env['PYTHONPATH']}"}
        served = smoke(name, ["--no-sweep", *reference], faulted)
        log = WORK / name / "server-deepep_v2.log"
        served["fault_line"] = (
            next(
                (line for line in log.read_text(errors="replace").splitlines() if "epstack-fault:" in line),
                None,
            )
            if log.is_file()
            else None
        )
        served["as_expected"] = (
            served["exit"] == 1
            and served["rows"].get("deepep-v2-vs-none", "").startswith("fail")
            and served["fault_line"] is not None
        )
        results[name] = served
    if reference:  # last: where the device time runs out, the faults are what was asked for
        again = smoke("reference-healthy", ["--no-sweep", *reference], env)
        again["as_expected"] = again["exit"] == 0
        results["reference-healthy"] = again
    return results


def run(phases: list[str]) -> int:
    RESULTS.mkdir(parents=True, exist_ok=True)
    summary_path = RESULTS / "run.json"
    summary: dict[str, Any] = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    summary.setdefault("device", device())
    env = environment()
    for phase in phases:
        if phase in summary:
            continue  # done by an earlier driver
        began = time.monotonic()
        summary[phase] = {**{"healthy": healthy, "startup": startup, "faults": faults}[phase](env)}
        summary[phase]["phase_s"] = round(time.monotonic() - began, 1)
        summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    expected = [
        step.get("as_expected") for phase in PHASES if phase in summary for step in _steps(summary[phase])
    ]
    summary["all_as_expected"] = all(expected) and bool(expected)
    summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if summary["all_as_expected"] else 1


def _steps(phase: dict[str, Any]) -> list[dict[str, Any]]:
    return [value for value in phase.values() if isinstance(value, dict) and "as_expected" in value]


def device() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    found = subprocess.run(query, capture_output=True, text=True, check=False)
    return (found.stdout.strip() or None) if found.returncode == 0 else None


def start(phases: list[str]) -> int:
    if not SRC.is_dir():
        shutil.copytree(Path.cwd(), SRC, ignore=SKIP_IN_COPY, symlinks=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "benchmarks.serve.faults.run_gpu", "run", *phases]
    env = environment()
    os.chdir(SRC)  # the driver runs in its own copy (this process ends next)
    pid = Host.from_environment(os.environ).detach(
        argv, env=env, console=WORK / "driver.console", pid_file=WORK / "driver.pid"
    )
    print(f"run_gpu: {' '.join(phases)} detached as pid {pid}; `wait` for the results")
    return 0


def alive(pid: int) -> bool:
    """Running, not a zombie no init has reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def wait() -> int:
    pid = int((WORK / "driver.pid").read_text())
    deadline = time.monotonic() + float(os.environ.get("WAIT_S", "540"))
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(3)
    out = Path(os.environ.get("OUT", "out")) / "faults"
    out.mkdir(parents=True, exist_ok=True)
    for name in ("run", *REPORTS):
        if (RESULTS / f"{name}.json").is_file():
            shutil.copy(RESULTS / f"{name}.json", out / f"{name}.json")
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        for path in sorted(
            [
                *RESULTS.glob("*.console"),
                *RESULTS.glob("startup-*.json"),
                *WORK.glob("*/server-*.log"),
                *WORK.glob("*/sweep-*.log"),
            ]
        ):
            tar.add(path, arcname=str(path.relative_to(WORK)))
        if (WORK / "driver.console").is_file():
            tar.add(WORK / "driver.console", arcname="driver.console")
    summary = json.loads((RESULTS / "run.json").read_text()) if (RESULTS / "run.json").is_file() else {}
    print(
        json.dumps(
            {
                phase: {k: v.get("as_expected") for k, v in summary[phase].items() if isinstance(v, dict)}
                for phase in PHASES
                if phase in summary
            }
        )
    )
    print("still running" if alive(pid) else f"finished; all as expected: {summary.get('all_as_expected')}")
    return 0


def main(argv: list[str]) -> int:
    action, phases = (argv[0], argv[1:]) if argv else ("", [])
    if action in ("start", "run"):
        unknown = [p for p in phases if p not in PHASES]
        if unknown:
            print(
                f"run_gpu: unknown phase {unknown[0]!r}; fix: name phases from {', '.join(PHASES)}",
                file=sys.stderr,
            )
            return 2
        return (start if action == "start" else run)(phases or list(PHASES))
    if action == "wait":
        return wait()
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
