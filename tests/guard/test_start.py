"""The guard at container start: the build's record trusted while it holds; a start refused where a file
or folder of its trees is not as the build left it (named, with how), or a refused variable is set
otherwise; the full guard only where the record cannot judge (no record, other pins, a JIT's compiler
set otherwise); and the rows checked live (the driver, through a gcc-built libcuda; DeepEP's JIT
cache). The built images' start is in tests/image/test_docker_build.py."""

from __future__ import annotations

import os
import py_compile
import subprocess
import time
from pathlib import Path
from py_compile import PycInvalidationMode

import pytest

from epstack.checkrow import Check
from epstack.commands.main import main
from epstack.guard import fingerprint, start
from epstack.guard.changes import WRITTEN, Change
from epstack.guard.environment import HELD
from epstack.guard.libraries import LoadedRuntime, live_cuda_rows
from epstack.guard.record import (
    GUARD_RECORD,
    listing_path,
    read_record,
    record_path,
    write_record,
)
from epstack.guard.report import GUARD_REPORT, GuardReport
from epstack.guard.start import CHANGED, PROVEN, SHOWN, Refused, Trusted, judge_start
from epstack.jit import flashinfer
from tests.conftest import PINS
from tests.guard.test_guard import compiler

LAYER = "sglang"
BUILT_ROWS = (
    Check(component="torch", expected="2.14.1", found="2.14.1", verdict="ok", layer="base"),
    Check(component="CUDA runtime/driver", expected="13.0", found="-", verdict="skipped", layer="base"),
    Check(component="EP_JIT_CACHE_DIR", expected="writable", found="", verdict="ok", layer="deepep"),
    Check(component="sglang", expected="0.5", found="0.5", verdict="ok", detail="dist-info", layer="sglang"),
)


@pytest.fixture
def image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An image's epstack home (venv, tool, reports), a CUDA_HOME and DeepEP's cache, as env names them."""
    home = tmp_path / "home"
    for part in ("venv/lib/site-packages/torch", "tool/epstack", "reports"):
        (home / part).mkdir(parents=True)
    (home / "venv/lib/site-packages/torch/__init__.py").write_text("version = '2.14.1'\n")
    (tmp_path / "cuda/bin").mkdir(parents=True)
    (tmp_path / "cuda/bin/nvcc").write_text("nvcc")
    (tmp_path / "cache").mkdir()
    for key, value in {
        "EPSTACK_HOME": home,
        "VIRTUAL_ENV": home / "venv",
        "EPSTACK_REPORTS": home / "reports",
        "CUDA_HOME": tmp_path / "cuda",
        "EP_JIT_CACHE_DIR": tmp_path / "cache",
    }.items():
        monkeypatch.setenv(key, str(value))
    for key in (
        "LD_PRELOAD",
        "LD_AUDIT",
        "EPSTACK_CUDA_STUB",
        "EPSTACK_LOCKS",
        "PYTHONPATH",
        "NCCL_NET_PLUGIN",
    ):
        monkeypatch.delenv(key, raising=False)
    return home


def build(home: Path) -> Path:
    """What guard-layer.sh leaves: the passing report and the record of it."""
    report = home / "reports" / f"{LAYER}.json"
    report.write_text(GuardReport(pins=PINS, layer=LAYER, checks=BUILT_ROWS).to_json())
    write_record(layer=LAYER, pins=PINS, locks=None, report=report, env=os.environ)
    return report


def judge(home: Path, pins: Path = PINS) -> Trusted | Refused | str:
    return judge_start(pins, LAYER, None, os.environ)


def changes(home: Path) -> list[Change]:
    """What a refused start names (nothing where it is not refused)."""
    judged = judge(home)
    return list(judged.changes) if isinstance(judged, Refused) else []


def test_an_unchanged_image_is_trusted(image: Path) -> None:
    build(image)
    assert isinstance(judge(image), Trusted)
    record = GUARD_RECORD.read(record_path(LAYER))
    assert [tree.root for tree in record.trees][:2] == [str(image / "venv"), str(image)]
    assert record.env["CUDA_HOME"] == os.environ["CUDA_HOME"] and "LD_PRELOAD" not in record.env


def test_a_file_added_is_refused_by_name(image: Path) -> None:
    build(image)
    (image / "venv/lib/site-packages/torch/extra.so").write_bytes(b"\0")
    site = image / "venv/lib/site-packages/torch"
    assert changes(image) == [Change(path=str(site / "extra.so"), kind="added")]


def test_a_pth_added_is_named_first_among_many(image: Path) -> None:
    build(image)
    site = image / "venv/lib/site-packages"
    for index in range(SHOWN + 5):
        (site / "torch" / f"extra{index:02}.py").write_text("")
    (site / "zz.pth").write_text("import os\n")
    judged = judge(image)
    assert isinstance(judged, Refused)
    assert judged.changes[0] == Change(path=str(site / "zz.pth"), kind="added")
    assert judged.summary() == f"{SHOWN + 6} files or folders changed since it"
    lines = judged.lines()
    assert lines[0] == f"{site / 'zz.pth'}: added" and lines[-1] == "and 6 more (all in the --json report)"


def test_a_file_changed_in_place_at_the_same_size_is_named_with_its_mtime(image: Path) -> None:
    build(image)
    module = image / "venv/lib/site-packages/torch/__init__.py"
    before = module.stat().st_mtime_ns // 1_000_000_000
    module.write_text("version = '2.99.1'\n")
    os.utime(module, (before + 5, before + 5))
    (kind,) = [c.kind for c in changes(image)]
    assert kind.startswith("mtime ") and "size" not in kind


def test_a_sub_second_mtime_as_a_pushed_layer_truncates_it_is_no_change(image: Path) -> None:
    module = image / "venv/lib/site-packages/torch/__init__.py"
    whole = module.stat().st_mtime_ns // 1_000_000_000 * 1_000_000_000
    os.utime(module, ns=(whole + 700_000_000, whole + 700_000_000))
    build(image)
    os.utime(module, ns=(whole, whole))
    assert isinstance(judge(image), Trusted)


def test_reports_and_the_sbom_are_no_change_bytecode_is(image: Path) -> None:
    build(image)
    (image / "sbom").mkdir()  # `epstack image sbom` runs after guard-layer.sh
    (image / "sbom/sglang.cdx.json").write_text("{}")
    (image / "reports/start.json").write_text("{}")
    assert isinstance(judge(image), Trusted)
    cache = image / "venv/lib/site-packages/torch/__pycache__"
    cache.mkdir()
    (cache / "__init__.cpython-312.pyc").write_bytes(b"pyc")
    assert changes(image) == [Change(path=str(cache), kind="added (folder)")]


def test_cuda_home_and_the_tool_are_covered(image: Path, tmp_path: Path) -> None:
    build(image)
    (tmp_path / "cuda/bin/ptxas").write_text("ptxas")
    (image / "tool/epstack/guard.py").write_text("")
    assert changes(image) == [
        Change(path=str(tmp_path / "cuda/bin/ptxas"), kind="added"),
        Change(path=str(image / "tool/epstack/guard.py"), kind="added"),
    ]


def test_the_trees_walked_are_the_builds_whatever_the_variables_say_now(
    image: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """VIRTUAL_ENV and EPSTACK_HOME elsewhere neither hide the image's venv nor its tool from the start."""
    build(image)
    (image / "venv/lib/site-packages/torch/extra.py").write_text("")
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("VIRTUAL_ENV", str(tmp_path / "empty"))
    judged = judge(image)
    assert isinstance(judged, Refused)
    assert [str(c) for c in judged.changes] == [f"{image / 'venv/lib/site-packages/torch/extra.py'}: added"]
    assert [str(d) for d in judged.variables] == [
        f"VIRTUAL_ENV={tmp_path / 'empty'}, the build had {image / 'venv'}"
    ]


@pytest.mark.parametrize(
    ("variable", "value"),
    [("LD_AUDIT", "/tmp/audit.so"), ("PYTHONPYCACHEPREFIX", "/tmp/pyc"), ("GLIBC_TUNABLES", "x=1")],
)
def test_a_variable_that_changes_what_runs_is_refused(
    image: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    build(image)
    monkeypatch.setenv(variable, value)
    judged = judge(image)
    assert isinstance(judged, Refused) and judged.changes == ()
    assert [str(d) for d in judged.variables] == [f"{variable}={value}, the build had (unset)"]
    (row,) = judged.report.checks
    assert (row.component, row.expected, row.found, row.verdict) == (variable, "(unset)", value, "mismatch")


def test_a_variable_hold_env_held_is_refused_as_given(image: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hold-env put the build's value (none) in its place: the guard judges the one given."""
    build(image)
    monkeypatch.setenv(f"{HELD}LD_PRELOAD", "+/tmp/hook.so")
    judged = judge(image)
    assert isinstance(judged, Refused)
    assert [str(d) for d in judged.variables] == ["LD_PRELOAD=/tmp/hook.so, the build had (unset)"]


def test_a_jit_compiler_or_other_pins_get_the_full_guard(
    image: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    build(image)
    monkeypatch.setenv("NCCL_NET_PLUGIN", "aws-ofi")
    assert judge(image) == "NCCL_NET_PLUGIN=aws-ofi, the build had (unset)"
    monkeypatch.delenv("NCCL_NET_PLUGIN")
    other = tmp_path / "other.pins.env"
    other.write_text(PINS.read_text())
    assert judge(image, other) == f"the build recorded --pins {PINS}, this start has {other}"
    monkeypatch.setenv("NCCL_NET_PLUGIN", "aws-ofi")
    (image / "tool/epstack/extra.py").write_text("")
    assert isinstance(judge(image, other), Refused), "never a way out of a detected change"


def test_the_report_changed_is_refused(image: Path) -> None:
    report = build(image)
    report.write_text(report.read_text().replace('"ok"', '"warn"', 1))
    assert changes(image) == [Change(path=str(report), kind="content (sha256)")]


def test_without_the_builds_listing_a_change_is_still_named_by_folder(image: Path) -> None:
    build(image)
    listing_path(LAYER).write_bytes(b"not the build's")
    (image / "tool/epstack/extra.py").write_text("")
    assert changes(image) == [
        Change(path=str(image / "tool/epstack"), kind="changed (the build's listing of it is gone)")
    ]


@pytest.mark.parametrize(("text", "why"), [(None, "no build record"), ("{", "not JSON")])
def test_no_record_or_a_corrupt_one_runs_the_full_guard(
    image: Path, text: str | None, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    build(image)
    if text is None:
        record_path(LAYER).unlink()
    else:
        record_path(LAYER).write_text(text)
    out = image / "start.json"
    assert (
        main(["image", "guard", "--pins", str(PINS), "--layer", LAYER, "--at-start", "--json", str(out)]) == 1
    )
    err = capsys.readouterr().err
    assert why in err and ": full guard" in err
    components = {check.component for check in GUARD_REPORT.read(out).checks}
    assert {"deep_ep source", "nvcc (CUDA_HOME)", "NCCL (loaded)", "bytecode"} <= components, (
        "the full guard's rows"
    )


def test_a_refused_start_names_each_change_on_a_line_and_in_the_report(
    image: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    build(image)
    pth = image / "venv/lib/site-packages/evil.pth"
    pth.write_text("import os\n")
    monkeypatch.setenv("LD_AUDIT", "/tmp/audit.so")
    out = tmp_path / "start.json"
    assert (
        main(["image", "guard", "--pins", str(PINS), "--layer", LAYER, "--at-start", "--json", str(out)]) == 1
    )
    printed = capsys.readouterr().out
    assert printed.splitlines() == [
        "guard: refused: 1 variable set otherwise than the build and 1 file or folder changed since it",
        "  LD_AUDIT=/tmp/audit.so, the build had (unset)",
        f"  {pth}: added",
    ]
    rows = GUARD_REPORT.read(out).checks
    assert [(r.component, r.found, r.detail, r.verdict, r.layer) for r in rows] == [
        ("LD_AUDIT", "/tmp/audit.so", rows[0].detail, "mismatch", LAYER),
        (CHANGED, "added", str(pth), "mismatch", LAYER),
    ]
    assert rows[0].detail.startswith("audit libraries, loaded into every process first (glibc ")


def test_a_trusted_start_reports_the_builds_rows_and_checks_the_rest_now(
    image: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build(image)
    out = tmp_path / "start.json"
    args = ["image", "guard", "--pins", str(PINS), "--layer", LAYER, "--at-start", "--json", str(out)]
    assert main(args) == 0
    assert "full guard" not in capsys.readouterr().err
    rows = {check.component: check for check in GUARD_REPORT.read(out).checks}
    assert list(rows) == [check.component for check in BUILT_ROWS]
    assert rows["torch"].detail == PROVEN and rows["sglang"].detail == f"dist-info; {PROVEN}"
    assert (
        rows["CUDA runtime/driver"].detail.startswith("no GPU: ")
        and rows["CUDA runtime/driver"].layer == "base"
    )
    assert rows["EP_JIT_CACHE_DIR"].found == str(tmp_path / "cache"), "checked now, not the build's row"
    (tmp_path / "cache").rmdir()
    (tmp_path / "cache").write_text("a file where the cache goes")
    assert main(args) == 1
    assert GUARD_REPORT.read(out).checks[2].verdict == "mismatch"


def test_record_needs_json_and_a_failing_guard_records_nothing(
    image: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for json_to in ([], ["--json", "-"]):  # a record vouches for a report file; stdout is none
        assert main(["image", "guard", "--pins", str(PINS), "--layer", LAYER, "--record", *json_to]) == 2
        assert "--record needs --json" in capsys.readouterr().err
    out = image / "reports" / f"{LAYER}.json"
    assert (
        main(["image", "guard", "--pins", str(PINS), "--layer", LAYER, "--record", "--json", str(out)]) == 1
    )
    assert out.exists() and not record_path(LAYER).exists()


FAKE_CUDA = """
int cuInit(unsigned flags) { return INIT_STATUS; }
int cuDeviceGetCount(int *count) { *count = DEVICES; return 0; }
int cuDriverGetVersion(int *version) { *version = DRIVER; return 0; }
"""


def fake_libcuda(folder: Path, *, init: int = 0, devices: int = 8, driver: int = 13020) -> str:
    """A real shared library with the three driver calls the start makes, answering as told."""
    source, library = folder / "cuda.c", folder / f"libcuda-{init}-{devices}-{driver}.so.1"
    source.write_text(FAKE_CUDA)
    defines = [f"-DINIT_STATUS={init}", f"-DDEVICES={devices}", f"-DDRIVER={driver}"]
    subprocess.run([compiler("gcc"), "-shared", "-fPIC", *defines, "-o", library, source], check=True)
    return str(library)


RUNTIME = LoadedRuntime(version="13.0", paths=("/venv/nvidia/cu13/lib/libcudart.so.13",))


def test_the_live_driver_rows_judge_as_the_full_guard(tmp_path: Path) -> None:
    def verdicts(library: str, runtime: LoadedRuntime = RUNTIME) -> list[tuple[str, str, str]]:
        return [(row.component, row.found, row.verdict) for row in live_cuda_rows("13.0", runtime, library)]

    assert verdicts(fake_libcuda(tmp_path)) == [
        ("CUDA runtime (loaded)", "13.0", "ok"),
        ("CUDA driver", "13.2", "ok"),
    ]
    assert verdicts(fake_libcuda(tmp_path, driver=12080))[1] == ("CUDA driver", "12.8", "mismatch")
    not_loaded = LoadedRuntime(version="not loaded", paths=())
    assert verdicts(fake_libcuda(tmp_path), not_loaded)[0] == (
        "CUDA runtime (loaded)",
        "not loaded",
        "mismatch",
    )
    for library in (fake_libcuda(tmp_path, init=34), fake_libcuda(tmp_path, devices=0)):
        assert verdicts(library) == [("CUDA runtime/driver", "-", "skipped")]
    (skipped,) = live_cuda_rows("13.0", RUNTIME, fake_libcuda(tmp_path, init=34))
    assert skipped.detail == "no GPU: cuInit returned 34"
    (absent,) = live_cuda_rows("13.0", RUNTIME, str(tmp_path / "libcuda.so.1"))
    assert absent.verdict == "skipped" and "cannot open shared object file" in absent.detail


GPU_ROWS = (
    Check(component="torch", expected="2.14.1", found="2.14.1", verdict="ok", layer="base"),
    Check(component="CUDA runtime (loaded)", expected="13.0", found="13.0", verdict="ok", layer="base"),
    Check(component="CUDA driver", expected=">= 13.0", found="13.2", verdict="ok", layer="base"),
    Check(component="EP_JIT_CACHE_DIR", expected="writable", found="", verdict="ok", layer="deepep"),
    Check(component="sglang", expected="0.5", found="0.5", verdict="ok", layer="sglang"),
)


def test_a_gpu_builds_two_cuda_rows_are_replaced_once_by_the_live_ones(
    image: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = image / "reports" / f"{LAYER}.json"
    report.write_text(GuardReport(pins=PINS, layer=LAYER, checks=GPU_ROWS).to_json())
    write_record(layer=LAYER, pins=PINS, locks=None, report=report, env=os.environ)
    record = read_record(LAYER)
    assert not isinstance(record, str)
    asked: list[tuple[str, LoadedRuntime]] = []

    def live(expected: str, runtime: LoadedRuntime) -> list[Check]:
        asked.append((expected, runtime))
        return [
            Check(component="CUDA runtime (loaded)", expected=expected, found=runtime.version, verdict="ok"),
            Check(component="CUDA driver", expected=f">= {expected}", found="12.8", verdict="mismatch"),
        ]

    monkeypatch.setattr(start, "live_cuda_rows", live)
    trusted = judge(image)
    assert isinstance(trusted, Trusted)
    assert asked == [("13.0", record.cuda_runtime)], "the pinned CUDA, the runtime the build's torch mapped"
    rows = trusted.report.checks
    assert [(row.component, row.found, row.layer) for row in rows] == [
        ("torch", "2.14.1", "base"),
        ("CUDA runtime (loaded)", record.cuda_runtime.version, "base"),
        ("CUDA driver", "12.8", "base"),
        ("EP_JIT_CACHE_DIR", os.environ["EP_JIT_CACHE_DIR"], "deepep"),
        ("sglang", "0.5", "sglang"),
    ]
    assert trusted.live == 3, "two CUDA rows and the JIT cache checked now"
    assert (rows[0].detail, rows[4].detail) == (PROVEN, PROVEN)
    assert (trusted.report.pins, trusted.report.layer, trusted.report.ok) == (PINS, LAYER, False)


def test_a_start_without_a_record_is_not_judged(image: Path) -> None:
    assert judge(image) == f"no build record {record_path(LAYER)}"


def test_a_cpu_builds_rows_are_its_own_with_the_driver_and_cache_checked_now(image: Path) -> None:
    build(image)
    trusted = judge(image)
    assert isinstance(trusted, Trusted) and trusted.live == 2
    rows = trusted.report.checks
    assert [(row.component, row.verdict, row.layer) for row in rows] == [
        ("torch", "ok", "base"),
        ("CUDA runtime/driver", "skipped", "base"),
        ("EP_JIT_CACHE_DIR", "ok", "deepep"),
        ("sglang", "ok", "sglang"),
    ]
    assert rows[1].expected == "13.0" and rows[1].detail.startswith("no GPU: ")


def test_flashinfers_row_is_checked_now_where_flashinfer_will_look(
    image: Path,
) -> None:
    """The build's row said its modules were shipped; at start the row is made again, live: here no
    module is shipped where the image keeps them, which the live row says instead of the build's."""
    shipped = Check(
        component=flashinfer.COMPONENT,
        expected="FlashInfer modules for 9.0a",
        found="sampling: 9 files, 40,000,000 bytes; flashinfer 0.7.2, 9.0a, nvcc 13.0.88",
        verdict="ok",
        layer="sglang",
    )
    report = image / "reports" / f"{LAYER}.json"
    report.write_text(GuardReport(pins=PINS, layer=LAYER, checks=(*BUILT_ROWS, shipped)).to_json())
    write_record(layer=LAYER, pins=PINS, locks=None, report=report, env=os.environ)
    trusted = judge(image)
    assert isinstance(trusted, Trusted) and trusted.live == 3
    row = trusted.report.checks[-1]
    assert (row.component, row.found, row.verdict, row.layer) == (
        flashinfer.COMPONENT,
        "none shipped",
        "skipped",
        "sglang",
    )


# What the build's fingerprint cannot see, a container's own changes: the kernel's change time
# (issue 29's cases, on real files; the built image's in tests/image/test_docker_build.py).


def started_after_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """The container starts once the image is built; what follows happens in it."""
    started = time.time()
    monkeypatch.setattr(start, "container_started", lambda: started)
    time.sleep(0.05)  # past the file system's coarse clock, which stamps ctime


def test_a_rewrite_in_place_with_size_and_mtime_put_back_is_refused(
    image: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    library = image / "venv/lib/site-packages/torch/_C.so"
    library.write_bytes(b"\x7fELF" + b"\0" * 60)
    build(image)
    started_after_build(monkeypatch)
    before = library.stat()
    library.write_bytes(os.urandom(64))  # same size
    os.utime(library, ns=(before.st_atime_ns, before.st_mtime_ns))  # touch -r
    assert changes(image) == [Change(path=str(library), kind=WRITTEN)]


@pytest.mark.parametrize("mode", list(PycInvalidationMode))
def test_bytecode_written_in_the_container_is_refused_whatever_its_header(
    image: Path, monkeypatch: pytest.MonkeyPatch, mode: PycInvalidationMode
) -> None:
    """The image sets PYTHONDONTWRITEBYTECODE and ships every module compiled: Python writes none, and
    it would run any of these (an unchecked-hash one whatever the source; the others once their header
    matches the source, which says nothing of the code they hold)."""
    package = image / "venv/lib/site-packages/torch"
    (package / "__pycache__").mkdir()
    pyc = package / "__pycache__/__init__.cpython-312.pyc"
    py_compile.compile(str(package / "__init__.py"), cfile=str(pyc))
    before = pyc.stat()
    build(image)
    started_after_build(monkeypatch)
    assert isinstance(judge(image), Trusted)
    py_compile.compile(str(package / "__init__.py"), cfile=str(pyc), invalidation_mode=mode)
    os.utime(pyc, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert [c.path for c in changes(image)] == [str(pyc)]


def test_the_builds_own_files_written_in_the_container_are_refused(
    image: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build(image)
    started_after_build(monkeypatch)
    record_path(LAYER).write_text(record_path(LAYER).read_text())
    assert changes(image) == [Change(path=str(record_path(LAYER)), kind=WRITTEN)]


def test_the_loaders_preload_file_is_checked_by_content(
    image: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    preload = tmp_path / "ld.so.preload"
    monkeypatch.setattr(fingerprint, "LOADER_FILES", (str(preload),))
    build(image)
    preload.write_text("/opt/other/libnccl.so.2\n")
    assert changes(image) == [Change(path=str(preload), kind="added")]


def test_a_link_counts_as_the_file_it_names_outside_the_tree(
    image: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Ubuntu's /usr/lib/python3.12/sitecustomize.py is a link into /etc: writing through it changes
    no entry of the tree it is in."""
    outside = tmp_path / "etc-sitecustomize.py"
    outside.write_text("# site\n")
    link = image / "venv/lib/site-packages/sitecustomize.py"
    link.symlink_to(outside)
    build(image)
    outside.write_text("import os  # now\n")
    (change,) = changes(image)
    assert change.path == str(link) and change.kind.startswith("size 7 -> 17")
    outside.write_text("# site\n")
    build(image)
    started_after_build(monkeypatch)
    before = outside.stat()
    outside.write_text("# evil\n")  # its size
    os.utime(outside, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert changes(image) == [Change(path=f"{link} -> {outside}", kind=WRITTEN)]


def test_hold_envs_file_other_than_the_records_variables_is_refused(image: Path) -> None:
    """A layer that keeps LD_PRELOAD in hold-env's file would have it load before the guard."""
    build(image)
    held = image / "reports" / "held-variables"
    held.write_bytes(held.read_bytes().replace(b"LD_PRELOAD\0", b"LD_PRELOAD=/tmp/hook.so\0"))
    assert changes(image) == [Change(path=str(held), kind="content (not the record's variables)")]
