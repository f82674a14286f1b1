"""The phases that install the stack on the bare host and check it: install, stack, doctor, guard, warm."""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks.elastic.h200.host import DEPS, Host, matches
from epstack import cmd, imagepaths
from epstack.stack import NCCL_WHEEL_STEM


def epstack_dependencies(host: Host) -> None:
    """epstack's own dependencies from the wheels GPU_SRC carries (the host has no network)."""
    wheels = host.sources / "wheels"
    host.run(
        [host.python, "-m", "pip", "install", "--quiet", "--no-index", "--find-links", wheels,
         "--target", host.at(DEPS), *matches(wheels, "*.whl")],
        tail=3,
    )  # fmt: skip


def _nccl_loaded(host: Host) -> bool:
    """The pinned NCCL is the one torch loads (epstack's own check)."""
    return cmd.succeeds(host.python, "-m", "epstack", "image", "nccl-check", "--pins", "pins.env", "--loaded",
                        env=host.env)  # fmt: skip


# The NCCL wheels the stack phase sets aside for the install phase (every CUDA major's name).
NCCL_WHEELS = f"{NCCL_WHEEL_STEM.replace('-', '_')}_cu*.whl"


def install(host: Host) -> None:
    if _nccl_loaded(host) and cmd.succeeds(host.python, "-c", "import deep_ep", env=host.env):
        host.note("install: already there")
        return
    if (host.sources / "wheels").is_dir():
        epstack_dependencies(host)
    log = host.out / "install.log"
    ferried = sorted((host.ferry / "nccl").glob(NCCL_WHEELS))
    if _nccl_loaded(host):
        host.note("install: NCCL already there")
    elif ferried:
        host.note(f"install: NCCL from the ferried wheel {ferried[-1].name}")
        host.run(["bash", "scripts/gpu/install-nccl.sh", "--pins", "pins.env", "--wheel", ferried[-1]],
                 console=log, append=True, tail=3)  # fmt: skip
    else:
        host.note("install: NCCL from source")
        host.run(
            ["bash", "scripts/gpu/install-nccl.sh", "--pins", "pins.env", "--src",
             *matches(host.sources, "nccl-*.tar.gz"), "--arch", "90", "--prefix", host.at("/opt/nccl")],
            console=log, append=True, tail=3,
        )  # fmt: skip
    host.note("install: DeepEP (epstack image deepep-build)")
    wheels = host.at(imagepaths.WHEELS)  # where an image keeps it: the guard finds its manifest there
    build = [host.python, "-m", "epstack", "image", "deepep-build", "--pins", "pins.env",
             "--cuda-arch", "9.0", "--sources", host.sources, "--wheel-dir", wheels]  # fmt: skip
    host.record(build)
    host.run(build, console=log, append=True, tail=3)
    host.run([host.python, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall",
              *matches(wheels, "deep_ep-*.whl")])  # fmt: skip
    host.run(["cp", wheels / "deepep-source.json", f"{host.out}/"])
    # DeepEP's own tests (the upstream phases) run from its tree.
    host.at("/opt/src").mkdir(parents=True, exist_ok=True)
    host.run(["tar", "-xzf", *matches(host.sources, "DeepEP-*.tar.gz"), "-C", host.at("/opt/src")])
    host.note("install: done")


def stack(host: Host) -> None:
    """The ferried SGLang stack (benchmarks/serve/ferry-pack.sh's chunks) installed into /opt/sgl; the
    pinned NCCL wheel among them set aside in $FERRY/nccl for the install phase, which puts it into the
    host's venv (the nvidia/ folder /opt/sgl links to)."""
    target, unpacked = host.at("/opt/sgl"), host.at("/tmp/ferry-w")
    ferry = host.ferry
    if not (target / "sglang").is_dir():
        host.remove(unpacked)
        unpacked.mkdir(parents=True)
        cmd.pipe(["cat", *map(str, matches(ferry / "c", "c*"))], ["tar", "-xf", "-", "-C", str(unpacked)])
        (ferry / "nccl").mkdir(parents=True, exist_ok=True)
        for wheel in unpacked.glob(NCCL_WHEELS):
            wheel.replace(ferry / "nccl" / wheel.name)
        pip = host.output([host.python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                           "--target", target, *matches(unpacked, "*.whl")])  # fmt: skip
        print("\n".join([line for line in pip.splitlines() if "WARNING" not in line][-3:]))
        host.remove(target / "nvidia", unpacked)
        purelib = host.output(
            [host.python, "-c", 'import sysconfig; print(sysconfig.get_paths()["purelib"])']
        )
        (target / "nvidia").symlink_to(Path(purelib.strip(), "nvidia"))  # where install put NCCL
    env = host.environ({"PYTHONPATH": f"{target}:{host.env.get('PYTHONPATH', '')}"})
    versions = host.output(
        [host.python, "-c", 'import torch, sglang; print("stack:", torch.__version__, sglang.__version__)'],
        env=env,
    )
    print(versions, end="")
    with (host.out / "run.log").open("a") as log:
        log.write(versions)


def doctor(host: Host) -> None:
    argv = [
        host.python,
        "-m",
        "epstack.doctor",
        "--pins",
        "pins.env",
        "--json",
        host.out / "doctor-h200.json",
    ]
    host.record(argv)
    host.note(f"doctor: exit {host.run(argv)}")


def guard(host: Host) -> None:
    """The guard with pins.env's TORCH_VERSION set to the host's torch (2.11.0, which cannot be
    replaced there: no network); the rest of pins.env is what the install phase put there."""
    pins = host.at("/tmp/pins-h200.env")
    pins.parent.mkdir(parents=True, exist_ok=True)
    with open("pins.env") as source:
        pins.write_text(re.sub(r"(?m)^TORCH_VERSION=.*$", "TORCH_VERSION=2.11.0", source.read()))
    for layer in ("deepep", "all"):
        argv = [host.python, "-m", "epstack", "guard", "--pins", pins, "--layer", layer,
                "--json", host.out / f"guard-{layer}.json"]  # fmt: skip
        host.record(argv, after="  # pins.env with TORCH_VERSION=2.11.0")
        host.note(f"guard --layer {layer}: exit {host.run(argv)}")


def warm(host: Host) -> None:
    """DeepEP's JIT cache filled with test_ep's kernels, in shards run side by side."""
    host.note(f"warm: DeepEP JIT cache {host.env['EP_JIT_CACHE_DIR']}")
    argv = [host.python, "-m", "benchmarks.elastic.warm_jit_cache", host.at("/opt/src/DeepEP"),
            "--nproc", str(host.nproc), "--shards", host.setting("SHARDS", "8"),
            "--timeout", host.setting("WARM_TIMEOUT", "280"),
            "--json", host.out / "jit-warm.json"]  # fmt: skip
    host.record(argv)
    host.note(f"warm: exit {host.run(argv, tail=12)}")
