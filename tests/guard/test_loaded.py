"""Native libraries as a process has them: the paths /proc/self/maps names, and the versions their own
calls answer. Real shared libraries built here with gcc (NCCL's, the CUDA runtime's and the driver's
version entry points, answering as told), real nm and ldd output, and maps text as Linux writes it."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from epstack.guard.loaded import (
    cuda_device_problem,
    cuda_driver_version,
    decode_cuda_version,
    decode_nccl_version,
    defined_symbols,
    interposed_symbols,
    interposition_example,
    library_version,
    libstdcxx_interposition,
    linked_library,
    mapped_libraries,
    nccl_version,
)
from tests.conftest import REPO
from tests.guard.test_guard import compiler

# A NULL pointer is refused as the real libraries refuse it (ncclInvalidArgument, CUDA_ERROR_INVALID_VALUE).
FAKE_LIBRARY = """
int ncclGetVersion(int *version) { if (!version) return 4; *version = NCCL; return STATUS; }
int cudaRuntimeGetVersion(int *version) { if (!version) return 1; *version = RUNTIME; return STATUS; }
int cuDriverGetVersion(int *version) { if (!version) return 1; *version = DRIVER; return STATUS; }
int cuInit(unsigned flags) { return INIT; }
int cuDeviceGetCount(int *count) { if (!count) return 1; *count = DEVICES; return COUNT_STATUS; }
"""


def fake_library(
    folder: Path,
    name: str,
    *,
    nccl: int = 23007,
    runtime: int = 13000,
    driver: int = 13020,
    status: int = 0,
    init: int = 0,
    devices: int = 8,
    count_status: int = 0,
) -> Path:
    """A real shared library `folder/name` with the version and device calls, answering as told."""
    folder.mkdir(parents=True, exist_ok=True)
    source, library = folder / f"{name}.c", folder / name
    source.write_text(FAKE_LIBRARY)
    values = {"NCCL": nccl, "RUNTIME": runtime, "DRIVER": driver, "STATUS": status, "INIT": init}
    values |= {"DEVICES": devices, "COUNT_STATUS": count_status}
    defines = [f"-D{key}={value}" for key, value in values.items()]
    subprocess.run([compiler("gcc"), "-shared", "-fPIC", *defines, "-o", library, source], check=True)
    return library


def maps_line(path: str | Path, start: int = 0x7F0000000000, perms: str = "r-xp") -> str:
    return f"{start:x}-{start + 0x1000:x} {perms} 00000000 08:01 1234                       {path}\n"


# ---- mapped libraries --------------------------------------------------------------------------


def test_mapped_libraries_are_the_distinct_paths_whose_file_name_starts_with_the_prefix() -> None:
    maps = (
        maps_line("/venv/nvidia/nccl/lib/libnccl.so.2", 0x7F0000000000)
        + maps_line("/venv/nvidia/nccl/lib/libnccl.so.2", 0x7F0000001000, "r--p")
        + maps_line("/opt/aws-ofi-nccl/lib/libnccl-net-ofi.so", 0x7F0000002000)
        + maps_line("/usr/lib/libnccl.so.d/libother.so", 0x7F0000003000)
        + "7f0000004000-7f0000005000 rw-p 00000000 00:00 0 \n"
        + maps_line("/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9", 0x7F0000006000)
        + maps_line("/tmp/old/libnccl.so.2 (deleted)", 0x7F0000007000)
    )
    assert mapped_libraries(maps, "libnccl.so") == [
        "/venv/nvidia/nccl/lib/libnccl.so.2",
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9",
        "/tmp/old/libnccl.so.2 (deleted)",
    ], "libnccl-net-ofi.so is a plugin, not an NCCL; a folder's name is not the file's"
    assert mapped_libraries(maps, "libcudart.so") == []
    assert mapped_libraries("", "libnccl.so") == []


def test_an_anonymous_mapping_names_no_library() -> None:
    """Five fields: no path, even where the prefix would match the last one."""
    assert mapped_libraries("7f0000004000-7f0000005000 rw-p 00000000 00:00 libnccl.so\n", "libnccl.so") == []


# ---- version calls -----------------------------------------------------------------------------


def test_a_librarys_own_version_call_answers(tmp_path: Path) -> None:
    library = fake_library(tmp_path, "libfake.so", nccl=23007, runtime=12080, driver=13020)
    assert library_version(library, "ncclGetVersion") == 23007
    assert library_version(str(library), "cudaRuntimeGetVersion") == 12080
    assert library_version(library, "cuDriverGetVersion") == 13020
    assert nccl_version(library) == "2.30.7"


def test_a_failing_version_call_raises_naming_the_call_and_its_status(tmp_path: Path) -> None:
    library = fake_library(tmp_path, "libfake.so", status=3)
    with pytest.raises(OSError, match=r"^ncclGetVersion returned 3$"):
        library_version(library, "ncclGetVersion")
    with pytest.raises(OSError, match=r"^cuDriverGetVersion returned 3$"):
        library_version(library, "cuDriverGetVersion")


def test_a_library_without_the_call_or_no_library_raises(tmp_path: Path) -> None:
    library = fake_library(tmp_path, "libfake.so")
    with pytest.raises(AttributeError):
        library_version(library, "ncclCommInitRank")
    with pytest.raises(OSError, match=r"libabsent\.so"):
        library_version(tmp_path / "libabsent.so", "ncclGetVersion")


@pytest.mark.parametrize(
    ("code", "version"),
    [(13000, "13.0"), (12080, "12.8"), (12090, "12.9"), (13020, "13.2"), (11040, "11.4"), (12100, "12.10")],
)
def test_cuda_versions_decode_as_cuda_encodes_them(code: int, version: str) -> None:
    assert decode_cuda_version(code) == version


@pytest.mark.parametrize(
    ("code", "version"),
    [(23007, (2, 30, 7)), (22809, (2, 28, 9)), (21903, (2, 19, 3)), (2708, (2, 7, 8)), (10000, (1, 0, 0))],
)
def test_nccl_versions_decode_in_both_encodings(code: int, version: tuple[int, int, int]) -> None:
    """2.9 and later: major*10000 + minor*100 + patch; before: major*1000 + minor*100 + patch."""
    assert decode_nccl_version(code) == version


def test_nccl_version_is_dotted_text(tmp_path: Path) -> None:
    assert nccl_version(fake_library(tmp_path, "libnccl.so.2", nccl=22809)) == "2.28.9"
    assert nccl_version(fake_library(tmp_path / "old", "libnccl.so.2", nccl=2708)) == "2.7.8"


# ---- the driver --------------------------------------------------------------------------------


def test_the_drivers_cuda_version_or_none_without_a_driver(tmp_path: Path) -> None:
    assert cuda_driver_version(str(fake_library(tmp_path, "libcuda.so.1", driver=13020))) == "13.2"
    assert cuda_driver_version(str(tmp_path / "absent" / "libcuda.so.1")) is None
    failing = fake_library(tmp_path / "failing", "libcuda.so.1", status=100)
    assert cuda_driver_version(str(failing)) is None
    (tmp_path / "nosym.c").write_text("int other(void) { return 0; }\n")
    nosym = tmp_path / "libnosym.so"
    subprocess.run([compiler("gcc"), "-shared", "-fPIC", "-o", nosym, tmp_path / "nosym.c"], check=True)
    assert cuda_driver_version(str(nosym)) is None


@pytest.mark.parametrize(
    ("answers", "problem"),
    [
        ({}, ""),
        ({"init": 100}, "no GPU: cuInit returned 100"),
        ({"devices": 0}, "no GPU: cuDeviceGetCount returned 0, 0 devices"),
        ({"count_status": 3, "devices": 2}, "no GPU: cuDeviceGetCount returned 3, 2 devices"),
    ],
)
def test_why_a_process_has_no_gpu_as_torch_decides_it(
    tmp_path: Path, answers: dict[str, int], problem: str
) -> None:
    assert cuda_device_problem(str(fake_library(tmp_path, "libcuda.so.1", **answers))) == problem


def test_no_driver_library_is_no_gpu_naming_the_loader_error(tmp_path: Path) -> None:
    problem = cuda_device_problem(str(tmp_path / "libcuda.so.1"))
    assert problem.startswith(f"no GPU: {tmp_path / 'libcuda.so.1'}: cannot open shared object file")


DEFAULT_DRIVER = """
import json
from epstack.guard.loaded import cuda_device_problem, cuda_driver_version
print(json.dumps([cuda_driver_version(), cuda_device_problem()]))
"""


def test_the_driver_is_the_libcuda_so_1_the_loader_finds(tmp_path: Path) -> None:
    """As the NVIDIA container runtime mounts it: libcuda.so.1 on the loader's path."""
    if ctypes.util.find_library("cuda") is None:  # this host has no driver: the default finds none
        assert cuda_driver_version() is None
        assert cuda_device_problem().startswith("no GPU: libcuda.so.1: cannot open shared object file")
    fake_library(tmp_path, "libcuda.so.1", driver=12090, init=100)
    result = subprocess.run(
        [sys.executable, "-c", DEFAULT_DRIVER],
        env={**os.environ, "LD_LIBRARY_PATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    assert result.stdout.strip() == '["12.9", "no GPU: cuInit returned 100"]'


# ---- libstdc++ interposition -------------------------------------------------------------------

NM_OURS = """
0000000000012340 T _ZNSt6locale7classicEv@@GLIBCXX_3.4
0000000000012350 W _ZNSt6vectorIiSaIiEE9push_backERKi
0000000000012360 W _ZNKSt7codecvtIcc11__mbstate_tE10do_unshiftERS0_PcS3_RS3_
0000000000012370 T deep_ep_entry
0000000000012380 V _ZTVSt9bad_alloc
A GLIBCXX_3.4
_C.so:
0000000000012390 TT not_a_type_letter
TT not_a_type_letter_either
"""


def test_nm_lines_become_symbols_and_their_type_letters() -> None:
    assert defined_symbols(NM_OURS) == {
        "_ZNSt6locale7classicEv": "T",
        "_ZNSt6vectorIiSaIiEE9push_backERKi": "W",
        "_ZNKSt7codecvtIcc11__mbstate_tE10do_unshiftERS0_PcS3_RS3_": "W",
        "deep_ep_entry": "T",
        "_ZTVSt9bad_alloc": "V",
        "GLIBCXX_3.4": "A",
    }
    assert defined_symbols("0000000000000010 i _ZNSt5ctypeIcE2idE@GLIBCXX_3.4 extra\n") == {
        "_ZNSt5ctypeIcE2idE": "i"
    }
    assert defined_symbols("A CXXABI_1.3@@CXXABI_1.3\n") == {"CXXABI_1.3": "A"}, "no address column"


def test_what_libstdcxx_also_defines_strongly_or_any_codecvt_is_interposed() -> None:
    theirs = """
0000000000099990 T _ZNSt6locale7classicEv@@GLIBCXX_3.4
0000000000099991 W _ZNSt6vectorIiSaIiEE9push_backERKi
0000000000099992 T _ZNKSt7codecvtIcc11__mbstate_tE10do_unshiftERS0_PcS3_RS3_@@GLIBCXX_3.4
0000000000099993 V _ZTVSt9bad_alloc@@GLIBCXX_3.4
"""
    assert interposed_symbols(NM_OURS, theirs) == [
        "_ZNKSt7codecvtIcc11__mbstate_tE10do_unshiftERS0_PcS3_RS3_",
        "_ZNSt6locale7classicEv",
    ], "weak vector members and a weak vtable are any C++ extension's; deep_ep_entry is not libstdc++'s"
    assert interposed_symbols(NM_OURS, "") == [], "a libstdc++ exporting nothing is interposed on by nothing"


@pytest.mark.parametrize("prefix", ["_ZNSt", "_ZNKSt", "_ZSt", "_ZTVSt", "_ZTISt", "_ZTSSt", "_ZGVNSt"])
def test_without_libstdcxxs_list_strong_std_definitions_are_the_evidence(prefix: str) -> None:
    symbol = f"{prefix}9exampleEv"
    ours = f"0000000000000010 T {symbol}\n0000000000000020 W {prefix}4weakEv\n0000000000000030 T plain_c\n"
    assert interposed_symbols(ours, None) == [symbol]


def test_without_libstdcxxs_list_a_weak_codecvt_counts_and_a_non_std_codecvt_does_not() -> None:
    ours = (
        "0000000000000010 W _ZNKSt7codecvtIwc11__mbstate_tE5do_inERS0_\n"
        "0000000000000020 T my_codecvt_helper\n"
        "0000000000000030 D _ZNSt8ios_base4Init11_S_refcountE\n"
        "0000000000000040 B _ZSt4cout\n"
        "0000000000000050 R _ZTSSt9exception\n"
    )
    assert interposed_symbols(ours, None) == [
        "_ZNKSt7codecvtIwc11__mbstate_tE5do_inERS0_",
        "_ZNSt8ios_base4Init11_S_refcountE",
        "_ZSt4cout",
        "_ZTSSt9exception",
    ]


def test_the_symbol_named_is_a_codecvt_one_where_there_is_one() -> None:
    assert interposition_example(["_ZNSt6locale7classicEv", "_ZNKSt7codecvtIcc", "_ZNKSt7codecvtIwc"]) == (
        "_ZNKSt7codecvtIcc"
    )
    assert interposition_example(["_ZNSt6locale7classicEv", "_ZSt4cout"]) == "_ZNSt6locale7classicEv"


def shared_object(folder: Path, name: str, source: str, *flags: str, cxx: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (name + (".cpp" if cxx else ".c"))
    path.write_text(source)
    out = folder / f"{name}.so"
    subprocess.run(
        [compiler("g++" if cxx else "gcc"), "-shared", "-fPIC", "-o", out, path, *flags], check=True
    )
    return out


def test_the_library_the_loader_resolves_a_needed_one_to(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    compiler("ldd")
    helper = shared_object(tmp_path / "lib", "libhelper", "int helper(void) { return 1; }\n")
    (tmp_path / "lib" / "libhelper.so").rename(tmp_path / "lib" / "libhelper.so.1")
    uses = "int helper(void);\nint use(void) { return helper(); }\n"
    linked = shared_object(
        tmp_path, "_C", uses, f"-L{helper.parent}", "-l:libhelper.so.1", f"-Wl,-rpath,{helper.parent}"
    )
    missing = shared_object(tmp_path / "norpath", "_C", uses, f"-L{helper.parent}", "-l:libhelper.so.1")
    capfd.readouterr()
    assert linked_library(linked, "libhelper") == str(tmp_path / "lib" / "libhelper.so.1")
    assert linked_library(missing, "libhelper") is None, "ldd says `not found`: no file to name"
    assert linked_library(linked, "libstdc++") is None, "a C extension needs no libstdc++"
    assert capfd.readouterr() == ("", ""), "ldd runs quietly: the guard's table is the only output"


CODECVT = "_ZNKSt7codecvtIcc11__mbstate_tE10do_unshiftERS0_PcS3_RS3_"


def test_an_extension_defining_libstdcxxs_own_symbols_interposes_on_the_libstdcxx_it_loads(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A C extension that needs libstdc++.so.6 (as a C++ one does) and defines its codecvt strongly;
    and one defining only its own symbols."""
    compiler("nm")
    source = f"int {CODECVT}(void) {{ return 0; }}\nint deep_ep_entry(void) {{ return 1; }}\n"
    needs_libstdcxx = ("-Wl,--no-as-needed", "-lstdc++")
    bad = shared_object(tmp_path / "bad", "_C", source, *needs_libstdcxx)
    assert linked_library(bad, "libstdc++") is not None
    capfd.readouterr()
    assert libstdcxx_interposition(bad) == [CODECVT]
    assert capfd.readouterr() == ("", ""), "nm runs quietly: the guard's table is the only output"
    subprocess.run([compiler("strip"), bad], check=True)
    assert libstdcxx_interposition(bad) == [CODECVT], "a stripped extension still exports what it defines"
    clean = shared_object(
        tmp_path / "clean", "_C", "int deep_ep_entry(void) { return 1; }\n", *needs_libstdcxx
    )
    assert libstdcxx_interposition(clean) == []


def test_a_statically_linked_libstdcxx_is_judged_by_its_strong_std_definitions(tmp_path: Path) -> None:
    compiler("nm")
    source = '#include <locale>\nextern "C" int uses(void) { return std::locale::classic().name().size(); }\n'
    static = shared_object(tmp_path, "_C", source, "-static-libstdc++", cxx=True)
    assert linked_library(static, "libstdc++") is None
    found = libstdcxx_interposition(static)
    assert any("codecvt" in symbol for symbol in found) and all(symbol.startswith("_Z") for symbol in found)


def test_what_libstdcxx_only_imports_is_not_libstdcxxs(tmp_path: Path) -> None:
    """The unwinder is libgcc's: libstdc++ needs it, an extension built with -static-libgcc defines it."""
    compiler("nm")
    source = "int _Unwind_GetRegionStart(void) { return 0; }\n"
    extension = shared_object(tmp_path, "_C", source, "-Wl,--no-as-needed", "-lstdc++")
    assert libstdcxx_interposition(extension) == []
