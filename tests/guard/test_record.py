"""The build's record of a passing guard and the fingerprint it compares at start: what counts as a change
(a file's name, size, whole-second mtime and mode; a library the loader resolves; a deciding variable),
what does not (a folder's own mtime, caches, the driver's libraries), and the one line naming the first
difference. Real folders under tmp_path; `ldconfig -p` as it prints."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from epstack import imagepaths
from epstack.cmd import Completed
from epstack.errors import EnvironmentProblem
from epstack.guard import record as record_module
from epstack.guard.libraries import LoadedRuntime
from epstack.guard.record import (
    BY_CONTENT,
    LIBRARY_RESOLUTION,
    GuardRecord,
    Tree,
    deciding_env,
    fingerprint,
    library_tree,
    make_record,
    read_record,
    record_path,
    sha256,
    walk,
    what_changed,
)
from tests.conftest import PINS

STDLIB = sysconfig.get_paths()["stdlib"]  # the interpreter's standard library, walked as the venv is
LAST = [LIBRARY_RESOLUTION, BY_CONTENT]


def tree_of(root: Path) -> dict[str, str]:
    return walk(root).folders


@pytest.fixture
def root(tmp_path: Path) -> Path:
    base = tmp_path / "root"
    (base / "a" / "b").mkdir(parents=True)
    (base / "a" / "b" / "lib.so").write_bytes(b"\0" * 10)
    (base / "a" / "mod.py").write_text("x = 1\n")
    (base / "top.txt").write_text("top")
    return base


def test_a_tree_has_a_digest_per_folder_named_relative_to_its_root(root: Path) -> None:
    tree = walk(root)
    assert tree.root == str(root)
    assert set(tree.folders) == {".", "a", "a/b"}
    assert all(len(digest) == 16 and int(digest, 16) >= 0 for digest in tree.folders.values())
    assert len(set(tree.folders.values())) == 3
    assert walk(root) == tree, "the same files: the same fingerprint"


def test_a_file_resized_renamed_or_rechmoded_changes_its_folders_digest_only(root: Path) -> None:
    before = tree_of(root)
    lib = root / "a" / "b" / "lib.so"
    stat = lib.stat()
    lib.write_bytes(b"\0" * 11)
    os.utime(lib, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    after = tree_of(root)
    assert after["a/b"] != before["a/b"] and after["a"] == before["a"] and after["."] == before["."]
    lib.write_bytes(b"\0" * 10)
    os.utime(lib, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert tree_of(root) == before
    lib.chmod(0o755)
    assert tree_of(root)["a/b"] != before["a/b"]
    lib.chmod(stat.st_mode & 0o777)
    lib.rename(root / "a" / "b" / "lib2.so")
    assert tree_of(root)["a/b"] != before["a/b"]


def test_a_folders_own_mtime_is_no_change_its_mode_is_in_its_own_digest(root: Path) -> None:
    before = tree_of(root)
    os.utime(root / "a", (0, 0))
    assert tree_of(root) == before
    (root / "a").chmod(0o700)
    after = tree_of(root)
    assert after["a"] != before["a"] and after["."] == before["."] and after["a/b"] == before["a/b"]


def test_a_digest_is_the_folders_entries_whatever_their_order_or_the_process(tmp_path: Path) -> None:
    """The same entries made in another order (another listing order) give the same digest, and so does
    another interpreter (its string hashes seeded otherwise): the build's record is read at start."""
    digests = []
    for name, order in (("one", ["a.py", "b.so", "c.txt"]), ("two", ["c.txt", "a.py", "b.so"])):
        folder = tmp_path / name
        folder.mkdir()
        for file in order:
            (folder / file).write_text(file)
            os.utime(folder / file, (1_700_000_000, 1_700_000_000))
        digests.append(walk(folder).folders["."])
    script = (
        "from pathlib import Path; from epstack.guard.record import walk; "
        f"print(walk(Path({str(tmp_path / 'one')!r})).folders['.'])"
    )
    other = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert digests[0] == digests[1] == other.stdout.strip()


def test_caches_skipped_folders_and_linked_folders_are_not_walked(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (root / "link").symlink_to(outside, target_is_directory=True)
    (root / "a" / "__pycache__").mkdir()
    (root / "a" / "__pycache__" / "mod.cpython-312.pyc").write_bytes(b"pyc")
    (root / "reports").mkdir()
    (root / "reports" / "start.json").write_text("{}")
    tree = walk(root, skip=(root / "reports",))
    assert set(tree.folders) == {".", "a", "a/b"}, "not __pycache__, not the link's target, not skipped"
    (outside / "deep" / "new.so").write_bytes(b"\0")
    (root / "reports" / "later.json").write_text("{}")
    assert walk(root, skip=(root / "reports",)) == tree
    assert walk(root).folders.keys() == {".", "a", "a/b", "reports"}


def test_an_unreadable_root_is_named_not_raised(tmp_path: Path) -> None:
    assert walk(tmp_path / "absent") == Tree(
        root=str(tmp_path / "absent"), folders={".": "unreadable: No such file or directory"}
    )


LDCONFIG = """{count} libs found in cache `/etc/ld.so.cache'
\tlibz.so.1 (libc6,x86-64) => {lib}/libz.so.1
\tlibcuda.so.1 (libc6,x86-64) => {lib}/libcuda.so.1
\tlibnvidia-ml.so.1 (libc6,x86-64) => {driver}/libnvidia-ml.so.1
\tlibnccl.so.2 (libc6,x86-64) => {gone}/libnccl.so.2
"""


@dataclass
class Loader:
    """What the fake `ldconfig -p` answers, and the folders it names."""

    lib: Path
    driver: Path
    gone: Path
    stdout: str = ""
    returncode: int = 0
    stderr: str = ""


@pytest.fixture
def loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Loader:
    """`ldconfig -p` naming a library folder (with the driver's libcuda in it), a folder of the driver's
    libraries only, and a folder that is gone."""
    state = Loader(lib=tmp_path / "lib", driver=tmp_path / "driver", gone=tmp_path / "gone")
    state.lib.mkdir()
    state.driver.mkdir()
    (state.lib / "libz.so.1").write_bytes(b"z")
    (state.lib / "libcuda.so.1").write_bytes(b"cuda")
    state.stdout = LDCONFIG.format(count=4, lib=state.lib, driver=state.driver, gone=state.gone)

    def ldconfig(*args: str, echo: bool) -> Completed:
        assert args == ("ldconfig", "-p") and not echo
        return Completed(argv=args, returncode=state.returncode, stdout=state.stdout, stderr=state.stderr)

    monkeypatch.setattr(record_module, "run", ldconfig)
    return state


def test_library_resolution_is_ldconfigs_entries_and_the_folders_they_name(loader: Loader) -> None:
    tree = library_tree()
    assert tree.root == LIBRARY_RESOLUTION == "library resolution"
    assert set(tree.folders) == {"ldconfig -p", str(loader.lib), str(loader.gone), "/lib", "/usr/lib"}
    assert str(loader.driver) not in tree.folders, "named by the driver's libraries only"
    assert tree.folders[str(loader.gone)] == "unreadable: No such file or directory"
    assert len(tree.folders["ldconfig -p"]) == 16
    before = tree.folders
    (loader.lib / "libextra.so").write_bytes(b"dropped without ldconfig")
    after = library_tree().folders
    assert after[str(loader.lib)] != before[str(loader.lib)]
    assert {k: v for k, v in after.items() if k != str(loader.lib)} == {
        k: v for k, v in before.items() if k != str(loader.lib)
    }


def test_the_drivers_libraries_and_subfolders_are_no_change(loader: Loader) -> None:
    """A GPU host's runtime mounts the driver and runs ldconfig: the start checks the driver itself."""
    before = library_tree().folders
    jit = "libnvidia-ptxjitcompiler.so.1"
    (loader.lib / jit).write_bytes(b"mounted")
    (loader.lib / "libcuda.so.1").write_bytes(b"another driver")
    (loader.lib / "sub").mkdir()
    loader.stdout = (
        loader.stdout.replace("4 libs", "5 libs") + f"\t{jit} (libc6,x86-64) => {loader.lib}/{jit}\n"
    )
    assert library_tree().folders == before, "the header line and the driver's entries are not the digest's"
    loader.stdout += f"\tlibfoo.so.1 (libc6,x86-64) => {loader.lib}/libfoo.so.1\n"
    assert library_tree().folders["ldconfig -p"] != before["ldconfig -p"]


def test_ldconfig_failing_is_an_environment_problem(loader: Loader) -> None:
    loader.returncode, loader.stderr = 1, "ldconfig: Can't open cache file /etc/ld.so.cache\n"
    with pytest.raises(
        EnvironmentProblem, match=r"^ldconfig -p failed: ldconfig: Can't open cache file /etc/ld\.so\.cache$"
    ):
        library_tree()


def test_the_fingerprint_covers_the_venv_home_cuda_home_and_library_resolution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, venv, real_cuda = tmp_path / "home", tmp_path / "venv", tmp_path / "cuda-13.0"
    for folder in (home / "reports", home / "sbom", home / "tool", venv, real_cuda / "bin"):
        folder.mkdir(parents=True)
    (tmp_path / "cuda").symlink_to(real_cuda)
    monkeypatch.setenv("EPSTACK_REPORTS", str(tmp_path / "elsewhere"))
    env = {"EPSTACK_HOME": str(home), "VIRTUAL_ENV": str(venv), "CUDA_HOME": str(tmp_path / "cuda")}
    trees = fingerprint(env)
    assert [tree.root for tree in trees] == [str(venv), str(home), str(real_cuda), STDLIB, *LAST]
    assert set(trees[1].folders) == {".", "tool"}, "reports and the sbom are written after the record"
    assert [tree.root for tree in fingerprint({**env, "CUDA_HOME": str(tmp_path / "none")})] == [
        str(venv),
        str(home),
        STDLIB,
        *LAST,
    ]


def test_an_image_without_the_variables_is_fingerprinted_where_the_image_puts_things(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("EPSTACK_REPORTS", str(tmp_path))
    roots = [tree.root for tree in fingerprint({"CUDA_HOME": str(tmp_path / "none")})]
    assert roots == [str(imagepaths.VENV), str(imagepaths.EPSTACK_HOME), STDLIB, *LAST]


def test_the_record_lives_beside_the_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EPSTACK_REPORTS", str(tmp_path))
    assert record_path("sglang") == tmp_path / "sglang.record.json"
    assert read_record("sglang") == f"no build record {tmp_path / 'sglang.record.json'}"
    (tmp_path / "sglang.record.json").write_text('{"schema": "guard-record", "version": 1}')
    why = read_record("sglang")
    assert isinstance(why, str) and why.startswith(str(tmp_path / "sglang.record.json"))
    (tmp_path / "sglang.record.json").write_text('{"schema": "guard-record/1"}')
    assert "schema 'guard-record/1' unknown, this epstack reads 'guard-record/2'" in str(
        read_record("sglang")
    )


def test_a_files_sha256(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    assert sha256(tmp_path / "f") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_the_deciding_variables_are_those_set() -> None:
    env = {"LD_PRELOAD": "/hook.so", "HOME": "/root", "NCCL_NET_PLUGIN": "ofi", "EPSTACK_PINS": "/p"}
    assert deciding_env(env) == {"LD_PRELOAD": "/hook.so", "NCCL_NET_PLUGIN": "ofi", "EPSTACK_PINS": "/p"}
    assert deciding_env({"EPSTACK_CUDA_STUB": "/stubs/libcuda.so", "PATH": "/bin"}) == {"PATH": "/bin"}


def test_the_driver_stubs_folder_is_dropped_from_every_place_in_the_path(tmp_path: Path) -> None:
    stub = tmp_path / "libcuda.so"
    stub.write_bytes(b"\0")
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "libcuda.so.1").symlink_to(stub)
    path = f"{tmp_path / 'one'}:/usr/lib:{tmp_path / 'two'}:/opt/lib"
    env = {"EPSTACK_CUDA_STUB": str(stub), "LD_LIBRARY_PATH": path}
    assert deciding_env(env) == {"LD_LIBRARY_PATH": "/usr/lib:/opt/lib"}


def a_record(tmp_path: Path, **changes: object) -> GuardRecord:
    report = tmp_path / "sglang.json"
    report.write_text("{}")
    recorded = GuardRecord(
        layer="sglang",
        pins=str(PINS),
        pins_sha256=sha256(PINS),
        locks="",
        report=str(report),
        report_sha256=sha256(report),
        env={},
        cuda_runtime=LoadedRuntime(version="not loaded", paths=()),
        trees=(),
    )
    return replace(recorded, **changes)  # type: ignore[arg-type]


def test_what_the_start_was_asked_differs_from_what_the_build_recorded(tmp_path: Path) -> None:
    record = a_record(tmp_path)
    assert what_changed(record, layer="deepep", pins=PINS, locks=None, env={}) == (
        "the build recorded --layer sglang, this start has deepep"
    )
    assert what_changed(record, layer="sglang", pins=PINS, locks=tmp_path / "locks", env={}) == (
        f"the build recorded --locks (none), this start has {tmp_path / 'locks'}"
    )
    with_locks = a_record(tmp_path, locks=str(imagepaths.LOCKS))
    assert what_changed(with_locks, layer="sglang", pins=PINS, locks=None, env={}) == (
        f"the build recorded --locks {imagepaths.LOCKS}, this start has (none)"
    )


def test_a_report_gone_or_a_variable_unset_is_named(tmp_path: Path) -> None:
    record = a_record(tmp_path)
    Path(record.report).unlink()
    assert what_changed(record, layer="sglang", pins=PINS, locks=None, env={}) == (
        f"{record.report}: No such file or directory"
    )
    record = a_record(tmp_path, env={"LD_LIBRARY_PATH": "/usr/lib"})
    assert what_changed(record, layer="sglang", pins=PINS, locks=None, env={}) == (
        "LD_LIBRARY_PATH=(unset), the build had /usr/lib"
    )
    assert what_changed(record, layer="sglang", pins=PINS, locks=None, env={"LD_LIBRARY_PATH": "/x"}) == (
        "LD_LIBRARY_PATH=/x, the build had /usr/lib"
    )


def test_another_set_of_trees_or_a_library_folder_changed_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EPSTACK_REPORTS", str(tmp_path / "reports"))
    env = {"EPSTACK_HOME": str(tmp_path / "home"), "VIRTUAL_ENV": str(tmp_path / "venv")}
    env |= {"CUDA_HOME": str(tmp_path / "none")}
    now = fingerprint(env)
    record = a_record(tmp_path, env=deciding_env(env), trees=now[:2])
    assert what_changed(record, layer="sglang", pins=PINS, locks=None, env=env) == (
        f"the trees fingerprinted differ: {', '.join(sorted(tree.root for tree in now))} now"
    )
    *walked, loader, by_content = now
    libraries = replace(loader, folders={**loader.folders, "/usr/lib": "0" * 16, "/lib": "1" * 16})
    record = a_record(tmp_path, env=deciding_env(env), trees=(*walked, libraries, by_content))
    assert what_changed(record, layer="sglang", pins=PINS, locks=None, env=env) == (
        "2 folders changed in library resolution since the build (first: /lib)"
    )
    entries = replace(loader, folders={**loader.folders, "ldconfig -p": "0" * 16})
    record = a_record(tmp_path, env=deciding_env(env), trees=(*walked, entries, by_content))
    assert what_changed(record, layer="sglang", pins=PINS, locks=None, env=env) == (
        "1 folder changed in library resolution since the build (first: ldconfig -p)"
    ), "ldconfig's entries are named as they are, not as a folder under a root"
    unchanged = a_record(tmp_path, env=deciding_env(env), trees=now)
    assert what_changed(unchanged, layer="sglang", pins=PINS, locks=None, env=env) == ""


def test_the_root_folder_itself_changed_is_named_as_the_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EPSTACK_REPORTS", str(tmp_path / "reports"))
    (tmp_path / "venv").mkdir()
    env = {"EPSTACK_HOME": str(tmp_path / "home"), "VIRTUAL_ENV": str(tmp_path / "venv")}
    env |= {"CUDA_HOME": str(tmp_path / "none")}
    record = a_record(tmp_path, env=deciding_env(env), trees=fingerprint(env))
    (tmp_path / "venv" / "added.pth").write_text("")
    assert what_changed(record, layer="sglang", pins=PINS, locks=None, env=env) == (
        f"1 folder changed in {tmp_path / 'venv'} since the build (first: {tmp_path / 'venv'})"
    )


def test_a_record_names_what_the_build_had(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EPSTACK_REPORTS", str(tmp_path / "reports"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.json").write_text("{}")
    env = {"EPSTACK_HOME": str(tmp_path / "home"), "VIRTUAL_ENV": str(tmp_path / "venv"), "CC": "gcc-13"}
    env |= {"CUDA_HOME": str(tmp_path / "none")}
    record = make_record(layer="deepep", pins=PINS, locks=tmp_path / "locks", report=Path("r.json"), env=env)
    assert (record.layer, record.pins, record.locks) == ("deepep", str(PINS), str(tmp_path / "locks"))
    assert (record.report, record.report_sha256) == (str(tmp_path / "r.json"), sha256(tmp_path / "r.json"))
    assert record.pins_sha256 == sha256(PINS) and record.env == {
        "EPSTACK_HOME": env["EPSTACK_HOME"],
        "VIRTUAL_ENV": env["VIRTUAL_ENV"],
        "CC": "gcc-13",
        "CUDA_HOME": env["CUDA_HOME"],
    }
    assert [tree.root for tree in record.trees] == [
        str(tmp_path / "venv"),
        str(tmp_path / "home"),
        STDLIB,
        *LAST,
    ]
    assert isinstance(record.cuda_runtime, LoadedRuntime)
    assert what_changed(record, layer="deepep", pins=PINS, locks=tmp_path / "locks", env=env) == ""
