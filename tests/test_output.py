"""render/build write only where they may, and replace their own output atomically.

The refusals run against a copy of the checkout (epstack.resources.inputs pointed at it), so a
regression here destroys a temporary copy, not the repository.
"""

from __future__ import annotations

import ctypes
import errno
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from epstack import output
from epstack.commands.main import main
from epstack.errors import BadInput, EnvironmentProblem
from epstack.marker import MARKER, marked, tree
from epstack.output import (
    check_output,
    check_writable,
    install_output,
    replace_output,
    staging_beside,
    write_file,
)
from tests.conftest import PINS, REPO, copy_checkout, pins_variant, tree_digest


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the checkout's inputs as the current directory, taken for the package's folders."""
    root = copy_checkout(tmp_path / "checkout", monkeypatch)
    monkeypatch.chdir(root)
    return root


REFUSED = [
    ("the checkout", ".", "is the checkout or a directory above it"),
    ("an empty --out-dir", "", "--out-dir is empty"),
    ("above the checkout", "..", "is the checkout or a directory above it"),
    ("the root", "/", "is the checkout or a directory above it"),
    ("the templates", "images", "an input of epstack"),
    ("inside the templates", "images/base/new", "an input of epstack"),
    ("the scripts", "scripts", "an input of epstack"),
    ("the package", "epstack", "an input of epstack"),
    ("the pins file", "pins.env", "an input of epstack"),
    ("a device file", "../null", "exists and is not a directory"),
    ("a mount point", "/proc", "is a mount point"),
]


@pytest.mark.parametrize(("case", "out", "message"), REFUSED, ids=[case for case, _, _ in REFUSED])
def test_refused_outputs_change_nothing(
    checkout: Path, capsys: pytest.CaptureFixture[str], case: str, out: str, message: str
) -> None:
    if case == "a device file":  # a copy of /dev/null beside the checkout: a regression replaces only it
        device(checkout.parent, "null", 3)
    before = tree_digest(checkout)
    assert main(["render", "--pins", "pins.env", "--out-dir", out]) == 2, case
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and "fix:" in err
    assert tree_digest(checkout) == before


def test_a_directory_of_the_users_files_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert main(["render", "--pins", str(PINS), "--out-dir", str(mine)]) == 2
    assert "non-empty directory epstack did not make" in capsys.readouterr().err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_an_existing_file_and_a_symlink_are_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    assert main(["render", "--pins", str(PINS), "--out-dir", str(tmp_path / "file")]) == 2
    assert main(["render", "--pins", str(PINS), "--out-dir", str(tmp_path / "link")]) == 2
    assert (tmp_path / "file").read_text() == "x" and not any((tmp_path / "target").iterdir())


def test_an_unwritable_place_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--pins", str(PINS), "--out-dir", "/proc/epstack-out"]) == 2
    err = capsys.readouterr().err
    assert "cannot write there" in err and "Traceback" not in err


def test_an_empty_directory_is_used_and_then_replaced(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert main(["render", "--pins", str(PINS), "--out-dir", str(out)]) == 0
    assert (out / MARKER).is_file() and (out / "docker-bake.json").is_file()
    (out / "docker-bake.json").unlink()  # what epstack wrote may go (test_output_ownership: nothing may come)
    assert (
        main(
            ["render", "--pins", str(pins_variant(tmp_path, SGLANG_VERSION="0.5.22")), "--out-dir", str(out)]
        )
        == 0
    )
    assert (out / "docker-bake.json").is_file(), "the whole directory is replaced"
    assert "SGLANG_VERSION=0.5.22" in (out / "targets/hopper-efa/sglang.pins.env").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "pins.env"], "no staging left"


def test_permissions_are_ordinary(tmp_path: Path) -> None:
    out = tmp_path / "out"
    old = os.umask(0o022)
    try:
        assert main(["render", "--pins", str(PINS), "--out-dir", str(out)]) == 0
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o755
    assert (out / "docker-bake.json").stat().st_mode & 0o777 == 0o644
    assert (out / "scripts/image/entrypoint.sh").stat().st_mode & 0o777 == 0o755


def _render(pins: Path, out: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "epstack", "render", "--pins", str(pins), "--out-dir", str(out)]
    return subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _renders(tmp_path: Path) -> tuple[list[Path], set[str], Path]:
    """Two pins files, the digests of their complete renders, and an output holding the first."""
    variants = [PINS, pins_variant(tmp_path, SGLANG_VERSION="0.5.22")]
    digests = set()
    for number, pins in enumerate(variants):
        complete = tmp_path / f"complete-{number}"
        assert _render(pins, complete).wait() == 0
        digests.add(tree_digest(complete))
    out = tmp_path / "out" / "render"
    assert _render(variants[0], out).wait() == 0
    return variants, digests, out


def test_a_kill_at_any_moment_leaves_the_old_or_the_new_output(tmp_path: Path) -> None:
    variants, digests, out = _renders(tmp_path)
    rng = random.Random(20261201)
    for attempt in range(8):
        process = _render(variants[attempt % 2], out)
        time.sleep(rng.uniform(0.2, 1.2))
        process.send_signal(signal.SIGKILL)
        process.wait()
        assert tree_digest(out) in digests, f"attempt {attempt}: a mixed or missing tree"
    assert _render(variants[0], out).wait() == 0
    assert [p.name for p in out.parent.iterdir()] == ["render"], "the next run removes killed runs' staging"


def test_sigterm_and_concurrent_renders(tmp_path: Path) -> None:
    variants, digests, out = _renders(tmp_path)
    terminated = _render(variants[1], out)
    time.sleep(1.0)
    terminated.send_signal(signal.SIGTERM)
    # Finished, interrupted while writing (130), or killed while still importing (-15): never half-written.
    assert terminated.wait() in (0, 130, -signal.SIGTERM)
    assert tree_digest(out) in digests and [p.name for p in out.parent.iterdir()] == ["render"]
    for _ in range(3):
        racing = [_render(pins, out) for pins in variants]
        assert [process.wait() for process in racing] == [0, 0]
        assert tree_digest(out) in digests
    assert [p.name for p in out.parent.iterdir()] == ["render"]


# ---- the output functions themselves: what check_output allows, what replace/install/write leave -------


def allowed(out: Path | str, checkout: Path, *inputs: Path) -> Path:
    return check_output(str(out), checkout=checkout, inputs=list(inputs))


def refusal(out: Path | str, checkout: Path, *inputs: Path) -> str:
    with pytest.raises(BadInput) as caught:
        allowed(out, checkout, *inputs)
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    return message


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A checkout with an input folder and an input file, beside the outputs under tmp_path."""
    root = tmp_path / "repo"
    (root / "images").mkdir(parents=True)
    (root / "pins.env").write_text("CUDA_VERSION=13.0.3\n")
    return root


def test_a_new_path_is_allowed_as_its_absolute_path(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert allowed("build/render", repo, repo / "images") == tmp_path / "build" / "render"
    assert allowed(tmp_path / "new", repo, repo / "images", repo / "pins.env") == tmp_path / "new"


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_out(repo: Path, value: str) -> None:
    assert (
        refusal(value, repo) == "--out-dir is empty; fix: name a new directory, e.g. --out-dir build/render"
    )


def test_a_symlink_out_even_to_a_new_directory(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert refusal(tmp_path / "dangling", repo) == (
        f"{tmp_path / 'dangling'} is a symlink; fix: pass the directory it points to, or a new path"
    )


@pytest.mark.parametrize("spelling", ["repo", ".", "repo/..", "/"])
def test_the_checkout_and_above(repo: Path, tmp_path: Path, spelling: str) -> None:
    out = tmp_path / spelling if spelling != "/" else Path("/")
    assert refusal(out, repo) == (
        f"{out} is the checkout or a directory above it; "
        "fix: write to a new directory, e.g. --out-dir build/render"
    )


def test_the_checkout_through_a_link_above_it(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(tmp_path)
    out = tmp_path / "link" / "repo"
    assert "is the checkout or a directory above it" in refusal(out, repo)


@pytest.mark.parametrize(
    ("relative", "source"),
    [("images", "images"), ("images/base", "images"), ("pins.env", "pins.env"), ("pins.env/x", "pins.env")],
)
def test_an_input_or_inside_one(repo: Path, relative: str, source: str) -> None:
    out, checkout = repo / relative, repo.parent / "elsewhere"
    assert refusal(out, checkout, repo / "pins.env", repo / "images") == (
        f"{out} is, holds or is inside {repo / source}, an input of epstack; fix: write to a new directory"
    )


def test_a_folder_holding_an_input(repo: Path, tmp_path: Path) -> None:
    out = repo / "images"
    assert refusal(repo, tmp_path / "elsewhere", out / "base" / "Dockerfile") == (
        f"{repo} is, holds or is inside {out / 'base' / 'Dockerfile'}, an input of epstack; "
        "fix: write to a new directory"
    )


def test_an_input_reached_through_a_link(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(repo / "images")
    assert "an input of epstack" in refusal(
        tmp_path / "link" / "new", tmp_path / "elsewhere", repo / "images"
    )


def test_an_existing_file(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert refusal(tmp_path / "file", repo) == (
        f"{tmp_path / 'file'} exists and is not a directory; fix: remove it or choose a new path"
    )


def test_a_mount_point(repo: Path) -> None:
    assert refusal("/proc", repo) == "/proc is a mount point; fix: write to a new directory inside it"


def test_another_users_empty_directory(repo: Path, tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    assert refusal(theirs, repo) == (
        f"{theirs} belongs to uid 65534, not to this user (uid {os.geteuid()}); "
        "fix: run as its owner, or choose a new path"
    )


def test_an_empty_directory_of_the_users(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert allowed(tmp_path / "empty", repo) == tmp_path / "empty"


def test_a_directory_epstack_did_not_make(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    assert refusal(tmp_path / "mine", repo) == (
        f"{tmp_path / 'mine'} is a non-empty directory epstack did not make; "
        "fix: choose a new or empty directory"
    )


def test_an_output_holding_what_epstack_did_not_write(repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    replace_output(out, {"a.txt": b"a"})
    assert allowed(out, repo) == out
    (out / "notes.txt").write_text("mine")
    assert refusal(out, repo) == (
        f"{out}: notes.txt is not what epstack wrote there (added or changed since); "
        f"fix: move it out of {out}, or choose a new directory"
    )


def test_a_name_too_long_is_bad_input(repo: Path, tmp_path: Path) -> None:
    out = tmp_path / ("x" * 300)
    assert (
        refusal(out, repo)
        == f"{out}: cannot use it as an output (File name too long); fix: choose another path"
    )


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_replace_output_writes_the_tree_its_marker_lists(tmp_path: Path, umask_022: None) -> None:
    out = tmp_path / "deep" / "er" / "out"
    files = {"a/b/c.txt": b"c", "a/b/d.txt": b"d", "run.sh": b"#!/bin/sh\n"}
    replace_output(out, files, executable=["run.sh"])
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        MARKER, "a", "a/b", "a/b/c.txt", "a/b/d.txt", "run.sh"
    ]  # fmt: skip
    assert marked(out) == tree(out) and (out / "a" / "b" / "c.txt").read_bytes() == b"c"
    assert out.stat().st_mode & 0o7777 == 0o755
    assert (out / "run.sh").stat().st_mode & 0o7777 == 0o755
    assert (out / "a" / "b" / "c.txt").stat().st_mode & 0o7777 == 0o644
    assert sorted(p.name for p in out.parent.iterdir()) == ["out"], "no staging left"


def test_replace_output_replaces_the_whole_tree(tmp_path: Path) -> None:
    out = tmp_path / "out"
    replace_output(out, {"old.txt": b"old", "keep/x.txt": b"x"})
    replace_output(out, {"new.txt": b"new"})
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "new.txt"]
    assert marked(out) == {"new.txt": tree(out)["new.txt"]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_replace_output_of_a_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for text in (b"first", b"second"):
        replace_output(Path("out"), {"a.txt": text})
        assert (tmp_path / "out" / "a.txt").read_bytes() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_replace_output_without_an_atomic_swap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the kernel or filesystem has no renameat2 exchange, the old tree is set aside and removed."""
    monkeypatch.setattr(output, "_exchange", lambda a, b: False)
    out = tmp_path / "out"
    replace_output(out, {"old.txt": b"old"})
    replace_output(out, {"new.txt": b"new"})
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_staging_a_killed_run_left_is_removed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    half = tmp_path / ".out.epstack-staging-killed"
    half.mkdir()
    (half / MARKER).write_text(
        '{"schema": "epstack-output/1", "entries": {"a.txt": "sha256 0", "d": "dir", "d/f.txt": "sha256 0"}}'
    )
    (half / "d").mkdir()
    (half / "d" / "f.txt").write_text("listed under d")
    (half / "a.txt").write_text("half-writ")
    empty = tmp_path / ".out.epstack-staging-empty"
    empty.mkdir()
    other = tmp_path / ".other.epstack-staging-x"
    other.mkdir()
    replace_output(out, {"a.txt": b"a"})
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.epstack-staging-x", "out"]


def test_staging_holding_an_unlisted_entry_or_a_file_is_kept(tmp_path: Path) -> None:
    kept = tmp_path / ".out.epstack-staging-kept"
    kept.mkdir()
    (kept / MARKER).write_text('{"schema": "epstack-output/1", "entries": {"a.txt": "sha256 0"}}')
    (kept / "a.txt").write_text("listed")
    (kept / "b.txt").write_text("not listed")
    unmarked = tmp_path / ".out.epstack-staging-unmarked"
    unmarked.mkdir()
    (unmarked / "a.txt").write_text("no marker")
    theirs = tmp_path / ".out.epstack-staging-theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    file = tmp_path / ".out.epstack-staging-file"
    file.write_text("a file")
    replace_output(tmp_path / "out", {"a.txt": b"a"})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [file.name, kept.name, theirs.name, unmarked.name, "out"]
    )
    assert (kept / "b.txt").read_text() == "not listed" and file.read_text() == "a file"
    assert (unmarked / "a.txt").read_text() == "no marker"


def test_replace_output_where_no_directory_can_be(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "sub" / "out"
    with pytest.raises(BadInput) as caught:
        replace_output(out, {"a.txt": b"a"})
    assert str(caught.value) == (
        f"{out}: cannot create {out.parent} (Not a directory); fix: choose a writable path"
    )


def test_staging_beside_and_install_output(tmp_path: Path, umask_022: None) -> None:
    out = tmp_path / "new" / "er" / "out"
    staging = staging_beside(out, prefix=".out.build-")
    assert staging.parent == out.parent and staging.name.startswith(".out.build-") and staging.is_dir()
    (staging / "report.json").write_text("{}")
    install_output(staging, out)
    assert not staging.exists() and sorted(p.name for p in out.iterdir()) == [MARKER, "report.json"]
    assert marked(out) == tree(out) and out.stat().st_mode & 0o777 == 0o755
    second = staging_beside(out, prefix=".out.build-")
    (second / "other.json").write_text("[]")
    install_output(second, out)
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "other.json"]
    assert sorted(p.name for p in second.iterdir()) == [MARKER, "report.json"], "the old tree, to remove"


def test_staging_beside_where_no_directory_can_be(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "out"
    with pytest.raises(BadInput) as caught:
        staging_beside(out, prefix=".out.build-")
    assert str(caught.value) == f"{out}: cannot write there (File exists); fix: choose a writable path"


def test_a_full_disk_is_the_machines_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(**kwargs: object) -> str:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(tempfile, "mkdtemp", full)
    out = tmp_path / "out"
    with pytest.raises(EnvironmentProblem) as caught:
        staging_beside(out, prefix=".out.build-")
    assert str(caught.value) == (
        f"{out}: cannot write (No space left on device); fix: free space on that filesystem"
    )


# write_file and check_writable: a file the user names.


def test_write_file_writes_a_new_file_whole(tmp_path: Path, umask_022: None) -> None:
    path = tmp_path / "reports" / "new" / "r.json"
    write_file(path, "{}\n", what="the report")
    assert path.read_text() == "{}\n" and path.stat().st_mode & 0o777 == 0o644
    write_file(path, b"[]", what="the report")
    assert path.read_bytes() == b"[]"
    assert [p.name for p in path.parent.iterdir()] == ["r.json"], "no temporary file left"


@pytest.mark.parametrize("mode", [0o444, 0o600, 0o755])
def test_write_file_keeps_the_mode_of_the_file_it_replaces(
    tmp_path: Path, umask_022: None, mode: int
) -> None:
    path = tmp_path / "pins.env"
    path.write_text("old")
    path.chmod(mode)
    write_file(path, "new", what="the pins file")
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == mode


def test_write_file_through_a_link_writes_its_target(tmp_path: Path) -> None:
    target = tmp_path / "target.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_file(link, "new", what="the report")
    assert link.is_symlink() and target.read_text() == "new"


def device(tmp_path: Path, name: str, minor: int) -> Path:
    """A character device node of the memory driver (3: null, 7: full) under tmp_path, never /dev's own:
    a write_file that took it for a regular file replaces only this copy."""
    path = tmp_path / name
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("making a device node needs CAP_MKNOD")
    return path


def test_write_file_to_a_device_writes_to_it(tmp_path: Path) -> None:
    null = device(tmp_path, "null", 3)
    write_file(null, "discarded", what="the report")
    assert stat.S_ISCHR(null.stat().st_mode), "still the device"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]


def test_write_file_to_a_full_device(tmp_path: Path) -> None:
    full = device(tmp_path, "full", 7)
    with pytest.raises(EnvironmentProblem) as caught:
        write_file(full, "x", what="the report")
    assert (
        str(caught.value)
        == f"{full}: cannot write (No space left on device); fix: free space on that filesystem"
    )
    assert stat.S_ISCHR(full.stat().st_mode), "still the device"


def test_write_file_to_a_directory(tmp_path: Path) -> None:
    with pytest.raises(BadInput) as caught:
        write_file(tmp_path, "x", what="the report")
    assert str(caught.value) == (
        f"{tmp_path} is a directory; fix: name a file for the report, e.g. {tmp_path / 'report.json'}"
    )


def test_write_file_where_no_file_can_be(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadInput) as caught:
        write_file(tmp_path / "file" / "r.json", "x", what="the report")
    assert str(caught.value) == (
        f"{tmp_path / 'file' / 'r.json'}: cannot write the report there ([Errno 20] Not a directory: "
        f"'{tmp_path / 'file' / 'r.json'}'); fix: choose a writable path"
    )
    with pytest.raises(BadInput) as caught:
        write_file(Path("r\0.json"), "x", what="the report")
    assert str(caught.value) == (
        "r\0.json: cannot write the report there (embedded null byte); fix: choose a writable path"
    )


def test_write_file_into_a_path_that_cannot_hold_one(tmp_path: Path) -> None:
    path = tmp_path / ("x" * 300) / "r.json"
    with pytest.raises(BadInput) as caught:
        write_file(path, "x", what="the report")
    assert str(caught.value).endswith("; fix: choose a writable path") and "File name too long" in str(
        caught.value
    )


def test_check_writable_allows_a_new_file_in_a_new_folder(tmp_path: Path) -> None:
    pins = tmp_path / "pins.env"
    pins.write_text("x")
    check_writable(tmp_path / "a" / "b" / "r.json", what="the report", inputs=[pins, tmp_path / "absent"])
    check_writable(Path("r.json"), what="the report")


def _symlinked(pins: Path) -> Path:
    (pins.parent / "link").symlink_to(pins)
    return pins.parent / "link"


def _hard_linked(pins: Path) -> Path:
    os.link(pins, pins.parent / "hard")
    return pins.parent / "hard"


@pytest.mark.parametrize(
    "spelling",
    [lambda p: p, lambda p: p.parent / "sub" / ".." / p.name, _symlinked, _hard_linked],
    ids=["same", "dotted", "symlink", "hard-link"],
)
def test_check_writable_refuses_the_file_read(tmp_path: Path, spelling: Callable[[Path], Path]) -> None:
    pins = tmp_path / "pins.env"
    pins.write_text("x")
    (tmp_path / "sub").mkdir()
    path = spelling(pins)
    with pytest.raises(BadInput) as caught:
        check_writable(path, what="the report", inputs=[tmp_path / "other", pins])
    assert str(caught.value) == (
        f"{path}: is {pins}, which this command reads; fix: write the report to another file"
    )


def test_check_writable_refuses_a_file_inside_a_folder_read(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    path = tmp_path / "run" / "new.json"
    with pytest.raises(BadInput) as caught:
        check_writable(path, what="the report", inputs=[tmp_path / "run"])
    assert str(caught.value) == (
        f"{path}: is inside {tmp_path / 'run'}, which this command reads; "
        "fix: write the report to another file"
    )


def test_check_writable_refuses_a_directory(tmp_path: Path) -> None:
    with pytest.raises(BadInput) as caught:
        check_writable(tmp_path, what="the report")
    assert str(caught.value) == (
        f"{tmp_path} is a directory; fix: name a file for the report, e.g. {tmp_path / 'report.json'}"
    )


def test_check_writable_refuses_a_path_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    path = tmp_path / "file" / "sub" / "r.json"
    with pytest.raises(BadInput) as caught:
        check_writable(path, what="the report")
    assert str(caught.value) == (
        f"{path}: {tmp_path / 'file'} is not a writable directory; fix: choose a writable path for the report"
    )


def test_check_writable_refuses_a_directory_nobody_may_write() -> None:
    if os.access("/proc/sys", os.W_OK):
        pytest.skip("/proc/sys is writable here")
    path = Path("/proc/sys/epstack/r.json")
    with pytest.raises(BadInput) as caught:
        check_writable(path, what="the report")
    assert str(caught.value) == (
        f"{path}: /proc/sys is not a writable directory; fix: choose a writable path for the report"
    )


def test_write_file_to_a_fifo_nobody_reads(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(BadInput) as caught:
        write_file(fifo, "x", what="the report")
    assert (
        str(caught.value)
        == f"{fifo}: cannot write there (No such device or address); fix: choose a writable path"
    )


def test_write_file_writes_beside_its_file_whatever_tmpdir_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new text is swapped in from a sibling, never from TMPDIR's filesystem (no EXDEV)."""
    if not Path("/dev/shm").is_dir() or os.stat("/dev/shm").st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs a TMPDIR on another filesystem")
    monkeypatch.setattr(tempfile, "tempdir", "/dev/shm")
    write_file(tmp_path / "r.json", "{}", what="the report")
    assert (tmp_path / "r.json").read_text() == "{}"


def test_exchange_swaps_two_trees_in_one_step(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{name}.txt").write_text(name)
    assert output._exchange(tmp_path / "a", tmp_path / "b") is True
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["b.txt"]
    assert [p.name for p in (tmp_path / "b").iterdir()] == ["a.txt"]


def test_exchange_of_relative_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{name}.txt").write_text(name)
    assert output._exchange(Path("a"), Path("b")) is True
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["b.txt"]


def test_exchange_that_the_kernel_refuses_is_no_swap(tmp_path: Path) -> None:
    """EINVAL (here: a directory into itself; elsewhere a filesystem without RENAME_EXCHANGE): the caller
    falls back to renames."""
    (tmp_path / "a" / "sub").mkdir(parents=True)
    assert output._exchange(tmp_path / "a", tmp_path / "a" / "sub") is False


def test_exchange_with_a_missing_path_raises_its_error(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    with pytest.raises(FileNotFoundError) as caught:
        output._exchange(tmp_path / "a", tmp_path / "b")
    assert (caught.value.errno, caught.value.strerror, caught.value.filename) == (
        errno.ENOENT,
        "No such file or directory",
        str(tmp_path / "b"),
    )


def test_a_run_killed_while_removing_the_old_tree_leaves_staging_the_next_run_removes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old tree's entries go first and its marker last: a kill midway leaves a staging directory
    that still proves itself epstack's."""
    out = tmp_path / "out"
    replace_output(out, {"a.txt": b"a", "d/e.txt": b"e", "z.txt": b"z"})
    remove = shutil.rmtree

    def killed(path: Path, **kwargs: object) -> None:
        monkeypatch.setattr(shutil, "rmtree", remove)
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "rmtree", killed)
    with pytest.raises(KeyboardInterrupt):
        replace_output(out, {"b.txt": b"b"})
    (left,) = tmp_path.glob(".out.epstack-staging-*")
    assert (left / MARKER).is_file()
    replace_output(out, {"c.txt": b"c"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "c.txt"]


def test_without_renameat2_in_libc_the_old_tree_is_set_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An old libc: no atomic swap, so the old tree is renamed aside, replaced, and removed."""
    out = tmp_path / "out"
    replace_output(out, {"old.txt": b"old"})
    monkeypatch.setattr(ctypes, "CDLL", lambda *args, **kwargs: object())
    assert output._exchange(out, tmp_path) is False
    replace_output(out, {"new.txt": b"new"})
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_replace_output_with_a_name_the_filesystem_refuses(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(BadInput) as caught:
        replace_output(out, {"x" * 300: b"x"})
    assert str(caught.value) == f"{out}: cannot write there (File name too long); fix: choose a writable path"
    assert list(tmp_path.iterdir()) == [], "no staging left, no output made"


def test_install_output_of_a_staging_directory_that_is_gone(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(BadInput) as caught:
        install_output(tmp_path / ".out.build-gone", out)
    assert str(caught.value) == (
        f"{out}: cannot write there (No such file or directory); fix: choose a writable path"
    )
    assert not out.exists()


def test_check_writable_with_a_name_too_long(tmp_path: Path) -> None:
    path = tmp_path / ("x" * 300) / "r.json"
    with pytest.raises(BadInput) as caught:
        check_writable(path, what="the report")
    assert str(caught.value) == (
        f"{path}: cannot write the report there ([Errno 36] File name too long: '{path}'); "
        "fix: choose a writable path"
    )


def test_a_run_killed_after_the_marker_went_leaves_nothing_of_the_old_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever order the last removal takes, only the marker is left to it: a kill just after the marker
    went leaves an empty staging directory, which the next run removes."""
    out = tmp_path / "out"
    files = {f"{name}.txt": name.encode() for name in "abcdefghij"}
    replace_output(out, {**files, "d1/x.txt": b"x", "d2/y.txt": b"y", "d3/z/w.txt": b"w"})
    remove = shutil.rmtree

    def killed_after_the_marker(path: Path, **kwargs: Any) -> None:
        if Path(path).name.startswith(".out.epstack-staging-"):
            (Path(path) / MARKER).unlink()
            raise KeyboardInterrupt
        remove(path, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", killed_after_the_marker)
    with pytest.raises(KeyboardInterrupt):
        replace_output(out, {"new.txt": b"new"})
    monkeypatch.setattr(shutil, "rmtree", remove)
    (left,) = tmp_path.glob(".out.epstack-staging-*")
    assert list(left.iterdir()) == []
    replace_output(out, {"c.txt": b"c"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_dash_is_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    output.check_writable(output.STDOUT, what="the report", inputs=[tmp_path])
    output.write_file(output.STDOUT, b"{}\n", what="the report")
    assert capsys.readouterr().out == "{}\n" and list(tmp_path.iterdir()) == []
