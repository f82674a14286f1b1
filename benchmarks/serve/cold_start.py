"""A cold serving start with the image's shipped JIT caches against one with empty caches, same host,
same flags (issue: "A cold serving pod answers in seconds"), on a GPU host with the pinned stack
(benchmarks/serve/README.md says how it gets there).

    python -m benchmarks.serve.cold_start start     # detached: the whole run, under WORK (/tmp/cold)
    python -m benchmarks.serve.cold_start wait      # up to WAIT_S s, then the results to $OUT

The run: `epstack smoke serve --profile tiny --no-sweep --no-compare` with every cache empty; then
`epstack jit export` of what it compiled (every toolchain of epstack.jit.registry.EXPORTED: DeepEP's
kernels, DeepGEMM's, SGLang's own, Triton's), unpacked as the kernels layer does (`epstack image jit-unpack`,
read-only under $EPSTACK_HOME/jit) and copied by the entrypoint's own scripts/image/jit-caches.sh into
new, empty caches; the same serve smoke again. Every start's TRITON_CACHE_DIR is one path, TRITON (a
link to that start's own folder), as the image's is: Triton's group files name their files by absolute
path, so a kernel compiled under another folder would load from there, not from the copy. Inductor's
cache starts empty both times (the image does not ship it). What each start compiled is counted in its
caches afterwards. One JSON (`cold-start.json`) with `launch_to_first_answer_s`
under `empty` and `shipped`, each start's phases from its log, and the exports' sizes.

FlashInfer's modules ship as the image's build ships them (`jit probe --ship` with the GPU hidden, in the
workspace the shipped starts use). A third start, `warm` (unless COLD_WARM=0), adds every other cache
the empty start filled (Triton, Inductor, the driver's) to the shipped ones: the floor
that shipping every cache could reach. Each start's processes sample their Python stacks every second
(stack_sampler/, summarised by stacks.py into `<start>-stacks.json`): where the seconds go.
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

from benchmarks.serve import stacks
from epstack.jit import deepgemm, sglang, tritonserve
from epstack.jit.deepep import cache_files as deepep_files
from epstack.jit.registry import EXPORTED

WORK = Path(os.environ.get("WORK", "/tmp/cold"))
SERVE = ("--profile", "tiny", "--no-sweep", "--no-compare", "--sglang-arg=--attention-backend=triton")
EXPORTS = {name: chain.TOOL for name, chain in EXPORTED.items()}  # jit export's toolchain: shipped folder
SAMPLER = Path(__file__).resolve().parent / "stack_sampler"
# FlashInfer's modules are shipped as the sglang image's build ships them (`jit probe --ship`, no GPU),
# built in one workspace that the shipped and warm starts then use: its objects are named by path.
FLASHINFER_WORKSPACE = WORK / "flashinfer"
TRITON = WORK / "triton"  # every start's TRITON_CACHE_DIR: a link to <start>/sglang/triton


def caches(root: Path) -> dict[str, str]:
    """Every JIT cache a serve start writes, empty, under `root` (SGLang's own under SGLANG_CACHE_DIR;
    Triton's at TRITON, linked to root/sglang/triton from now on)."""
    sglang = root / "sglang"
    (sglang / "triton").mkdir(parents=True, exist_ok=True)
    TRITON.unlink(missing_ok=True)
    TRITON.symlink_to(sglang / "triton")
    env = {
        "SGLANG_CACHE_DIR": str(sglang),
        "SGLANG_DG_CACHE_DIR": str(sglang / "deep_gemm"),
        "TRITON_CACHE_DIR": str(TRITON),
        "FLASHINFER_WORKSPACE_BASE": str(sglang),
        "TORCHINDUCTOR_CACHE_DIR": str(sglang / "inductor"),
        "CUDA_CACHE_PATH": str(sglang / "nv"),
        "SGLANG_JIT_CACHE_DIR": str(
            sglang / "jit"
        ),  # else ~/.cache/sglang/jit, whatever SGLANG_CACHE_DIR says
        "EP_JIT_CACHE_DIR": str(root / "deep_ep"),
    }
    for folder in env.values():
        Path(folder).mkdir(parents=True, exist_ok=True)
    return env


def step(log: Any, what: str, *argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    began = time.monotonic()
    result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    log.write(f"+ {' '.join(argv)}\n{result.stdout}{result.stderr}[{what}: exit {result.returncode}, "
              f"{time.monotonic() - began:.1f} s]\n")  # fmt: skip
    log.flush()
    return result


def ship_flashinfer(log: Any, env: dict[str, str]) -> dict[str, Any]:
    """FlashInfer's modules (epstack.jit.flashinfer.MODULES) compiled with the GPU hidden and shipped
    under $EPSTACK_HOME/jit, as the sglang layer's guard step does."""
    began = time.monotonic()
    probe = ("jit", "probe", "--layer", "sglang", "--toolchain", "flashinfer", "--cuda-arch", "9.0a")
    report = (
        "--ship",
        "--ship-into",
        env["EPSTACK_HOME"] + "/jit",
        "--json",
        str(WORK / "flashinfer-ship.json"),
    )
    hidden = env | {"CUDA_VISIBLE_DEVICES": ""}
    made = step(log, "flashinfer ship", sys.executable, "-m", "epstack", *probe, *report, env=hidden)
    return {"exit": made.returncode, "seconds": round(time.monotonic() - began, 1)}


def entrypoint_copy(log: Any, env: dict[str, str]) -> float:
    """The entrypoint's copy of every shipped cache into a start's caches (FlashInfer's workspace first
    emptied: the last start filled it); its seconds."""
    shutil.rmtree(FLASHINFER_WORKSPACE, ignore_errors=True)
    FLASHINFER_WORKSPACE.mkdir(parents=True)
    began = time.monotonic()
    step(log, "entrypoint copy", "bash", "-euo", "pipefail", "-c", ". scripts/image/jit-caches.sh", env=env)
    return round(time.monotonic() - began, 3)


def serve(log: Any, name: str, env: dict[str, str]) -> dict[str, Any]:
    report = WORK / f"{name}.json"
    samples = WORK / name / "stacks"
    samples.mkdir(parents=True, exist_ok=True)
    env = env | {
        "EPSTACK_STACK_SAMPLES": str(samples),
        "PYTHONPATH": f"{SAMPLER}:{env.get('PYTHONPATH', '')}",
        "SGLANG_JIT_CACHE_DEBUG": "1",
    }
    began = time.monotonic()
    result = step(log, f"serve {name}", sys.executable, "-m", "epstack", "smoke", "serve", *SERVE,
                  "--run-dir", str(WORK / name / "run"), "--json", str(report), env=env)  # fmt: skip
    (WORK / f"{name}-stacks.json").write_text(json.dumps(stacks.timeline(samples), indent=1) + "\n")
    data = json.loads(report.read_text()) if report.is_file() else {}
    run = (data.get("runs") or [{}])[0]
    return {
        "exit": result.returncode,
        "verdict": data.get("verdict"),
        "wall_s": round(time.monotonic() - began, 1),
        "launch_to_first_answer_s": run.get("launch_to_healthy_s"),
        "startup": run.get("startup"),
        "report": report.name,
    }


def compiled(env: dict[str, str], shipped: Path | None) -> dict[str, object]:
    """What the start compiled into its caches: DeepGEMM's committed entries, DeepEP's kernels, SGLang's
    leaves and Triton's published kernels not shipped, and every folder Triton's cache holds (its
    launcher's too)."""
    manifest = deepgemm.read_manifest(shipped / "deep_gemm") if shipped else None
    dg = deepgemm.compiled_since(Path(env["SGLANG_DG_CACHE_DIR"]), manifest)
    ep_shipped = (
        set(deepep_files(shipped / "deep_ep")) if shipped and (shipped / "deep_ep").is_dir() else set()
    )
    ep = {Path(p).parent.name for p in deepep_files(Path(env["EP_JIT_CACHE_DIR"])) if p not in ep_shipped}
    triton = [p for p in Path(env["TRITON_CACHE_DIR"]).iterdir() if p.is_dir() and not p.name.startswith(".")]
    sglang_jit = sglang.compiled_since(
        Path(env["SGLANG_JIT_CACHE_DIR"]), sglang.read_manifest(shipped / sglang.TOOL) if shipped else None
    )
    flashinfer = sorted(
        p.name for p in Path(env["FLASHINFER_WORKSPACE_BASE"]).glob(".cache/flashinfer/*/*/cached_ops/*")
    )
    triton_kernels = tritonserve.compiled_since(
        Path(env["TRITON_CACHE_DIR"]),
        tritonserve.read_manifest(shipped / tritonserve.TOOL) if shipped else None,
    )
    return {
        "deepgemm_kernels": len(dg),
        "deepep_kernels": len(ep),
        "sglang_jit_kernels": sglang_jit,
        "triton_cache_entries": len(triton),
        "triton_kernels": len(triton_kernels),
        "flashinfer_modules": flashinfer,
    }


def folder_bytes(root: Path) -> dict[str, int]:
    """Each folder's bytes under a start's caches (hidden ones too: FlashInfer's .cache)."""
    folders = [*root.iterdir(), *(root / "sglang").iterdir()]
    return {
        str(folder): sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        for folder in folders
        if folder.is_dir()
    }


def device() -> str | None:
    """The GPU and driver the run had, as nvidia-smi names them (the card decides what a timing means)."""
    if shutil.which("nvidia-smi") is None:
        return None
    query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    found = subprocess.run(query, capture_output=True, text=True, check=False)
    return (found.stdout.strip() or None) if found.returncode == 0 else None


def run() -> None:
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    base = {k: v for k, v in os.environ.items() if k not in ("CC", "CXX", "CUDAHOSTCXX")}
    base["FLASHINFER_USE_CUDA_NORM"] = "1"  # as the sglang image sets it
    result: dict[str, Any] = {"schema": "cold-start/1", "flags": list(SERVE), "device": device()}
    with (WORK / "run.log").open("w") as log:
        empty = base | caches(WORK / "empty")
        result["empty"] = serve(log, "empty", empty) | {"compiled": compiled(empty, None)}
        result["empty"]["cache_bytes"] = folder_bytes(WORK / "empty")
        home = WORK / "home"
        result["exports"] = {}
        for toolchain, folder in EXPORTS.items():
            out = WORK / "exports" / f"{folder}-kernels.tar.gz"
            out.parent.mkdir(parents=True, exist_ok=True)
            made = step(log, f"export {toolchain}", sys.executable, "-m", "epstack", "jit", "export",
                        "--toolchain", toolchain, "--out", str(out), env=empty)  # fmt: skip
            if made.returncode != 0:
                continue
            sha256 = out.with_name(f"{out.name}.sha256").read_text().split()[0]
            step(log, f"unpack {toolchain}", sys.executable, "-m", "epstack", "image", "jit-unpack", str(out),
                 "--sha256", sha256, "--into", str(home / "jit" / folder), env=empty)  # fmt: skip
            result["exports"][toolchain] = {"bytes": out.stat().st_size, "sha256": sha256}
        shipping = empty | {"EPSTACK_HOME": str(home), "EPSTACK_REPORTS": str(WORK / "reports"),
                            "FLASHINFER_WORKSPACE_BASE": str(FLASHINFER_WORKSPACE)}  # fmt: skip
        (WORK / "reports").mkdir(exist_ok=True)
        FLASHINFER_WORKSPACE.mkdir(exist_ok=True)
        result["flashinfer_ship"] = ship_flashinfer(log, shipping)
        for unpacked in (home / "jit").iterdir():
            for path in [unpacked, *unpacked.rglob("*")]:  # read-only, as in the image
                path.chmod(0o555 if path.is_dir() else 0o444)
        shipped_from = {"EPSTACK_HOME": str(home), "FLASHINFER_WORKSPACE_BASE": str(FLASHINFER_WORKSPACE)}
        shipped = base | caches(WORK / "shipped") | shipped_from
        result["entrypoint_copy_s"] = entrypoint_copy(log, shipped)
        result["shipped"] = serve(log, "shipped", shipped) | {"compiled": compiled(shipped, home / "jit")}
        result["shipped"]["cache_bytes"] = folder_bytes(WORK / "shipped")
        if os.environ.get("COLD_WARM", "1") == "1":
            warm = base | caches(WORK / "warm") | shipped_from
            entrypoint_copy(log, warm)
            for folder in ("triton", "inductor", "nv"):  # the empty start's own (TRITON links to warm's now)
                shutil.copytree(WORK / "empty" / "sglang" / folder, WORK / "warm" / "sglang" / folder,
                                dirs_exist_ok=True, symlinks=True)  # fmt: skip
            result["warm"] = serve(log, "warm", warm) | {"compiled": compiled(warm, home / "jit")}
            result["warm"]["cache_bytes"] = folder_bytes(WORK / "warm")
    empty_s, shipped_s = (
        result["empty"]["launch_to_first_answer_s"],
        result["shipped"]["launch_to_first_answer_s"],
    )
    result["launch_to_first_answer_s"] = {
        "empty": empty_s,
        "shipped": shipped_s,
        "warm": result.get("warm", {}).get("launch_to_first_answer_s"),
    }
    if empty_s and shipped_s:
        result["shipped_over_empty"] = round(shipped_s / empty_s, 3)
    (WORK / "cold-start.json").write_text(json.dumps(result, indent=2) + "\n")


def alive(pid: int) -> bool:
    """Running, not a zombie no init has reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def main() -> int:
    action = sys.argv[1] if len(sys.argv) > 1 else ""
    if action == "run":
        run()
        return 0
    if action == "start":
        WORK.parent.mkdir(parents=True, exist_ok=True)
        console = open(f"{WORK}.console", "w")  # noqa: SIM115 (the detached child's)
        argv = [sys.executable, "-m", "benchmarks.serve.cold_start", "run"]
        child = subprocess.Popen(argv, stdout=console, stderr=subprocess.STDOUT, start_new_session=True)
        Path(f"{WORK}.pid").write_text(str(child.pid))
        print(f"cold_start: detached as pid {child.pid}; `wait` for its results")
        return 0
    if action == "wait":
        pid = int(Path(f"{WORK}.pid").read_text())
        deadline = time.monotonic() + float(os.environ.get("WAIT_S", "540"))
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(3)
        out = Path(os.environ.get("OUT", "out"))
        out.mkdir(parents=True, exist_ok=True)
        # One archive: a device call brings back at most 8 files.
        names = [Path(f"{WORK}.console"), *WORK.glob("*.json"), WORK / "run.log",
                 *WORK.glob("*/run/server-*.log"), *WORK.glob("*/stacks")]  # fmt: skip
        with tarfile.open(out / "cold-start.tar.gz", "w:gz") as tar:
            for path in names:
                if path.exists():
                    tar.add(path, arcname=str(path.relative_to(WORK.parent)))
        if (WORK / "cold-start.json").is_file():
            shutil.copy(WORK / "cold-start.json", out / "cold-start.json")
        print(Path(f"{WORK}.console").read_text()[-3000:])
        print("still running" if alive(pid) else "finished")
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
