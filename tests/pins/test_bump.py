"""epstack pins bump: against a package index on 127.0.0.1 (tests/python/localindex.py), uv resolving
for real. A bump is proven (rules, relock, predict, render) before pins.env and the locks are written;
a refused or bad one leaves every file byte-identical."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from epstack.cli import main
from epstack.errors import BadInput
from epstack.pins.file import rewrite
from tests.conftest import PINS
from tests.python.localindex import build_index, served, use_index


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with served(build_index(tmp_path_factory.mktemp("index"))) as url:
        yield url


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory, index: str) -> Path:
    """The shipped pins.env and its locks, resolved by `epstack lock` against the local index."""
    root = tmp_path_factory.mktemp("checkout")
    shutil.copy(PINS, root / "pins.env")
    with pytest.MonkeyPatch.context() as monkeypatch:
        use_index(monkeypatch, index, root / "uv-cache")
        assert main(["lock", "--pins", str(root / "pins.env"), "--locks", str(root / "locks")]) == 0
    return root


@pytest.fixture
def checkout(locked: Path, tmp_path: Path, index: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the locked checkout for one test, uv pointed at the local index."""
    root = tmp_path / "checkout"
    shutil.copytree(locked, root)
    use_index(monkeypatch, index, root / "uv-cache")
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    files = [root / "pins.env", *sorted((root / "locks").iterdir())]
    return {path.name: path.read_bytes() for path in files}


def bump(root: Path, *assignments: str) -> int:
    return main(
        ["pins", "bump", "--pins", str(root / "pins.env"), "--locks", str(root / "locks"), *assignments]
    )


def test_a_clean_bump_relocks_only_sglang_and_keeps_every_comment(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(checkout)
    assert bump(checkout, "SGLANG_VERSION=0.5.24", "--summary", str(checkout / "pr.md")) == 0
    after = snapshot(checkout)
    assert after["pins.env"] == before["pins.env"].replace(
        b"\nSGLANG_VERSION=0.5.23\n", b"\nSGLANG_VERSION=0.5.24\n"
    )
    assert after["base.txt"] == before["base.txt"] and after["deepep-build.txt"] == before["deepep-build.txt"]
    assert b"sglang==0.5.24" in after["sglang.txt"]
    err = capsys.readouterr().err
    rows = {tuple(cell.strip() for cell in line.split("│")[1:5]) for line in err.splitlines()}
    assert ("sglang", "tinydep", "1.0", "2.0") in rows and ("sglang", "sglang", "0.5.23", "0.5.24") in rows
    images = {row[:2]: row[3] for row in rows if len(row) == 4 and row[1] in ("base", "deepep", "sglang")}
    assert images[("hopper-ib", "base")] == images[("blackwell-efa", "deepep")] == "reused"
    assert images[("hopper-ib", "sglang")].startswith("sglang-0.5.24-deepep-d4f41e4-cu13.0-hopper-ib-")
    assert "holds: every pins rule" in err
    summary = (checkout / "pr.md").read_text()
    assert summary.startswith("## epstack pins bump SGLANG_VERSION=0.5.24")
    assert "| `sglang` | `tinydep` | `1.0` | `2.0` |" in summary
    assert (
        main(["lock", "--check", "--pins", str(checkout / "pins.env"), "--locks", str(checkout / "locks")])
        == 0
    )


def test_a_bump_that_moves_torch_is_refused_and_writes_nothing(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """sglang 0.6.0 requires torch 2.15.0: the locks' overrides hold 2.14.1, a plain install would not."""
    before = snapshot(checkout)
    assert bump(checkout, "SGLANG_VERSION=0.6.0") == 1
    err = capsys.readouterr().err
    assert "refused: torch 2.14.1 -> 2.15.0 (Because sglang>=0.6.0 depends on torch==2.15.0" in " ".join(
        err.split()
    )
    assert "fix: pin TORCH_VERSION=2.15.0 too" in " ".join(err.split())
    assert snapshot(checkout) == before


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("SGLANG_VERSION=9.9.9", "SGLANG_VERSION=9.9.9: the package index has no sglang 9.9.9; fix:"),
        (
            "NCCL_VERSION=2.99.1",
            "NCCL_VERSION=2.99.1: the package index has no nvidia-nccl-cu13 2.99.1; fix:",
        ),
        ("SGLANG_VERSON=0.5.24", "SGLANG_VERSON: not a key of"),
        ("NCCL_VERSION=2.28.9", "NCCL 2.28.9 is older than 2.30.4"),
        ("SGLANG_VERSION=>=0.5.24", "is a range, not an exact version"),
        ("SGLANG_VERSION=0.5.23", "SGLANG_VERSION is already 0.5.23"),
        ("SGLANG_VERSION", "not KEY=VALUE"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    checkout: Path, capsys: pytest.CaptureFixture[str], assignment: str, message: str
) -> None:
    before = snapshot(checkout)
    assert bump(checkout, assignment) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("+ ")]
    assert message in line and "fix:" in line, line
    assert snapshot(checkout) == before


def test_a_dry_run_leaves_every_file_byte_identical(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(checkout)
    assert bump(checkout, "NCCL_VERSION=2.32.3", "--dry-run") == 0
    err = capsys.readouterr().err
    assert snapshot(checkout) == before
    assert "--dry-run:" in err
    rows = [tuple(cell.strip() for cell in line.split("│")[1:5]) for line in err.splitlines()]
    assert ("base", "nvidia-nccl-cu13", "2.30.7", "2.32.3") in rows
    assert ("sglang", "nvidia-nccl-cu13", "2.30.7", "2.32.3") in rows, "the upper lock follows the base"
    assert not [row for row in rows if len(row) == 4 and row[3] == "reused"], (
        "a base pin rebuilds every image"
    )


def test_rewrite_keeps_comments_order_tails_and_line_endings() -> None:
    text = "# why\r\nA=1  # tail\r\n\r\n  B = 2\r\nC=3\n# C=3 in a comment\n"
    assert (
        rewrite(text, {"A": "10", "B": "20"})
        == "# why\r\nA=10  # tail\r\n\r\n  B = 20\r\nC=3\n# C=3 in a comment\n"
    )
    with pytest.raises(BadInput, match="no D= line"):
        rewrite(text, {"D": "1"})
    with pytest.raises(BadInput, match="not one line"):
        rewrite(text, {"A": "1\nB=3"})
