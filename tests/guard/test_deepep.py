"""deep_ep's guard rows, each told apart on its own: who owns deep_ep/, the source manifest, its
patches, ElasticBuffer, the libstdc++ and NCCL the _C.so links, and what its JIT needs at run time."""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pytest

from epstack.checkrow import Check
from epstack.errors import EnvironmentProblem
from epstack.guard import deepep
from epstack.guard.deepep import (
    LIBSTDCXX_FIX,
    check_deep_ep_owner,
    check_deep_ep_patches,
    check_deep_ep_source,
    check_elastic_buffer,
    check_jit_cache,
    check_jit_prerequisites,
    check_libstdcxx,
    check_nccl_link,
    deep_ep_owners,
    unreadable_deep_ep_records,
)
from epstack.guard.expected import Expected
from tests.conftest import write_deepep_manifest, write_dist

REPO_URL = "https://github.com/deepseek-ai/DeepEP.git"
COMMIT = "d4f41e4e93602a15e95f55f6ee8df8f1aaa0e4bb"
PATCH = "https://example.org/fixes/barrier.patch#sha256=" + "a" * 64
OTHER_PATCH = "https://example.org/fixes/other.patch#sha256=" + "b" * 64
PINS = Expected(deepep_repo=REPO_URL, deepep_ref=COMMIT, deepep_patches=(PATCH,))


# ---- who owns deep_ep/ --------------------------------------------------------------------------


def test_only_files_under_deep_ep_make_an_owner(tmp_path: Path) -> None:
    write_dist(tmp_path, "deep-ep", "2.0.0", ("deep_ep/__init__.py", "deep_ep/_C.so", "deep_ep_tools/x.py"))
    write_dist(tmp_path, "deep-ep-tools", "1.0", ("deep_ep_tools/__init__.py", "tools/deep_ep/a.py"))
    owners = deep_ep_owners(metadata.distributions(path=[str(tmp_path)]))
    assert owners == {"deep-ep": [tmp_path / "deep_ep" / "__init__.py", tmp_path / "deep_ep" / "_C.so"]}


def test_only_providers_of_deep_ep_with_a_broken_record_are_reported(tmp_path: Path) -> None:
    for name in ("Sgl_Deep_EP", "deep-ep", "unrelated"):
        info = tmp_path / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    write_dist(tmp_path, "sgl-deep-ep-ok", "1.0", ("deep_ep/__init__.py",))
    unreadable = unreadable_deep_ep_records(metadata.distributions(path=[str(tmp_path)]))
    assert unreadable == {"Sgl_Deep_EP": "no RECORD", "deep-ep": "no RECORD"}


def test_owner_rows() -> None:
    one = {"deep-ep": [Path("/site/deep_ep/__init__.py")]}
    two = {**one, "sgl-deep-ep": [Path("/site/deep_ep/buffer.py")]}
    assert check_deep_ep_owner(one) == Check(
        component="deep_ep owner", expected="1 distribution", found="deep-ep", verdict="ok"
    )
    assert check_deep_ep_owner(one, {}) == check_deep_ep_owner(one)
    assert check_deep_ep_owner({}) == Check(
        component="deep_ep owner", expected="1 distribution", found="none", verdict="missing"
    )
    assert check_deep_ep_owner(two) == Check(
        component="deep_ep owner",
        expected="1 distribution",
        found="deep-ep, sgl-deep-ep",
        verdict="mismatch",
        detail="2 distributions own deep_ep files; keep only the one built from DEEPEP_REF",
    )
    unreadable = {"sgl-deep-ep": "no RECORD", "deep-ep": "malformed RECORD (ValueError: x)"}
    assert check_deep_ep_owner(one, unreadable) == Check(
        component="deep_ep owner",
        expected="1 distribution",
        found="deep-ep",
        verdict="mismatch",
        detail="deep-ep: malformed RECORD (ValueError: x); sgl-deep-ep: no RECORD",
    )
    assert check_deep_ep_owner({}, {"deep-ep": "no RECORD"}).found == "unknown"


# ---- the source manifest and its patches --------------------------------------------------------


def test_the_source_row_needs_the_pinned_repo_and_commit(tmp_path: Path) -> None:
    manifest = write_deepep_manifest(tmp_path / "m.json", repo=REPO_URL, commit=COMMIT)
    assert check_deep_ep_source(PINS, manifest) == Check(
        component="deep_ep source",
        expected=f"{REPO_URL}@d4f41e4e9360",
        found=f"{REPO_URL}@d4f41e4e9360",
        verdict="ok",
        detail=f"{manifest}; TORCH_CUDA_ARCH_LIST=9.0a",
    )


def test_a_build_from_another_fork_at_the_pinned_commit_is_a_mismatch(tmp_path: Path) -> None:
    fork = "https://github.com/someone/DeepEP.git"
    check = check_deep_ep_source(PINS, write_deepep_manifest(tmp_path / "m.json", repo=fork, commit=COMMIT))
    assert (check.found, check.verdict) == (f"{fork}@d4f41e4e9360", "mismatch")


def test_a_build_at_another_commit_of_the_pinned_repo_is_a_mismatch(tmp_path: Path) -> None:
    other = COMMIT[:12] + "0" * 28  # the same 12 hex the row shows: the whole commit is compared
    check = check_deep_ep_source(
        PINS, write_deepep_manifest(tmp_path / "m.json", repo=REPO_URL, commit=other)
    )
    assert (check.expected, check.found, check.verdict) == (
        f"{REPO_URL}@d4f41e4e9360",
        f"{REPO_URL}@d4f41e4e9360",
        "mismatch",
    )


def test_no_manifest_and_an_unreadable_one(tmp_path: Path) -> None:
    manifest = tmp_path / "absent.json"
    assert check_deep_ep_source(PINS, manifest) == Check(
        component="deep_ep source",
        expected=f"{REPO_URL}@d4f41e4e9360",
        found="no manifest",
        verdict="missing",
        detail=str(manifest),
    )
    manifest.write_text("[]")
    check = check_deep_ep_source(PINS, manifest)
    assert (check.component, check.expected, check.found, check.verdict) == (
        "deep_ep source",
        f"{REPO_URL}@d4f41e4e9360",
        "unreadable manifest",
        "mismatch",
    )
    assert check.detail.startswith(f"{manifest}: no schema") and "fix:" in check.detail


def test_the_patches_row_compares_the_applied_patches_with_the_pinned_ones(tmp_path: Path) -> None:
    manifest = write_deepep_manifest(tmp_path / "m.json", patches=(PATCH,))
    assert check_deep_ep_patches(PINS, manifest) == Check(
        component="deep_ep patches",
        expected="barrier.patch",
        found="barrier.patch",
        verdict="ok",
        detail=str(manifest),
    )
    write_deepep_manifest(manifest, patches=(OTHER_PATCH, PATCH))
    check = check_deep_ep_patches(PINS, manifest)
    assert (check.expected, check.found, check.verdict) == (
        "barrier.patch",
        "other.patch, barrier.patch",
        "mismatch",
    )
    write_deepep_manifest(manifest, patches=())
    check = check_deep_ep_patches(PINS, manifest)
    assert (check.expected, check.found, check.verdict) == ("barrier.patch", "none", "mismatch")
    unpatched = Expected(deepep_repo=REPO_URL, deepep_ref=COMMIT, deepep_patches=())
    assert check_deep_ep_patches(unpatched, manifest).verdict == "ok"


def test_a_manifest_patch_that_is_a_bare_file_name_is_shown_as_it_is(tmp_path: Path) -> None:
    manifest = write_deepep_manifest(tmp_path / "m.json", patches=("barrier.patch",))
    check = check_deep_ep_patches(PINS, manifest)
    assert (check.expected, check.found, check.verdict) == ("barrier.patch", "barrier.patch", "mismatch")


def test_the_same_patch_file_name_from_another_url_is_a_mismatch(tmp_path: Path) -> None:
    elsewhere = "https://example.org/fork/barrier.patch#sha256=" + "a" * 64
    manifest = write_deepep_manifest(tmp_path / "m.json", patches=(elsewhere,))
    check = check_deep_ep_patches(PINS, manifest)
    assert (check.expected, check.found, check.verdict) == ("barrier.patch", "barrier.patch", "mismatch")


def test_the_patches_row_is_skipped_without_a_manifest_or_without_a_fabric(tmp_path: Path) -> None:
    manifest = tmp_path / "absent.json"
    check = check_deep_ep_patches(PINS, manifest)
    assert (check.component, check.expected, check.found, check.verdict) == (
        "deep_ep patches",
        "-",
        "no manifest",
        "skipped",
    )
    assert str(manifest) in check.detail and "no such file" in check.detail
    write_deepep_manifest(manifest, patches=(PATCH,))
    pins_env = Expected(deepep_repo=REPO_URL, deepep_ref=COMMIT)  # a pins.env: no fabric, no patches
    assert check_deep_ep_patches(pins_env, manifest) == Check(
        component="deep_ep patches",
        expected="-",
        found="barrier.patch",
        verdict="skipped",
        detail="pins.env names no fabric: the image's deepep.pins.env does",
    )


# ---- import, libstdc++ and NCCL of the _C.so ------------------------------------------------------


def test_elastic_buffer_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    owners = {"deep-ep": [Path("/site/deep_ep/__init__.py")]}
    assert check_elastic_buffer({}) == Check(
        component="deep_ep.ElasticBuffer",
        expected="importable",
        found="deep_ep not installed",
        verdict="missing",
    )
    monkeypatch.setattr(deepep, "try_import", lambda name: (None, f"ImportError: no {name}"))
    assert check_elastic_buffer(owners) == Check(
        component="deep_ep.ElasticBuffer",
        expected="importable",
        found="import failed",
        verdict="mismatch",
        detail="ImportError: no deep_ep",
    )
    monkeypatch.setattr(deepep, "try_import", lambda name: (SimpleNamespace(Buffer=object), ""))
    assert check_elastic_buffer(owners) == Check(
        component="deep_ep.ElasticBuffer", expected="importable", found="absent", verdict="mismatch"
    )
    monkeypatch.setattr(deepep, "try_import", lambda name: (SimpleNamespace(ElasticBuffer=object), ""))
    assert check_elastic_buffer(owners) == Check(
        component="deep_ep.ElasticBuffer", expected="importable", found="importable", verdict="ok"
    )


def test_libstdcxx_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    so = tmp_path / "_C.so"
    component, expected = "deep_ep _C.so libstdc++", "no libstdc++ exports"
    assert check_libstdcxx(None) == Check(
        component=component, expected=expected, found="no _C.so", verdict="missing"
    )

    def no_nm(shared_object: Path) -> list[str]:
        raise EnvironmentProblem("nm: not found; fix: install binutils")

    monkeypatch.setattr(deepep, "libstdcxx_interposition", no_nm)
    assert check_libstdcxx(so) == Check(
        component=component,
        expected=expected,
        found="-",
        verdict="skipped",
        detail="nm: not found; fix: install binutils",
    )
    monkeypatch.setattr(deepep, "libstdcxx_interposition", lambda shared_object: [])
    assert check_libstdcxx(so) == Check(
        component=component, expected=expected, found="none", verdict="ok", detail=str(so)
    )
    symbols = ["_ZNSt6locale5facetD2Ev", "_ZNSt7codecvtIcc11__mbstate_tED0Ev"]
    monkeypatch.setattr(deepep, "libstdcxx_interposition", lambda shared_object: symbols)
    assert check_libstdcxx(so) == Check(
        component=component,
        expected=expected,
        found="2 exported (e.g. _ZNSt7codecvtIcc11__mbstate_tED0Ev)",
        verdict="mismatch",
        detail=f"{so} was built with a mismatched toolchain; fix: {LIBSTDCXX_FIX}",
    )


@pytest.fixture
def nccl_files(tmp_path: Path) -> dict[str, Path]:
    """The pinned wheel's libnccl.so.2 (a link to the versioned file, as wheels ship it) and another."""
    lib = tmp_path / "nccl" / "lib"
    lib.mkdir(parents=True)
    (lib / "libnccl.so.2.30.7").write_text("")
    (lib / "libnccl.so.2").symlink_to("libnccl.so.2.30.7")
    (tmp_path / "libnccl.so.2.28.9").write_text("")
    return {
        "link": lib / "libnccl.so.2",
        "pinned": lib / "libnccl.so.2.30.7",
        "other": tmp_path / "libnccl.so.2.28.9",
    }


def maps_of(*libraries: Path) -> str:
    lines = [
        f"7f00000{i}0000-7f00000{i}1000 r-xp 00000000 08:01 {i} {library}"
        for i, library in enumerate(libraries)
    ]
    return "\n".join(
        [*lines, "7f0000900000-7f0000901000 r-xp 00000000 08:01 9 /usr/lib/libnccl-net-ofi.so", ""]
    )


def test_the_nccl_link_is_ok_when_it_resolves_to_the_mapped_file(
    nccl_files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    so = tmp_path / "_C.so"
    monkeypatch.setattr(deepep, "linked_library", lambda extension, prefix: str(nccl_files["link"]))
    pinned = str(nccl_files["pinned"])
    # the process mapped the link's name, the _C.so resolves to the link: both are the same file
    assert check_nccl_link(so, maps_of(nccl_files["link"])) == Check(
        component="deep_ep NCCL link", expected=pinned, found=pinned, verdict="ok", detail=str(so)
    )
    other = check_nccl_link(so, maps_of(nccl_files["other"], nccl_files["link"]))
    assert (other.expected, other.found, other.verdict) == (str(nccl_files["other"]), pinned, "mismatch")


def test_the_nccl_link_asks_ldd_for_libnccl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []
    monkeypatch.setattr(deepep, "linked_library", lambda extension, prefix: asked.append((extension, prefix)))
    check_nccl_link(tmp_path / "_C.so", "")
    assert asked == [(tmp_path / "_C.so", "libnccl.so")]


def test_the_nccl_link_without_an_extension_a_link_or_a_loaded_nccl(
    nccl_files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    so, component = tmp_path / "_C.so", "deep_ep NCCL link"
    assert check_nccl_link(None, "") == Check(
        component=component, expected="the loaded libnccl", found="no _C.so", verdict="missing"
    )
    monkeypatch.setattr(deepep, "linked_library", lambda extension, prefix: None)
    assert check_nccl_link(so, maps_of(nccl_files["link"])) == Check(
        component=component,
        expected=str(nccl_files["pinned"]),
        found="no libnccl resolved",
        verdict="missing",
        detail=str(so),
    )
    monkeypatch.setattr(deepep, "linked_library", lambda extension, prefix: str(nccl_files["link"]))
    assert check_nccl_link(so, maps_of()) == Check(
        component=component,
        expected="the loaded libnccl",
        found=str(nccl_files["pinned"]),
        verdict="missing",
        detail=str(so),
    )

    def no_ldd(extension: Path, prefix: str) -> str:
        raise EnvironmentProblem("ldd: not found")

    monkeypatch.setattr(deepep, "linked_library", no_ldd)
    assert check_nccl_link(so, maps_of(nccl_files["pinned"])) == Check(
        component=component,
        expected=str(nccl_files["pinned"]),
        found="-",
        verdict="skipped",
        detail="ldd: not found",
    )


# ---- what DeepEP's JIT needs at run time --------------------------------------------------------


def executable(path: Path, mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(mode)
    return path


def test_jit_tools_are_found_on_path_or_in_cuda_home(tmp_path: Path) -> None:
    on_path = executable(tmp_path / "bin" / "nvcc")
    cuda = tmp_path / "cuda"
    in_cuda_home = executable(cuda / "bin" / "cuobjdump")
    executable(cuda / "bin" / "nvcc")  # PATH first
    (cuda / "include").mkdir()
    (cuda / "include" / "cuda.h").write_text("")
    nccl_h = tmp_path / "nccl.h"
    nccl_h.write_text("")
    cache = tmp_path / "jit"
    env = {"CUDA_HOME": str(cuda), "PATH": str(tmp_path / "bin"), "EP_JIT_CACHE_DIR": str(cache)}
    assert check_jit_prerequisites(env, nccl_h) == [
        Check(component="nvcc", expected="on PATH or $CUDA_HOME/bin", found=str(on_path), verdict="ok"),
        Check(
            component="cuobjdump", expected="on PATH or $CUDA_HOME/bin", found=str(in_cuda_home), verdict="ok"
        ),
        Check(
            component="CUDA headers", expected="present", found=str(cuda / "include" / "cuda.h"), verdict="ok"
        ),
        Check(component="NCCL headers", expected="present", found=str(nccl_h), verdict="ok"),
        Check(component="EP_JIT_CACHE_DIR", expected="writable", found=str(cache), verdict="ok"),
    ]


def test_jit_prerequisites_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool that is not executable, a header that is a folder, no NCCL header, and the test
    process's own PATH (which has an nvcc) not searched: the environment given is what counts."""
    monkeypatch.setenv("PATH", str(executable(tmp_path / "outer" / "nvcc").parent))
    monkeypatch.chdir(executable(tmp_path / "cwd" / "cuobjdump").parent)
    cuda = tmp_path / "cuda"
    executable(cuda / "bin" / "nvcc", mode=0o644)
    (cuda / "include" / "cuda.h").mkdir(parents=True)
    env = {"CUDA_PATH": str(cuda), "EP_JIT_CACHE_DIR": str(tmp_path / "jit")}
    rows = check_jit_prerequisites(env, None)
    assert [(row.component, row.found, row.verdict) for row in rows[:4]] == [
        ("nvcc", "not found", "missing"),
        ("cuobjdump", "not found", "missing"),
        ("CUDA headers", "not found", "missing"),
        ("NCCL headers", "not found", "missing"),
    ]
    executable(cuda / "bin" / "nvcc")  # $CUDA_PATH counts where $CUDA_HOME is unset
    assert check_jit_prerequisites(env, tmp_path / "absent.h")[0].found == str(cuda / "bin" / "nvcc")


def test_cuda_home_wins_over_cuda_path(tmp_path: Path) -> None:
    home, path = tmp_path / "home-cuda", tmp_path / "path-cuda"
    executable(home / "bin" / "nvcc")
    executable(path / "bin" / "cuobjdump")
    env = {"CUDA_HOME": str(home), "CUDA_PATH": str(path), "EP_JIT_CACHE_DIR": str(tmp_path / "jit")}
    rows = check_jit_prerequisites(env, None)
    assert [row.verdict for row in rows[:2]] == ["ok", "missing"]


def test_the_jit_cache_defaults_to_home(tmp_path: Path) -> None:
    check = check_jit_cache({"HOME": str(tmp_path)})
    assert check == Check(
        component="EP_JIT_CACHE_DIR", expected="writable", found=str(tmp_path / ".deep_ep"), verdict="ok"
    )
    assert check_jit_cache({"HOME": str(tmp_path), "EP_JIT_CACHE_DIR": ""}).found == str(
        tmp_path / ".deep_ep"
    )


def test_a_jit_cache_under_a_file_is_not_writable(tmp_path: Path) -> None:
    blocker = executable(tmp_path / "file")  # writable and executable, but no folder
    check = check_jit_cache({"EP_JIT_CACHE_DIR": str(blocker / "deep_ep")})
    assert check == Check(
        component="EP_JIT_CACHE_DIR",
        expected="writable",
        found=str(blocker / "deep_ep"),
        verdict="mismatch",
        detail=f"{blocker} is not a writable directory",
    )


def test_a_jit_cache_name_longer_than_the_file_system_allows(tmp_path: Path) -> None:
    name_max = os.pathconf(tmp_path, "PC_NAME_MAX")
    fits = check_jit_cache({"EP_JIT_CACHE_DIR": str(tmp_path / ("a" * name_max) / "deep_ep")})
    assert (fits.verdict, fits.detail) == ("ok", "")
    message = f"a name in it has {2 * (name_max // 2 + 1)} bytes, over the {name_max} its file system allows"
    name = "é" * (name_max // 2 + 1)  # 2 bytes a character
    for too_long in (tmp_path / "cache" / name / "deep_ep", tmp_path / name / "deep_ep", tmp_path / name):
        check = check_jit_cache({"EP_JIT_CACHE_DIR": str(too_long)})
        assert (check.verdict, check.detail) == ("mismatch", message)


def test_an_existing_jit_cache_is_writable(tmp_path: Path) -> None:
    assert check_jit_cache({"EP_JIT_CACHE_DIR": str(tmp_path)}).verdict == "ok"


def test_the_jit_cache_without_home_is_under_the_users_home() -> None:
    assert check_jit_cache({}).found == str(Path("~").expanduser() / ".deep_ep")


def read_only_folder(tmp_path: Path) -> Path:
    """A folder this process cannot write: a mode 0500 one, or for root (who writes anywhere) a
    read-only mount such as /proc/sys."""
    if os.geteuid() != 0:
        (tmp_path / "ro").mkdir(mode=0o500)
        return tmp_path / "ro"
    if os.access("/proc/sys", os.F_OK) and not os.access("/proc/sys", os.W_OK):
        return Path("/proc/sys")
    pytest.skip("root, and no read-only folder")


def test_a_jit_cache_in_a_folder_this_process_cannot_write(tmp_path: Path) -> None:
    folder = read_only_folder(tmp_path)
    check = check_jit_cache({"EP_JIT_CACHE_DIR": str(folder / "epstack-test-jit" / "deep_ep")})
    assert (check.verdict, check.detail) == ("mismatch", f"{folder} is not a writable directory")


def test_without_cuda_home_or_cuda_path_the_tools_are_looked_for_in_usr_local_cuda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked_at: list[str] = []
    access = os.access

    def spy(path: object, mode: int) -> bool:
        looked_at.append(str(path))
        return access(path, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "access", spy)
    check_jit_prerequisites({"PATH": "", "EP_JIT_CACHE_DIR": str(tmp_path / "jit")}, None)
    assert looked_at[:2] == ["/usr/local/cuda/bin/nvcc", "/usr/local/cuda/bin/cuobjdump"]
