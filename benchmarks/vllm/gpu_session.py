"""vLLM 0.33.0 over the pinned torch 2.14.1 on a bare GPU host (no network, no Docker), after the SGLang
ferry and `benchmarks/elastic/run_h200.sh stack install` (torch 2.14.1, triton, NCCL and DeepEP in
/opt/sgl and /opt/nccl; benchmarks/serve/README.md). Run from the repository root:

    python3 -m benchmarks.vllm.gpu_session stack load start     # one device call
    WAIT_S=560 python3 -m benchmarks.vllm.gpu_session wait      # the next: results into $OUT

- stack: vLLM's ferry ($FERRY_VLLM, default /opt/ferry-vllm: benchmarks/vllm/want.py's wheels, packed by
  benchmarks/serve/ferry-pack.sh) installed into /opt/vllm, which goes before /opt/sgl on PYTHONPATH.
- load: every vLLM native library imported over torch 2.14.1 (the override's proof: they import only
  torch's stable C ABI, benchmarks/vllm/results/torch-abi.json), and the guard's row of vLLM's own gate
  (deep_ep_v2_unavailable_reason() is None) -> $OUT/vllm-load.json.
- start (detached) / wait: the cold start, empty against shipped. `epstack smoke serve --engine vllm
  --profile tiny` with every cache empty (every check, the sweep with `vllm bench serve`); `epstack jit
  export` of vLLM's torch.compile artifacts and Triton's kernels; `jit unpack` into a new
  $EPSTACK_HOME/jit; the entrypoint's own scripts/image/jit-caches.sh into new, empty caches; the serve
  smoke again (--no-sweep). Every start's TRITON_CACHE_DIR is one path (a link to that start's folder),
  as the image's is. -> $OUT/cold-start.json (`launch_to_healthy_s` empty and shipped, what each
  compiled, the exports' sizes), each start's report and server log, run.log. SERVE_ARGS adds to both
  serve smokes' flags.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.elastic.h200.host import NO_COMPILERS, Host, matches
from benchmarks.serve.cold_start import step
from epstack.jit import tritonserve, vllmcompile

TARGET = "/opt/vllm"
WORK = Path(os.environ.get("WORK", "/tmp/vllm-cold"))
TRITON = WORK / "triton"  # every start's TRITON_CACHE_DIR: a link to <start>/triton
EXPORTED = {"vllm-compile": vllmcompile, "triton-kernels": tritonserve}
# Every native library of the vllm wheel the ferry carries (FA2's is left out of the ferry: 124 MiB).
LIBRARIES = (
    "vllm._C_stable_libtorch", "vllm._moe_C_stable_libtorch", "vllm.vllm_flash_attn._vllm_fa3_C",
    "vllm._flashmla_C", "vllm._flashmla_extension_C", "vllm._qutlass_C", "vllm._deepselect_C",
    "vllm._flashkda_C", "vllm.cumem_allocator", "vllm.fs_io_C", "vllm.spinloop",
    "vllm.third_party.deep_gemm._C_extension",
)  # fmt: skip
LOAD = """
import importlib, json, sys, torch
found = {"torch_version": torch.__version__, "libraries": {}}
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
        found["libraries"][name] = "ok"
    except Exception as exc:
        found["libraries"][name] = f"{type(exc).__name__}: {exc}"
from epstack.guard.vllm import check_deep_ep_v2_gate
import vllm
found["vllm"] = vllm.__version__
found["gate"] = check_deep_ep_v2_gate().__dict__
json.dump(found, open(sys.argv[1], "w"), indent=1)
"""


SOURCE = "/opt/vllm-src"  # the detached run's copy of this tree: the next device call replaces the call's own


def python_path(host: Host, source: str | None = None) -> str:
    """/opt/vllm before the SGLang stack (torch 2.14.1, deep_ep), then epstack (this tree, or `source`)
    and its dependencies."""
    tree = source or os.getcwd()
    return ":".join([str(host.at(TARGET)), str(host.at("/opt/sgl")), tree, "/opt/epstack-deps"])


def stack(host: Host) -> None:
    target = host.at(TARGET)
    if not (target / "vllm").is_dir():
        ferry = Path(host.env.get("FERRY_VLLM") or host.at("/opt/ferry-vllm"))
        unpacked = host.at("/tmp/ferry-vllm-w")
        host.remove(unpacked)
        unpacked.mkdir(parents=True)
        chunks = " ".join(str(path) for path in matches(ferry / "c", "c*"))
        host.run(["bash", "-c", f"cat {chunks} | tar -xf - -C {unpacked}"])
        host.run([host.python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                  "--target", target, *matches(unpacked, "*.whl")], tail=3)  # fmt: skip
    env = host.environ({"PYTHONPATH": python_path(host)})
    host.note("stack: " + host.output([host.python, "-c", "import torch, vllm; print(torch.__version__, "
                                       "vllm.__version__, vllm.__file__)"], env=env).strip())  # fmt: skip


def load(host: Host) -> None:
    report = host.out / "vllm-load.json"
    env = host.environ({"PYTHONPATH": python_path(host)})
    status = host.run([host.python, "-c", LOAD, report, *LIBRARIES], env=env, tail=5)
    host.note(f"load: exit {status}, {report}")


def _caches(root: Path) -> dict[str, str]:
    """Every cache a vLLM start writes, empty, under `root` (Triton's at TRITON, linked to root/triton)."""
    (root / "triton").mkdir(parents=True, exist_ok=True)
    TRITON.unlink(missing_ok=True)
    TRITON.symlink_to(root / "triton")
    env = {
        "VLLM_CACHE_ROOT": str(root / "vllm"),
        "TRITON_CACHE_DIR": str(TRITON),
        "FLASHINFER_WORKSPACE_BASE": str(root / "flashinfer"),
        "DG_JIT_CACHE_DIR": str(root / "deep_gemm"),
        "EP_JIT_CACHE_DIR": str(root / "deep_ep"),
        "CUDA_CACHE_PATH": str(root / "nv"),
    }
    for folder in env.values():
        Path(folder).mkdir(parents=True, exist_ok=True)
    return env


def _serve(log: Any, name: str, env: dict[str, str], *extra: str) -> dict[str, Any]:
    report = WORK / f"{name}.json"
    argv = [sys.executable, "-m", "epstack", "smoke", "serve", "--engine", "vllm", "--profile", "tiny",
            "--run-dir", str(WORK / name), "--json", str(report), *extra,
            *os.environ.get("SERVE_ARGS", "").split()]  # fmt: skip
    done = step(log, f"serve {name}", *argv, env=env)
    return json.loads(report.read_text()) if report.exists() else {"exit": done.returncode}


def _compiled(env: dict[str, str], home: Path) -> dict[str, int]:
    """What each exported toolchain compiled in this start's caches beyond what was shipped."""
    found = {}
    for name, chain in EXPORTED.items():
        manifest = chain.read_manifest(home / "jit" / chain.TOOL)
        found[name] = len(chain.compiled_since(chain.cache_dir(env), manifest))
    return found


def run() -> dict[str, Any]:
    """The whole cold start (the detached part)."""
    WORK.mkdir(parents=True, exist_ok=True)
    base = {k: v for k, v in os.environ.items() if k not in NO_COMPILERS} | {"HF_HUB_OFFLINE": "1"}
    home = WORK / "opt"
    result: dict[str, Any] = {"measured": time.strftime("%Y-%m-%d"), "exports": {}}
    with (WORK / "run.log").open("a") as log:
        empty = base | _caches(WORK / "empty") | {"EPSTACK_HOME": str(home)}
        result["empty"] = _serve(log, "empty", empty)
        result["compiled_empty"] = _compiled(empty, home)
        for name, chain in EXPORTED.items():
            archive = WORK / f"{chain.TOOL}-kernels.tar.gz"
            export = ("jit", "export", "--toolchain", name, "--out", str(archive))
            done = step(log, f"export {name}", sys.executable, "-m", "epstack", *export, env=empty)
            if done.returncode == 0:
                digest = archive.with_name(archive.name + ".sha256").read_text().split()[0]
                step(log, f"unpack {name}", sys.executable, "-m", "epstack", "jit", "unpack", str(archive),
                     "--sha256", digest, "--into", str(home / "jit" / chain.TOOL), env=empty)  # fmt: skip
                result["exports"][name] = archive.stat().st_size
        shipped = base | _caches(WORK / "shipped") | {"EPSTACK_HOME": str(home)}
        began = time.monotonic()
        step(
            log,
            "entrypoint copy",
            "bash",
            "-euo",
            "pipefail",
            "-c",
            ". scripts/image/jit-caches.sh",
            env=shipped,
        )
        result["entrypoint_copy_s"] = round(time.monotonic() - began, 2)
        result["shipped"] = _serve(log, "shipped", shipped, "--no-sweep")
        result["compiled_shipped"] = _compiled(shipped, home)
    result["launch_to_healthy_s"] = {
        name: (result[name].get("runs") or [{}])[0].get("launch_to_healthy_s")
        for name in ("empty", "shipped")
    }
    (WORK / "cold-start.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def start(host: Host) -> None:
    """The cold start detached, from a copy of this tree that outlasts the device call."""
    source = host.at(SOURCE)
    host.remove(source)
    source.mkdir(parents=True)
    host.run(
        ["bash", "-c", f"tar --exclude=./.ferry --exclude=./.ferry-vllm -cf - . | tar -xf - -C {source}"]
    )
    env = host.environ({"PYTHONPATH": python_path(host, str(source)), "WORK": str(WORK)})
    folder = host.at(str(WORK))
    folder.mkdir(parents=True, exist_ok=True)
    argv = ["bash", "-c", f'cd {source} && exec "$0" -m benchmarks.vllm.gpu_session run', host.python]
    pid = host.detach(argv, env=env, console=folder / "console", pid_file=folder / "pid")
    host.note(f"start: detached as pid {pid}, results in {folder}")


def wait(host: Host) -> None:
    folder = host.at(str(WORK))
    pid = int((folder / "pid").read_text())
    ended = host.wait_for(pid, limit_s=int(host.setting("WAIT_S", "560")))
    host.note(f"wait: {'ended' if ended else f'still running after {host.seconds()} s'}")
    files = ["cold-start.json", "empty.json", "shipped.json", "run.log", "console"]
    logs = [*matches(folder / "empty", "server-*.log"), *matches(folder / "shipped", "server-*.log")]
    for path in [*(folder / name for name in files), *logs]:
        if path.is_file():
            target = host.out / (path.name if path.parent == folder else f"{path.parent.name}-{path.name}")
            subprocess.run(["cp", str(path), str(target)], check=False)


PHASES = {"stack": stack, "load": load, "start": start, "wait": wait}


def main(argv: list[str]) -> int:
    if argv == ["run"]:
        print(json.dumps(run()["launch_to_healthy_s"]))
        return 0
    unknown = [name for name in argv if name not in PHASES]
    if unknown or not argv:
        print(
            f"gpu_session: phases are {', '.join(PHASES)} (got {' '.join(argv) or 'none'})", file=sys.stderr
        )
        return 2
    host = Host.from_environment(os.environ)
    host.out.mkdir(parents=True, exist_ok=True)
    for name in argv:
        PHASES[name](host)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
