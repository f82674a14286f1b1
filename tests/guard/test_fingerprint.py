"""The fingerprint a build records and a start compares: what counts as a change (a file's name, size,
whole-second mtime and mode, bytecode included; a library the loader resolves), what does not (a
folder's own mtime, skipped folders, the driver's libraries), and the trees it covers. Real folders
under tmp_path; `ldconfig -p` as it prints."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

from epstack import imagepaths
from epstack.cmd import Completed
from epstack.errors import EnvironmentProblem
from epstack.guard import fingerprint as fingerprint_module
from epstack.guard.fingerprint import (
    BY_CONTENT,
    LDCONFIG,
    LIBRARY_RESOLUTION,
    Changes,
    Tree,
    Walked,
    content_digest,
    content_tree,
    fingerprint,
    library_tree,
    roots,
    walk,
)

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
        "from pathlib import Path; from epstack.guard.fingerprint import walk; "
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


def test_skipped_folders_and_linked_folders_are_not_walked_bytecode_is(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (root / "link").symlink_to(outside, target_is_directory=True)
    (root / "a" / "__pycache__").mkdir()
    (root / "a" / "__pycache__" / "mod.cpython-312.pyc").write_bytes(b"pyc")
    (root / "reports").mkdir()
    (root / "reports" / "start.json").write_text("{}")
    tree = walk(root, skip=(root / "reports",))
    assert set(tree.folders) == {".", "a", "a/b", "a/__pycache__"}, "not the link's target, not skipped"
    assert tree.skip == (str(root / "reports"),)
    (outside / "deep" / "new.so").write_bytes(b"\0")
    (root / "reports" / "later.json").write_text("{}")
    assert walk(root, skip=(root / "reports",)) == tree
    assert walk(root).folders.keys() == {".", "a", "a/b", "a/__pycache__", "reports"}
    (root / "a" / "__pycache__" / "mod.cpython-312.pyc").write_bytes(b"other")
    assert walk(root, skip=(root / "reports",)).folders["a/__pycache__"] != tree.folders["a/__pycache__"]


def test_an_unreadable_root_is_named_not_raised(tmp_path: Path) -> None:
    assert walk(tmp_path / "absent") == Tree(
        root=str(tmp_path / "absent"), folders={".": "unreadable: No such file or directory"}
    )


LDCONFIG_OUTPUT = """{count} libs found in cache `/etc/ld.so.cache'
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
    state.stdout = LDCONFIG_OUTPUT.format(count=4, lib=state.lib, driver=state.driver, gone=state.gone)

    def ldconfig(*args: str, echo: bool) -> Completed:
        assert args == ("ldconfig", "-p") and not echo
        return Completed(argv=args, returncode=state.returncode, stdout=state.stdout, stderr=state.stderr)

    monkeypatch.setattr(fingerprint_module, "run", ldconfig)
    return state


def test_library_resolution_is_ldconfigs_entries_and_the_folders_they_name(loader: Loader) -> None:
    tree = library_tree()
    assert tree.root == LIBRARY_RESOLUTION == "library resolution"
    assert set(tree.folders) == {LDCONFIG, str(loader.lib), str(loader.gone), "/lib", "/usr/lib"}
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


def test_the_roots_are_the_venv_home_cuda_home_the_stdlib_and_etc_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, venv, real_cuda = tmp_path / "home", tmp_path / "venv", tmp_path / "cuda-13.0"
    for folder in (home / "reports", home / "sbom", home / "tool", venv, real_cuda / "bin"):
        folder.mkdir(parents=True)
    (tmp_path / "cuda").symlink_to(real_cuda)
    etc = tmp_path / "etc-python3.12"
    etc.mkdir()
    monkeypatch.setattr(fingerprint_module, "PYTHON_CONFIG", str(tmp_path / "etc-python3*"))
    monkeypatch.setenv("EPSTACK_REPORTS", str(tmp_path / "elsewhere"))
    env = {"EPSTACK_HOME": str(home), "VIRTUAL_ENV": str(venv), "CUDA_HOME": str(tmp_path / "cuda")}
    walked = roots(env)
    skip = (str(venv), str(home / "reports"), str(home / "sbom"), str(tmp_path / "elsewhere"))
    assert walked == [
        Walked(root=str(venv)),
        Walked(root=str(home), skip=skip),
        Walked(root=str(real_cuda)),
        Walked(root=STDLIB),
        Walked(root=str(etc)),
    ]
    trees = fingerprint(walked, [])
    assert [tree.root for tree in trees] == [*(w.root for w in walked), *LAST]
    assert set(trees[1].folders) == {".", "tool"}, "reports and the sbom are written after the record"
    assert [w.root for w in roots({**env, "CUDA_HOME": str(tmp_path / "none")})] == [
        str(venv),
        str(home),
        STDLIB,
        str(etc),
    ]


def test_an_image_without_the_variables_is_fingerprinted_where_the_image_puts_things(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("EPSTACK_REPORTS", str(tmp_path))
    monkeypatch.setattr(fingerprint_module, "PYTHON_CONFIG", str(tmp_path / "none*"))
    walked = [w.root for w in roots({"CUDA_HOME": str(tmp_path / "none")})]
    assert walked == [str(imagepaths.VENV), str(imagepaths.EPSTACK_HOME), STDLIB]


def test_files_by_content_are_their_sha256_absent_or_unreadable(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    (tmp_path / "folder").mkdir()
    tree = content_tree([str(tmp_path / "f"), str(tmp_path / "none"), str(tmp_path / "folder")])
    assert tree == Tree(
        root=BY_CONTENT,
        folders={
            str(tmp_path / "f"): "ba7816bf8f01cfea",
            str(tmp_path / "none"): "absent",
            str(tmp_path / "folder"): "unreadable: Is a directory",
        },
    )
    assert content_digest(str(tmp_path / "f")) == "ba7816bf8f01cfea"


def test_the_files_changed_since_the_start_are_those_of_a_later_ctime(root: Path) -> None:
    """A stand-in start time just before the change: every file of the tree is older."""
    changes = Changes(since=(root / "top.txt").stat().st_ctime)
    (root / "a" / "mod.py").write_text("x = 2\n")
    os.utime(root / "a" / "mod.py", (0, 0))
    walk(root, changes=changes)
    assert changes.paths == [str(root / "a" / "mod.py")]
