"""render/build write only where they may, and replace their own output atomically.

The refusals run against a copy of the checkout (epstack.resources.inputs pointed at it), so a
regression here destroys a temporary copy, not the repository.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from epstack.cli import main
from epstack.image.render import tree_digest
from epstack.marker import MARKER
from tests.conftest import PINS, REPO, copy_checkout, pins_variant


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the checkout's inputs as the current directory, taken for the package's folders."""
    root = copy_checkout(tmp_path / "checkout", monkeypatch)
    monkeypatch.chdir(root)
    return root


REFUSED = [
    ("the checkout", ".", "is the checkout or a directory above it"),
    ("an empty --out", "", "--out is empty"),
    ("above the checkout", "..", "is the checkout or a directory above it"),
    ("the root", "/", "is the checkout or a directory above it"),
    ("the templates", "images", "an input of epstack"),
    ("inside the templates", "images/base/new", "an input of epstack"),
    ("the scripts", "scripts", "an input of epstack"),
    ("the package", "epstack", "an input of epstack"),
    ("the pins file", "pins.env", "an input of epstack"),
    ("a device file", "/dev/null", "exists and is not a directory"),
    ("a mount point", "/proc", "is a mount point"),
]


@pytest.mark.parametrize(("case", "out", "message"), REFUSED, ids=[case for case, _, _ in REFUSED])
def test_refused_outputs_change_nothing(
    checkout: Path, capsys: pytest.CaptureFixture[str], case: str, out: str, message: str
) -> None:
    before = tree_digest(checkout)
    assert main(["render", "--pins", "pins.env", "--out", out]) == 2, case
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and "fix:" in err
    assert tree_digest(checkout) == before


def test_a_directory_of_the_users_files_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert main(["render", "--pins", str(PINS), "--out", str(mine)]) == 2
    assert "non-empty directory epstack did not make" in capsys.readouterr().err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_an_existing_file_and_a_symlink_are_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    assert main(["render", "--pins", str(PINS), "--out", str(tmp_path / "file")]) == 2
    assert main(["render", "--pins", str(PINS), "--out", str(tmp_path / "link")]) == 2
    assert (tmp_path / "file").read_text() == "x" and not any((tmp_path / "target").iterdir())


def test_an_unwritable_place_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--pins", str(PINS), "--out", "/proc/epstack-out"]) == 2
    err = capsys.readouterr().err
    assert "cannot write there" in err and "Traceback" not in err


def test_an_empty_directory_is_used_and_then_replaced(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert main(["render", "--pins", str(PINS), "--out", str(out)]) == 0
    assert (out / MARKER).is_file() and (out / "docker-bake.json").is_file()
    (out / "docker-bake.json").unlink()  # what epstack wrote may go (test_output_ownership: nothing may come)
    assert (
        main(["render", "--pins", str(pins_variant(tmp_path, SGLANG_VERSION="0.5.22")), "--out", str(out)])
        == 0
    )
    assert (out / "docker-bake.json").is_file(), "the whole directory is replaced"
    assert "SGLANG_VERSION=0.5.22" in (out / "targets/hopper-efa/sglang.pins.env").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "pins.env"], "no staging left"


def test_permissions_are_ordinary(tmp_path: Path) -> None:
    out = tmp_path / "out"
    old = os.umask(0o022)
    try:
        assert main(["render", "--pins", str(PINS), "--out", str(out)]) == 0
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o755
    assert (out / "docker-bake.json").stat().st_mode & 0o777 == 0o644
    assert (out / "scripts/image/entrypoint.sh").stat().st_mode & 0o777 == 0o755


def _render(pins: Path, out: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "epstack", "render", "--pins", str(pins), "--out", str(out)]
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
