"""epstack guard: exit codes and report on a machine without the stack, and each check against real
artifacts: shared libraries compiled here with gcc/g++, dist-info directories, manifests."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from epstack.commands.main import main
from epstack.guard import run as guard_run
from epstack.guard.deepep import (
    LIBSTDCXX_FIX,
    check_deep_ep_owner,
    check_deep_ep_source,
    check_jit_prerequisites,
    check_libstdcxx,
    check_nccl_link,
    deep_ep_owners,
)
from epstack.guard.distributions import (
    check_distribution,
    check_nvshmem_headers,
    check_requirements,
    check_torch_cuda,
)
from epstack.guard.expected import load_expected
from epstack.guard.libraries import check_nccl_loaded
from epstack.guard.loaded import nccl_version
from epstack.guard.report import GUARD_REPORT
from epstack.pins.load import load_pins
from tests.conftest import PINS, REPO, pins_variant, write_deepep_manifest, write_dist

FIXTURES = REPO / "tests" / "fixtures" / "guard"
SHA = "d4f41e4e93602a15e95f55f6ee8df8f1aaa0e4bb"


def compiler(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must have {name}")
        pytest.skip(f"{name} not installed")
    return path


@pytest.fixture(scope="module")
def fake_nccl(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real libnccl.so.2 builds, each answering ncclGetVersion: 2.28.9 (what torch 2.11 pins), 2.30.7
    (what torch 2.14.1 pins) and pins.env's NCCL_VERSION (2.32.6)."""
    libraries = {}
    for version in dict.fromkeys(("2.28.9", "2.30.7", load_pins(PINS).nccl_version)):
        major, minor, patch = map(int, version.split("."))
        code = major * 10000 + minor * 100 + patch  # NCCL_VERSION_CODE since 2.9
        library = tmp_path_factory.mktemp(f"nccl-{version}") / "libnccl.so.2"
        source = FIXTURES / "fake_nccl.c"
        subprocess.run(
            [compiler("gcc"), "-shared", "-fPIC", f"-DNCCL_VERSION_CODE={code}", "-o", library, source],
            check=True,
        )
        libraries[version] = library
    return libraries


@pytest.fixture
def no_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No DeepEP manifest, no CUDA toolkit, nothing on PATH, no NCCL (torch at most as the CPU build).
    A libnccl an earlier test of this process loaded stays mapped (ctypes never unloads): hidden."""
    real_maps = guard_run._read_maps
    monkeypatch.setattr(
        guard_run,
        "_read_maps",
        lambda: "".join(line for line in real_maps().splitlines(True) if "libnccl" not in line),
    )
    monkeypatch.setenv("EPSTACK_DEEPEP_MANIFEST", str(tmp_path / "absent.json"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv("EP_JIT_CACHE_DIR", str(tmp_path / "jit"))
    monkeypatch.setenv("EPSTACK_REPORTS", str(tmp_path / "no-reports"))


def test_without_the_stack_exits_1_listing_every_missing_component(
    tmp_path: Path, no_stack: None, capsys: pytest.CaptureFixture[str]
) -> None:
    report_path = tmp_path / "out" / "r.json"
    assert main(["guard", "--pins", str(PINS), "--json", str(report_path)]) == 1
    report = GUARD_REPORT.read(report_path)
    assert report.ok is False and report.layer == "all" and report.pins == PINS
    verdicts = {check.component: check.verdict for check in report.checks}
    # The test extras bring torch's CPU build for the smoke's reference: then torch is there but wrong.
    torch_rows = {"torch", "torch CUDA"}
    cpu_torch = importlib.util.find_spec("torch") is not None
    missing = {
        *(() if cpu_torch else torch_rows),
        "nvidia-nccl-cu13",
        "nvidia-nvshmem-cu13",
        "NVSHMEM (headers)",
        "NCCL (loaded)",
        "deep_ep source",
        "deep_ep owner",
        "deep_ep.ElasticBuffer",
        "deep_ep NCCL link",
        "deep_ep _C.so libstdc++",
        "nvcc",
        "cuobjdump",
        "CUDA headers",
        "NCCL headers",
        "nvcc (CUDA_HOME)",
        "NVVM (CUDA_HOME)",
        "CUDA headers (CUDA_HOME)",
        "sglang",
        "nixl",
        "nixl-cu13",
        "nixl._api (SGLang's import)",
    }
    assert {c for c, v in verdicts.items() if v == "missing"} == missing
    mismatched = torch_rows if cpu_torch else set()
    assert {c for c, v in verdicts.items() if v == "mismatch"} == mismatched
    assert verdicts["CUDA runtime/driver"] == "skipped"
    assert verdicts["EP_JIT_CACHE_DIR"] == "ok"
    assert verdicts["CUDA major of distributions"] == "ok"
    jit = {c: v for c, v in verdicts.items() if c.startswith("JIT (")}
    assert jit == dict.fromkeys(("JIT (base layer)", "JIT (deepep layer)", "JIT (sglang layer)"), "skipped")
    err = "".join(capsys.readouterr())
    assert f"guard: {len(missing) + len(mismatched)} of {len(verdicts)} checks failed" in err
    assert "nvidia-nvshmem-cu13" in err and "3.4.5" in err


def test_layer_base_checks_the_base_and_below(tmp_path: Path, no_stack: None) -> None:
    report_path = tmp_path / "r.json"
    assert main(["guard", "--pins", str(PINS), "--layer", "base", "--json", str(report_path)]) == 1
    layers = {check.layer for check in GUARD_REPORT.read(report_path).checks}
    assert layers == {"python", "base"}


def test_layer_pins_file_needs_the_keys_of_its_layer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    layer_file = tmp_path / "base.pins.env"
    layer_file.write_text("CUDA_VERSION=13.0.3\nNCCL_VERSION=2.30.7\nNVSHMEM_VERSION=3.4.5\n")
    report_path = tmp_path / "r.json"
    assert main(["guard", "--pins", str(layer_file), "--layer", "python", "--json", str(report_path)]) == 1
    rows = {c.component: c for c in GUARD_REPORT.read(report_path).checks}
    assert set(rows) == {
        "nvidia-nccl-cu13",
        "nvidia-nvshmem-cu13",
        "NVSHMEM (headers)",
        "CUDA major of distributions",
        "Python startup files",
        "site-packages (RECORD)",
        "bytecode",
        "standard library (as built)",
    }
    assert rows["nvidia-nccl-cu13"].expected == "2.30.7"
    capsys.readouterr()
    assert main(["guard", "--pins", str(layer_file), "--layer", "deepep"]) == 2
    assert "no TORCH_VERSION, which guard --layer base needs" in capsys.readouterr().err


def test_a_cuda_12_layer_checks_the_cu12_wheels(tmp_path: Path) -> None:
    layer_file = tmp_path / "base.pins.env"
    layer_file.write_text("CUDA_VERSION=12.9.1\nNCCL_VERSION=2.30.7\nNVSHMEM_VERSION=3.4.5\n")
    report_path = tmp_path / "r.json"
    main(["guard", "--pins", str(layer_file), "--layer", "python", "--json", str(report_path)])
    rows = [c.component for c in GUARD_REPORT.read(report_path).checks]
    assert rows[:2] == ["nvidia-nccl-cu12", "nvidia-nvshmem-cu12"]


def test_bad_pins_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["guard", "--pins", str(pins_variant(tmp_path, NCCL_VERSION="2.28.9"))]) == 2
    assert "NCCL_VERSION" in capsys.readouterr().err
    assert main(["guard", "--pins", str(tmp_path / "missing.env")]) == 2


# ---- NCCL: the loaded library, not torch's compile-time number --------------------------------


def test_nccl_version_from_real_libraries(fake_nccl: dict[str, Path]) -> None:
    assert nccl_version(fake_nccl["2.28.9"]) == "2.28.9"
    assert nccl_version(fake_nccl["2.30.7"]) == "2.30.7"


LOAD_AND_CHECK = """
import ctypes, json, sys
from pathlib import Path
from epstack.guard.libraries import check_nccl_loaded
for library in sys.argv[1:]:
    ctypes.CDLL(library)  # as `import torch` loads the libnccl.so.2 it finds first
print(json.dumps(check_nccl_loaded("2.30.7", Path("/proc/self/maps").read_text()).__dict__))
"""


@pytest.mark.parametrize(
    ("loaded", "found", "verdict"),
    [
        (["2.28.9"], "2.28.9", "mismatch"),
        (["2.30.7"], "2.30.7", "ok"),
        (["2.28.9", "2.30.7"], "2 libnccl mapped: ", "mismatch"),
    ],
)
def test_guard_reads_the_nccl_mapped_into_the_process(
    fake_nccl: dict[str, Path], loaded: list[str], found: str, verdict: str
) -> None:
    paths = [str(fake_nccl[version]) for version in loaded]
    result = subprocess.run(
        [sys.executable, "-c", LOAD_AND_CHECK, *paths], capture_output=True, text=True, check=True, cwd=REPO
    )
    check = json.loads(result.stdout)
    assert (check["expected"], check["verdict"]) == ("2.30.7", verdict)
    if len(loaded) == 1:
        assert check["found"] == found
    else:  # each library's own version, in the order mapped
        assert check["found"].startswith(found) and sorted(check["found"][len(found) :].split(", ")) == loaded
    assert all(path in check["detail"] for path in paths)


def test_two_libnccl_in_maps_text_is_a_mismatch() -> None:
    maps = (
        "7f0000000000-7f0000001000 r-xp 00000000 08:01 1 /venv/nvidia/nccl/lib/libnccl.so.2\n"
        "7f0000001000-7f0000002000 r--p 00001000 08:01 1 /venv/nvidia/nccl/lib/libnccl.so.2\n"
        "7f0000002000-7f0000003000 r-xp 00000000 08:01 2 /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9\n"
        "7f0000003000-7f0000004000 rw-p 00000000 00:00 0 \n"
    )
    check = check_nccl_loaded("2.30.7", maps)
    assert (check.found, check.verdict) == ("2 libnccl mapped: unreadable, unreadable", "mismatch")
    assert check_nccl_loaded("2.30.7", maps.splitlines()[-1]).verdict == "missing"


def test_the_nccl_deep_ep_links_must_be_the_one_loaded(fake_nccl: dict[str, Path], tmp_path: Path) -> None:
    """A real _C.so linked, with an rpath, to one libnccl.so.2: ok when that one is mapped, a mismatch
    when the process mapped another, missing when the extension needs no NCCL."""
    pinned = fake_nccl["2.30.7"]
    extension = tmp_path / "_C.so"
    source = tmp_path / "ext.c"
    source.write_text("int ncclGetVersion(int *);\nint version(int *v) { return ncclGetVersion(v); }\n")
    subprocess.run(
        [compiler("gcc"), "-shared", "-fPIC", "-o", extension, source,
         f"-L{pinned.parent}", "-l:libnccl.so.2", f"-Wl,-rpath,{pinned.parent}"],
        check=True,
    )  # fmt: skip

    def maps(library: Path) -> str:
        return f"7f0000000000-7f0000001000 r-xp 00000000 08:01 1 {library}\n"

    check = check_nccl_link(extension, maps(pinned))
    assert (check.found, check.verdict) == (str(pinned), "ok")
    other = check_nccl_link(extension, maps(fake_nccl["2.28.9"]))
    assert (other.expected, other.found, other.verdict) == (str(fake_nccl["2.28.9"]), str(pinned), "mismatch")
    unlinked = tmp_path / "plain.so"
    empty = tmp_path / "empty.c"
    empty.write_text("")
    subprocess.run([compiler("gcc"), "-shared", "-fPIC", "-o", unlinked, empty], check=True)
    assert check_nccl_link(unlinked, maps(pinned)).verdict == "missing"
    assert check_nccl_link(None, maps(pinned)).found == "no _C.so"


# ---- libstdc++ interposition ------------------------------------------------------------------


@pytest.fixture(scope="module")
def extensions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two real _C.so: one exporting libstdc++'s codecvt (-static-libstdc++), one importing it."""
    out = tmp_path_factory.mktemp("ext")
    built = {}
    for name, flags in (("interposing", ["-static-libstdc++"]), ("clean", [])):
        built[name] = out / f"_C.{name}.so"
        source = FIXTURES / "uses_locale.cpp"
        subprocess.run([compiler("g++"), "-shared", "-fPIC", *flags, "-o", built[name], source], check=True)
    return built


def test_libstdcxx_exports_are_told_apart(extensions: dict[str, Path]) -> None:
    compiler("nm")
    bad = check_libstdcxx(extensions["interposing"])
    assert bad.verdict == "mismatch" and LIBSTDCXX_FIX in bad.detail and "codecvt" in bad.found
    assert check_libstdcxx(extensions["clean"]).verdict == "ok"


def test_libstdcxx_check_skips_without_nm(
    extensions: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    check = check_libstdcxx(extensions["interposing"])
    assert check.verdict == "skipped" and "nm" in check.detail


# ---- Python distributions and their own requirements ------------------------------------------


def test_torch_with_an_older_nccl_requirement_is_an_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nccl = 'nvidia-nccl-cu13==2.28.9; platform_system == "Linux"'
    write_dist(
        tmp_path, "torch", "2.11.0+cu130", ("torch/__init__.py",), (nccl, "filelock", 'foo; extra == "x"')
    )
    write_dist(tmp_path, "nvidia-nccl-cu13", "2.30.7", ("nvidia/nccl/include/nccl.h",))
    monkeypatch.syspath_prepend(str(tmp_path))
    expected = load_expected(PINS, ["python", "base"])  # what `guard --layer base` compares with
    assert check_distribution("torch", "2.11.0").verdict == "ok"
    assert check_distribution("torch", "2.14.1").verdict == "mismatch"
    assert check_distribution("nvidia-nccl-cu13", "2.30.7").verdict == "ok"
    assert check_torch_cuda(expected, None, "not imported").verdict == "ok"  # the +cu130 tag decides
    (row,) = check_requirements("torch", {"nvidia-nccl-cu13": "2.30.7", "torch": "2.11.0"})
    assert (row.component, row.found, row.verdict) == (
        "torch requires nvidia-nccl-cu13",
        "==2.28.9",
        "override (pinned)",
    )
    assert not row.failed
    assert check_requirements("torch", {"nvidia-nccl-cu13": "2.28.9"})[0].verdict == "ok"


def test_torch_without_local_tag_and_not_importable_is_a_mismatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_dist(tmp_path, "torch", "2.14.1", ("torch/__init__.py",))
    monkeypatch.syspath_prepend(str(tmp_path))
    check = check_torch_cuda(load_expected(PINS, ["python", "base"]), None, "ImportError: boom")
    assert check.verdict == "mismatch" and "boom" in check.detail


# ---- deep_ep ----------------------------------------------------------------------------------


def test_second_distribution_owning_deep_ep_is_a_mismatch(tmp_path: Path) -> None:
    write_dist(
        tmp_path, "deep_ep", "2.0.0", ("deep_ep/__init__.py", "deep_ep/_C.cpython-312-x86_64-linux-gnu.so")
    )
    write_dist(tmp_path, "unrelated", "1.0", ("unrelated/__init__.py",))
    owners = deep_ep_owners(metadata.distributions(path=[str(tmp_path)]))
    assert list(owners) == ["deep_ep"] and owners["deep_ep"][1].name.startswith("_C.")
    assert check_deep_ep_owner(owners).verdict == "ok"
    write_dist(tmp_path, "sgl-deep-ep", "0.1.2.post1", ("deep_ep/__init__.py", "deep_ep/buffer.py"))
    check = check_deep_ep_owner(deep_ep_owners(metadata.distributions(path=[str(tmp_path)])))
    assert (check.verdict, check.found) == ("mismatch", "deep_ep, sgl-deep-ep")
    assert check_deep_ep_owner({}).verdict == "missing"


def test_deep_ep_source_manifest(tmp_path: Path) -> None:
    expected = load_expected(PINS, ["python", "base", "deepep"])  # what `guard --layer deepep` compares with
    manifest = tmp_path / "deepep-source.json"
    assert check_deep_ep_source(expected, manifest).verdict == "missing"
    write_deepep_manifest(manifest, repo=expected.deepep_repo, commit=SHA)
    assert check_deep_ep_source(expected, manifest).verdict == "ok"
    write_deepep_manifest(manifest, repo=expected.deepep_repo, commit="dd758ca" + "0" * 33)
    assert check_deep_ep_source(expected, manifest).verdict == "mismatch"
    manifest.write_text("{not json")
    assert check_deep_ep_source(expected, manifest).found == "unreadable manifest"


def test_a_manifest_of_an_older_epstack_fails_the_source_row_and_says_why(tmp_path: Path) -> None:
    """A manifest without a schema (as epstack wrote them before) is unreadable, named with its fix."""
    expected = load_expected(PINS, ["python", "base", "deepep"])  # what `guard --layer deepep` compares with
    manifest = tmp_path / "deepep-source.json"
    manifest.write_text(
        json.dumps({"repo": expected.deepep_repo, "commit": SHA, "torch_cuda_arch_list": "9.0a"})
    )
    check = check_deep_ep_source(expected, manifest)
    assert (check.found, check.verdict) == ("unreadable manifest", "mismatch")
    assert check.detail.startswith(f"{manifest}: no schema, so not a deep_ep source manifest")
    assert "fix: rebuild the deepep layer" in check.detail


def test_nvshmem_headers_are_read_not_the_wheel_metadata(tmp_path: Path) -> None:
    header = tmp_path / "nvshmem_version.h"
    assert check_nvshmem_headers("3.4.5", header).verdict == "missing"
    defines = "#define NVSHMEM_VENDOR_MAJOR_VERSION {}\n#define NVSHMEM_VENDOR_MINOR_VERSION {}\n"
    defines += "#define NVSHMEM_VENDOR_PATCH_VERSION {}\n#define NVSHMEM_VENDOR_PACKAGE_VERSION 0\n"
    header.write_text("#pragma once\n" + defines.format(3, 4, 5))
    assert check_nvshmem_headers("3.4.5", header).verdict == "ok"
    header.write_text("#pragma once\n" + defines.format(3, 3, 24))
    check = check_nvshmem_headers("3.4.5", header)
    assert (check.verdict, check.found) == ("mismatch", "3.3.24")


def test_jit_prerequisites(tmp_path: Path) -> None:
    cuda = tmp_path / "cuda"
    for tool in ("nvcc", "cuobjdump"):
        (cuda / "bin").mkdir(parents=True, exist_ok=True)
        (cuda / "bin" / tool).write_text("#!/bin/sh\n")
        (cuda / "bin" / tool).chmod(0o755)
    (cuda / "include").mkdir()
    (cuda / "include" / "cuda.h").write_text("")
    nccl_h = tmp_path / "nccl.h"
    nccl_h.write_text("")
    env = {"CUDA_HOME": str(cuda), "PATH": "", "EP_JIT_CACHE_DIR": str(tmp_path / "cache" / "deep_ep")}
    assert [c.verdict for c in check_jit_prerequisites(env, nccl_h)] == ["ok"] * 5
    (cuda / "bin" / "nvcc").unlink()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache").chmod(0o500)
    rows = {c.component: c.verdict for c in check_jit_prerequisites(env, None)}
    assert rows["nvcc"] == "missing" and rows["NCCL headers"] == "missing"
    if os.geteuid() != 0:  # root writes anywhere
        assert rows["EP_JIT_CACHE_DIR"] == "mismatch"
