"""The start on overlayfs lists only the folders that can differ from the build's: a folder unpacked before
the record (its ctime earlier) keeps the build's digest with every folder under it, unlisted; a folder a
change copied up is listed, and so is everything a mount covers. Real folders under tmp_path; overlayfs's
copy-up (every folder above a changed file gets a new ctime) made by hand with chmod; the container's
mounts as /proc/self/mountinfo lists them. The real overlayfs is in tests/image/test_docker_build.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from epstack.errors import BadInput
from epstack.guard import start
from epstack.guard.fingerprint import Changes, Tree, Unpacked, walk
from epstack.guard.mounts import Mounts, read_mounts
from epstack.guard.record import record_path
from epstack.guard.start import Refused, Trusted
from tests.guard.test_start import LAYER, build, image, judge

__all__ = ["image"]  # the fixture: an image's epstack home

# A container's mountinfo as docker writes it (overlay2): its root, the kernel's trees, files bind-mounted
# by the runtime, and a volume whose path has a space (the kernel escapes it as \040).
OVERLAY2 = "/var/lib/docker/overlay2"
LAYERS = f"lowerdir={OVERLAY2}/l/A:{OVERLAY2}/l/B,upperdir={OVERLAY2}/C/diff"
MOUNTINFO = f"""\
620 480 0:52 / / rw,relatime master:301 - overlay overlay rw,{LAYERS}
621 620 0:55 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
622 620 0:56 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
630 620 254:0 /var/lib/docker/containers/x/hosts /etc/hosts rw,relatime - ext4 /dev/vda rw
631 620 254:0 /srv/models /opt/models\\040v2 rw,relatime - ext4 /dev/vda rw
"""


def copy_up(path: Path, root: Path) -> None:
    """What overlayfs does when a file under `root` changes in a container: each folder above it, up to
    `root`, copied up with a new ctime (chmod to its own mode sets ctime to now)."""
    for folder in [path.parent, *path.parent.parents]:
        folder.chmod(folder.stat().st_mode & 0o7777)
        if folder == root:
            return


def later_than(ctime_ns: int, scratch: Path) -> int:
    """A ctime later than `ctime_ns`: the kernel stamps times at its clock's tick, so a scratch file is
    changed until its ctime has moved past (no sleep: it ends at the next tick)."""
    scratch.touch()
    while scratch.stat().st_ctime_ns <= ctime_ns:
        scratch.chmod(0o644)
    return scratch.stat().st_ctime_ns


def unpacked(built: Tree, before_ns: int) -> Unpacked:
    """The start's trust in `built` on an overlayfs root with nothing mounted in it."""
    return Unpacked(
        before_ns=before_ns, trees={built.root: built}, mounts=Mounts(root_type="overlay", points=())
    )


def newest(root: Path) -> int:
    return max(path.lstat().st_ctime_ns for path in [root, *root.rglob("*")])


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "venv"
    for folder in ("lib/torch/lib", "lib/torch/_C", "lib/numpy/core", "bin"):
        (root / folder).mkdir(parents=True)
    (root / "lib/torch/version.py").write_text("__version__ = '2.14.1'\n")
    (root / "lib/torch/lib/libc10.so").write_bytes(b"\0" * 64)
    (root / "lib/numpy/core/multiarray.py").write_text("x = 1\n")
    return root


def test_mountinfo_gives_the_roots_type_and_every_other_mount_point() -> None:
    mounts = read_mounts(MOUNTINFO)
    assert mounts.root_type == "overlay"
    assert mounts.points == ("/proc", "/dev", "/etc/hosts", "/opt/models v2")


@pytest.mark.parametrize(
    ("path", "unmounted"),
    [
        ("/srv/app/venv", True),
        ("/etc/python3.12", True),
        ("/etc", False),  # /etc/hosts is mounted under it
        ("/opt/models v2", False),  # on it
        ("/opt/models v2/shard", False),  # above it
        ("/opt/models", True),  # a prefix of the name is not a folder above it
        ("/", False),
    ],
)
def test_a_folder_is_unmounted_when_nothing_is_mounted_on_under_or_above_it(
    path: str, unmounted: bool
) -> None:
    assert read_mounts(MOUNTINFO).unmounted(path) is unmounted


def test_folders_unpacked_before_keep_the_builds_digests_unlisted(tree: Path, tmp_path: Path) -> None:
    built = walk(tree)
    before = later_than(newest(tree), tmp_path / "record")
    counted = Changes(since=0)
    assert walk(tree, changes=counted, unpacked=unpacked(built, before)) == built
    assert (counted.listed, counted.folders) == (0, len(built.folders)) == (0, 8)


def test_a_change_copied_up_is_listed_with_the_folders_above_it_only(tree: Path, tmp_path: Path) -> None:
    built = walk(tree)
    before = later_than(newest(tree), tmp_path / "record")
    module = tree / "lib/torch/version.py"
    module.write_text("__version__ = '9.99.99'\n")
    copy_up(module, tree)
    counted = Changes(since=0)
    now = walk(tree, changes=counted, unpacked=unpacked(built, before))
    assert {name for name, digest in now.folders.items() if digest != built.folders[name]} == {"lib/torch"}
    # ".", lib and lib/torch listed; bin, lib/numpy, torch/lib and torch/_C stat'ed and kept
    assert counted.listed == 3
    assert now == walk(tree), "the same digests as a walk that lists every folder"


def test_a_change_no_folder_above_shows_is_not_listed(tree: Path, tmp_path: Path) -> None:
    """The trust itself: a change that copied up no folder (what overlayfs never lets happen) is not
    seen. The docker tests show overlayfs copying every folder above a change."""
    built = walk(tree)
    before = later_than(newest(tree), tmp_path / "record")
    (tree / "lib/torch/version.py").write_text("__version__ = '9.99.99'\n")
    assert walk(tree, unpacked=unpacked(built, before)) == built != walk(tree)


def test_a_folder_removed_or_added_under_a_copied_up_one_is_as_a_full_walk_sees_it(
    tree: Path, tmp_path: Path
) -> None:
    built = walk(tree)
    before = later_than(newest(tree), tmp_path / "record")
    for file in (tree / "lib/numpy/core").iterdir():
        file.unlink()
    (tree / "lib/numpy/core").rmdir()
    (tree / "lib/evil/deep").mkdir(parents=True)
    (tree / "lib/evil/deep/hook.py").write_text("import os\n")
    copy_up(tree / "lib/numpy/core", tree)
    now = walk(tree, unpacked=unpacked(built, before))
    assert now == walk(tree)
    assert "lib/numpy/core" not in now.folders and now.folders.keys() >= {"lib/evil", "lib/evil/deep"}


def test_a_link_to_a_file_outside_the_tree_is_listed_again_where_its_folder_is_kept(
    tree: Path, tmp_path: Path
) -> None:
    """A link's row is the file it names: that file's change copies up no folder of this tree."""
    interpreter = tmp_path / "usr/bin/python3.12"
    interpreter.parent.mkdir(parents=True)
    interpreter.write_bytes(b"\x7fELF" + bytes(100))
    (tree / "bin/python").symlink_to(interpreter)
    (tree / "lib/torch/lib/libc10.so.2").symlink_to("libc10.so")  # inside: not listed again
    built = walk(tree, rows={})
    assert built.linked == ("bin",)
    before = later_than(newest(tree), tmp_path / "record")
    interpreter.write_bytes(b"\x7fELF" + bytes(200))
    counted = Changes(since=0)
    now = walk(tree, changes=counted, unpacked=unpacked(built, before))
    assert now.folders["bin"] != built.folders["bin"] and now == walk(tree)
    assert counted.listed == 1


# ---- the start: which trees it may keep, and what it says it listed ----------------------------------


@pytest.fixture
def overlay(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The container's root is overlayfs; a test adds mount points to the list."""
    points: list[str] = []
    monkeypatch.setattr(start, "read_mounts", lambda: Mounts(root_type="overlay", points=tuple(points)))
    return points


def built_image(image: Path) -> None:
    """The build's record, written once every folder of the image is older (as its own layer is)."""
    build(image)
    newest_folder = max(newest(image), newest(Path(os.environ["CUDA_HOME"])))
    later_than(newest_folder, record_path(LAYER))


def test_an_unchanged_image_on_overlayfs_lists_only_what_the_record_layer_holds(
    image: Path, overlay: list[str]
) -> None:
    built_image(image)
    judged = judge(image)
    assert isinstance(judged, Trusted)
    assert 0 < judged.listed < judged.folders / 10, (judged.listed, judged.folders)


def test_a_change_in_the_venv_on_overlayfs_is_refused_by_name(image: Path, overlay: list[str]) -> None:
    built_image(image)
    module = image / "venv/lib/site-packages/torch/__init__.py"
    module.write_text("version = '9.99.99'\n")
    copy_up(module, image / "venv")
    judged = judge(image)
    assert isinstance(judged, Refused)
    (change,) = judged.changes
    assert change.path == str(module) and change.kind.startswith("size 19 -> 20")


@pytest.mark.parametrize("mounted", ["venv/lib/site-packages/torch", "venv", ""])
def test_a_tree_with_a_mount_on_under_or_above_it_is_listed_whole(
    image: Path, overlay: list[str], mounted: str
) -> None:
    """A mount's files keep their own times: every folder on the way to it, and every one under it, is
    listed, and so a change no folder above shows (the mount's own) is still named."""
    built_image(image)
    overlay.append(str(image / mounted) if mounted else str(image.parent))
    module = image / "venv/lib/site-packages/torch/__init__.py"
    module.write_text("version = '2.99.99'\n")
    judged = judge(image)
    assert isinstance(judged, Refused) and [change.path for change in judged.changes] == [str(module)]


def test_guard_walk_full_lists_every_folder_and_other_values_are_refused(
    image: Path, overlay: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    built_image(image)
    monkeypatch.setenv("EPSTACK_GUARD_WALK", "full")
    judged = judge(image)
    assert isinstance(judged, Trusted) and judged.listed == judged.folders
    monkeypatch.setenv("EPSTACK_GUARD_WALK", "fast")
    with pytest.raises(BadInput, match="EPSTACK_GUARD_WALK=fast: use changed"):
        judge(image)
