"""`epstack image deepep-build`: the one DeepEP V2 builder, for images and for bare GPU hosts alike.

1. Source: the pinned commit with its fmt submodule, from `git archive` tarballs in a sources folder
   (verified whole and their commits checked before unpacking: epstack.image.gitarchive), or cloned
   where the folder holds neither (HEAD and the fmt gitlink checked); then the fabric's
   pinned patches (DEEPEP_PATCHES_<FABRIC>), each checked by sha256 and `git apply --check` first.
2. Toolchain: the system gcc/g++, CUDAHOSTCXX unset. A _C.so built by a second g++ exports libstdc++
   symbols and the first dispatch SEGFAULTs in DeepEP's JIT; the built _C.so is checked for that.
3. NCCL: DeepEP links `-l:libnccl.so.2` from wherever the linker looks first (in NVIDIA's devel image,
   the system NCCL). The pinned wheel's lib/ goes first on LIBRARY_PATH, and is the rpath.
4. A wheel in --wheel-dir, and beside it deepep-source.json: what `epstack guard` compares with.
It builds for the Python running it (in an image, the venv's; `python3 -m epstack` on a GPU host).
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import tarfile
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

from epstack import httpclient
from epstack.cmd import call, run
from epstack.deepepmanifest import DEEPEP_MANIFEST, MANIFEST_NAME, DeepepManifest, LinkedLibrary
from epstack.errors import BadInput, CommandFailed, EnvironmentProblem
from epstack.guard.loaded import interposition_example, libstdcxx_interposition, nccl_version
from epstack.image.sources import check_sha256, patch_bytes, source_archives
from epstack.pins.deepepsources import GitSource, Patch, fabric_patches, git_sources
from epstack.pins.load import pin_values
from epstack.stack import cuda_wheels

SYSTEM_CC, SYSTEM_CXX = "/usr/bin/gcc", "/usr/bin/g++"


def _wheel_root(distribution: str, library_prefix: str) -> Path:
    """The root (parent of lib/) of a library a pinned wheel installed into this Python."""
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        raise EnvironmentProblem(
            f"{distribution} is not installed in this Python; fix: install the pinned wheel first"
        ) from None
    for file in dist.files or []:
        if file.name.startswith(library_prefix) and file.parent.name == "lib":
            return Path(str(dist.locate_file(file))).parent.parent
    raise EnvironmentProblem(f"{distribution} has no lib/{library_prefix}*; fix: reinstall it")


def _unpack(archive: bytes, destination: Path) -> Path:
    """Extract a verified archive with tarfile's data filter; returns the tree (its --prefix, if any)."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        tar.extractall(destination, filter="data")
    entries = list(destination.iterdir())
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else destination


def fetch_source(sources: Path | None, pinned: dict[str, str], work: Path) -> tuple[Path, str]:
    """The DeepEP tree at DEEPEP_REF with third-party/fmt at DEEPEP_FMT_REF, and how it was obtained."""
    deepep, fmt, _ = git_sources(pinned)
    archives = source_archives(sources, pinned) if sources is not None else {}
    if deepep not in archives:
        return _clone(deepep, fmt, work / "DeepEP"), f"git {deepep.repo}"
    tree = _unpack(archives[deepep], work / "deepep")
    fmt_dir = tree / "third-party" / "fmt"
    shutil.rmtree(fmt_dir, ignore_errors=True)
    fmt_dir.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(_unpack(archives[fmt], work / "fmt"), fmt_dir)
    return tree, f"archive {deepep.archive}"


def _clone(deepep: GitSource, fmt: GitSource, tree: Path) -> Path:
    call("git", "init", "--quiet", tree)
    call("git", "-C", tree, "fetch", "--quiet", "--depth", "1", "--", deepep.repo, deepep.commit)
    call("git", "-C", tree, "checkout", "--quiet", "FETCH_HEAD")
    head = call("git", "-C", tree, "rev-parse", "HEAD", capture=True, echo=False).strip()
    gitlink = call("git", "-C", tree, "rev-parse", "HEAD:third-party/fmt", capture=True, echo=False).strip()
    if head != deepep.commit:
        raise CommandFailed(f"{deepep.repo} gave {head} for {deepep.key}={deepep.commit}")
    if gitlink != fmt.commit:
        raise BadInput(
            f"DEEPEP_FMT_REF is {fmt.commit}, but DeepEP {deepep.commit[:12]} records fmt {gitlink}; "
            f"fix: set DEEPEP_FMT_REF={gitlink}"
        )
    call("git", "-C", tree, "submodule", "update", "--quiet", "--init", "--depth", "1", "third-party/fmt")
    return tree


def _fetch_patch(patch: Patch) -> bytes:
    try:
        answer = httpclient.request("GET", patch.url, timeout=60)
        if not answer.ok:
            raise answer.failed(f"answered HTTP {answer.status}")
    except EnvironmentProblem as exc:
        raise EnvironmentProblem(
            f"cannot fetch {patch.url} ({exc}); fix: put {patch.file} in the sources folder"
        ) from None
    return answer.body


def apply_patches(tree: Path, patches: tuple[Patch, ...], sources: Path | None, work: Path) -> None:
    """Apply each patch in order, each checked by its sha256 and by `git apply --check` first."""
    for number, patch in enumerate(patches, start=1):
        data = patch_bytes(sources, patch) or _fetch_patch(patch)
        check_sha256(data, patch.sha256, patch.url, "its pin")
        path = work / f"{number:02d}-{patch.file}"
        path.write_bytes(data)
        check = run("git", "apply", "--check", path, cwd=tree)
        if check.returncode != 0:
            reason = check.stderr.strip().splitlines()[0] if check.stderr.strip() else "no reason given"
            raise BadInput(
                f"{patch.file} does not apply to this DeepEP ({reason}); "
                "fix: pin a patch made for DEEPEP_REF, or drop it"
            )
        call("git", "apply", path, cwd=tree)


def build_environment(nccl_root: Path, nvshmem_root: Path, arch_list: str) -> dict[str, str]:
    """The environment DeepEP's setup.py runs in: one toolchain, the pinned NCCL first on the link path."""
    env = {k: v for k, v in os.environ.items() if k != "CUDAHOSTCXX"}
    library_path = [str(nccl_root / "lib"), *filter(None, env.get("LIBRARY_PATH", "").split(":"))]
    env.update(
        CC=SYSTEM_CC,
        CXX=SYSTEM_CXX,
        TORCH_CUDA_ARCH_LIST=arch_list,
        EP_NCCL_ROOT_DIR=str(nccl_root),
        EP_NVSHMEM_ROOT_DIR=str(nvshmem_root),
        LIBRARY_PATH=":".join(library_path),
        MAX_JOBS=env.get("MAX_JOBS", str(os.cpu_count() or 1)),
    )
    return env


def _check_extension(wheel: Path, work: Path) -> None:
    """The built _C.so exports no libstdc++ symbols (the mixed-toolchain SEGFAULT)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.startswith("deep_ep/_C") and n.endswith(".so"))
        extension = Path(archive.extract(name, work / "check"))
    interposed = libstdcxx_interposition(extension)
    if interposed:
        raise CommandFailed(
            f"{wheel.name}: deep_ep/_C.so exports {len(interposed)} libstdc++ symbols "
            f"(e.g. {interposition_example(interposed)}): a second toolchain; "
            f"fix: build with {SYSTEM_CXX}, CUDAHOSTCXX unset"
        )


def build(
    *, pins_file: Path, sources: Path | None, wheel_dir: Path, arch: str | None, fabric: str | None
) -> DeepepManifest:
    """Build the deep_ep wheel into `wheel_dir` and write its manifest there."""
    pinned = pin_values(pins_file)
    missing = [k for k in ("DEEPEP_REPO", "DEEPEP_REF", "DEEPEP_FMT_REF", "GDRCOPY_REF", "CUDA_VERSION")
               if k not in pinned]  # fmt: skip
    arch_list = arch or pinned.get("TORCH_CUDA_ARCH_LIST")
    if missing or not arch_list:
        absent = ", ".join(missing or ["TORCH_CUDA_ARCH_LIST"])
        raise BadInput(
            f"{pins_file}: no {absent}; fix: pass pins.env with --cuda-arch, or the deepep layer pins file"
        )
    fabric = fabric or pinned.get("FABRIC")
    patches = fabric_patches(pinned, fabric) if fabric else ()
    wheels = cuda_wheels(pinned["CUDA_VERSION"])
    nccl_root = _wheel_root(wheels.nccl, "libnccl.so")
    nvshmem_root = _wheel_root(wheels.nvshmem, "libnvshmem_host.so")
    nccl_library = sorted((nccl_root / "lib").glob("libnccl.so*"))[0]
    wheel_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="epstack-deepep-") as tmp:
        tree, origin = fetch_source(sources, pinned, Path(tmp))
        apply_patches(tree, patches, sources, Path(tmp))
        env = build_environment(nccl_root, nvshmem_root, arch_list)
        call(sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-cache-dir",
             "--wheel-dir", wheel_dir, tree, env=env)  # fmt: skip
        wheel = max(wheel_dir.glob("deep_ep-*.whl"), key=lambda p: p.stat().st_mtime)
        _check_extension(wheel, Path(tmp))
    manifest = DeepepManifest(
        repo=pinned["DEEPEP_REPO"],
        commit=pinned["DEEPEP_REF"],
        fmt_commit=pinned["DEEPEP_FMT_REF"],
        torch_cuda_arch_list=arch_list,
        source=origin,
        patches=tuple(str(patch) for patch in patches),
        nccl=LinkedLibrary(
            root=str(nccl_root), library=str(nccl_library), version=nccl_version(nccl_library)
        ),
        nvshmem_root=str(nvshmem_root),
        cc=SYSTEM_CC,
        cxx=SYSTEM_CXX,
        wheel=wheel.name,
    )
    (wheel_dir / MANIFEST_NAME).write_text(DEEPEP_MANIFEST.dumps(manifest))
    return manifest
