"""epstack pins bump: against a package index on 127.0.0.1 (tests/python/localindex.py), uv resolving
for real. A bump is proven (rules, relock, predict, render) before pins.env and the locks are written;
a refused or bad one leaves every file byte-identical."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from epstack.commands.main import main
from epstack.errors import BadInput
from epstack.image.build import BUILD_REPORT, BuildReport, BuiltImage
from epstack.pins.file import rewrite
from epstack.pins.load import load_pins
from tests.bump.conftest import snapshot
from tests.conftest import PINS
from tests.pins.test_pins import line_of
from tests.python.localindex import use_index


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
    err = "".join(capsys.readouterr())
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
        main(
            [
                "pins",
                "lock",
                "--check",
                "--pins",
                str(checkout / "pins.env"),
                "--locks",
                str(checkout / "locks"),
            ]
        )
        == 0
    )


GB = 10**9


def build_report(root: Path, target: str = "hopper-ib") -> Path:
    """A build report as `epstack build --report` writes it, for the checkout's pins as they are now:
    base 9 GB, deepep 10 GB, sglang 14.5 GB (and a devel build stage, which no node pulls)."""
    pins = load_pins(root / "pins.env")
    sizes = {"base": 9 * GB, "deepep": 10 * GB, "sglang": 14_500_000_000}
    built = [
        BuiltImage(
            ref=f"{pins.image_repository}:devel-x", layer="base", stage="devel", seconds=1, size=30 * GB
        ),
        *(
            BuiltImage(ref=pins.image_ref(layer, target), layer=layer, stage=layer, seconds=1, size=size)
            for layer, size in sizes.items()
        ),
    ]
    path = root / "build-report.json"
    path.write_text(BUILD_REPORT.dumps(BuildReport(target=target, standin=None, built=built)))
    return path


def test_a_sglang_bump_pulls_only_the_sglang_images_and_moves_only_the_sglang_guard_rows(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = build_report(checkout)
    before = snapshot(checkout)
    args = [
        "SGLANG_VERSION=0.5.24",
        "--dry-run",
        "--build-report",
        str(report),
        "--summary",
        str(checkout / "pr.md"),
    ]
    assert bump(checkout, *args) == 0
    assert snapshot(checkout) == before
    err = "".join(capsys.readouterr())
    rows = {tuple(cell.strip() for cell in line.split("│")[1:4]) for line in err.splitlines()}
    assert ("hopper-ib", "sglang", "4.50 GB") in rows, "14.5 GB less the reused deepep image's 10 GB"
    assert ("hopper-ib", "a node's pull", "4.50 GB") in rows
    summary = (checkout / "pr.md").read_text()
    pulls = summary.split("### bytes a node pulls")[1].split("###")[0]
    assert f"estimated from {report} (target hopper-ib)" in pulls
    pulled = [line.split(" | ")[:3] for line in pulls.splitlines() if line.startswith("| `")]
    assert {layer for _, layer, _ in pulled} == {"`sglang`", "`a node's pull`"}, "base and deepep are reused"
    assert ["| `blackwell-efa`", "`sglang`", "`unknown`"] in pulled, "the report is of hopper-ib only"
    assert (
        "not in the build report (a build of hopper-ib); fix: epstack build blackwell-efa --report" in pulls
    )
    guard = summary.split("### guard rows that follow a moved pin")[1]
    assert "| `sglang` | `sglang (SGLANG_VERSION)` | `0.5.23` | `0.5.24` |" in guard
    assert "| `python`" not in guard and "| `base`" not in guard and "| `deepep`" not in guard
    assert "| `sglang` | `2` | `sglang, tinydep` |" in guard, "only the sglang image's lock rows move"


def test_a_bump_that_moves_torch_is_refused_and_writes_nothing(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """sglang 0.6.0 requires torch 2.15.0: the locks' overrides hold 2.14.1, a plain install would not."""
    before = snapshot(checkout)
    assert bump(checkout, "SGLANG_VERSION=0.6.0") == 1
    err = "".join(capsys.readouterr())
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
        ("NCCL_VERSION=3.0.0", "NCCL 3.0.0 is NCCL 3, another ABI than the libnccl.so.2"),
        (
            "NCCL_VERSION=2.30.5",
            f"pins.env (bumped):{line_of(PINS, 'NCCL_VERSION')}: NCCL 2.30.5 is below the 2.30.7 torch "
            "2.14.1 requires and is built against; fix: set NCCL_VERSION=2.30.7 or newer",
        ),
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
    assert bump(checkout, "NCCL_VERSION=2.33.1", "--dry-run") == 0
    err = "".join(capsys.readouterr())
    assert snapshot(checkout) == before
    assert "--dry-run:" in err
    rows = [tuple(cell.strip() for cell in line.split("│")[1:5]) for line in err.splitlines()]
    assert ("base", "nvidia-nccl-cu13", "2.32.6", "2.33.1") in rows
    assert ("sglang", "nvidia-nccl-cu13", "2.32.6", "2.33.1") in rows, "the upper lock follows the base"
    assert not [row for row in rows if len(row) == 4 and row[3] == "reused"], (
        "a base pin rebuilds every image"
    )
    assert ("python", "nvidia-nccl-cu13 (NCCL_VERSION)", "2.32.6", "2.33.1") in rows
    assert any(row[:2] == ("every target", "unknown") for row in rows)
    assert "no build report given; fix: `epstack build TARGET --report FILE`" in " ".join(err.split())
    lock_rows = {row[0]: row[2] for row in rows if len(row) >= 3 and row[1].isdigit()}
    assert set(lock_rows) == {"base", "deepep", "sglang", "vllm"}, "the base lock is in every image's venv"
    assert "nvidia-nccl-cu13" in lock_rows["deepep"]


def test_a_base_pin_bump_pulls_the_whole_base_image_and_a_bad_report_is_refused(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = build_report(checkout)
    assert bump(checkout, "NCCL_VERSION=2.33.1", "--dry-run", "--build-report", str(report)) == 0
    rows = {
        tuple(cell.strip() for cell in line.split("│")[1:4]) for line in capsys.readouterr().out.splitlines()
    }
    assert {("hopper-ib", "base", "9.00 GB"), ("hopper-ib", "deepep", "1.00 GB")} <= rows
    assert ("hopper-ib", "a node's pull", "14.50 GB") in rows, "every layer rebuilt: the whole sglang image"
    before = snapshot(checkout)
    report.write_text("{not json")
    assert bump(checkout, "NCCL_VERSION=2.33.1", "--build-report", str(report)) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("+ ")]
    assert f"{report}: not JSON" in line and "fix:" in line, line
    assert snapshot(checkout) == before


def bump_argv(root: Path, *assignments: str) -> list[str]:
    return ["pins", "bump", "--pins", str(root / "pins.env"), "--locks", str(root / "locks"), *assignments]


# `epstack ARGS...` in a fresh Python, SIGKILLed as it enters its Nth os.replace (argv[1]; 0: never).
_KILLED_AT_REPLACE = """import os, signal, sys
from epstack.commands.main import main
calls, replace = 0, os.replace
def replace_or_die(*args, **kwargs):
    global calls
    calls += 1
    if calls == int(sys.argv[1]):
        os.kill(os.getpid(), signal.SIGKILL)
    return replace(*args, **kwargs)
os.replace = replace_or_die
sys.exit(main(sys.argv[2:]))
"""


def left_behind(root: Path) -> list[str]:
    """What a bump leaves beside the pins file and the locks, besides them."""
    kept = {"pins.env", "locks", "uv-cache", "tmp", *(p.name for p in (root / "locks").iterdir())}
    return sorted(p.name for folder in (root, root / "locks") for p in folder.iterdir() if p.name not in kept)


def test_a_bump_killed_at_any_step_leaves_the_old_pins_and_locks_or_the_new(
    locked: Path, tmp_path: Path, index: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL at each os.replace the bump makes, proving or applying; the next bump, refused at its
    first argument, finds the old pins and locks or the new ones, and nothing else beside them."""
    old = snapshot(locked)
    new_root = tmp_path / "new"
    shutil.copytree(locked, new_root)
    use_index(monkeypatch, index, new_root / "uv-cache")
    assert bump(new_root, "SGLANG_VERSION=0.5.24") == 0
    new = snapshot(new_root)
    for step in range(1, 20):
        root = tmp_path / f"killed-{step}"
        shutil.copytree(locked, root)
        use_index(monkeypatch, index, root / "uv-cache")
        argv = [
            sys.executable,
            "-c",
            _KILLED_AT_REPLACE,
            str(step),
            *bump_argv(root, "SGLANG_VERSION=0.5.24"),
        ]
        killed = subprocess.run(argv, capture_output=True, check=False).returncode == -signal.SIGKILL
        assert main(bump_argv(root, "NOT_A_PIN=1")) == 2
        assert snapshot(root) in (old, new), f"killed at os.replace {step}"
        assert left_behind(root) == [], f"killed at os.replace {step}"
        if not killed:
            assert snapshot(root) == new
            break
    else:
        pytest.fail("the bump never ran to its end")


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.name.isdigit() and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_killed_bump_takes_uv_with_it_and_the_next_run_removes_its_staging(
    checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uv waits on an index that never answers; SIGKILL of the bump kills it; the next bump removes the
    staging the killed one left (beside the pins file or in TMPDIR)."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    monkeypatch.setenv("UV_DEFAULT_INDEX", f"http://127.0.0.1:{silent.getsockname()[1]}/simple")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("TMPDIR", str(checkout / "tmp"))
    (checkout / "tmp").mkdir()
    before = snapshot(checkout)
    command = [sys.executable, "-m", "epstack", *bump_argv(checkout, "SGLANG_VERSION=0.5.24")]
    with silent, subprocess.Popen(command, stderr=subprocess.DEVNULL) as running:
        uv: list[int] = []
        try:
            for _ in range(200):
                uv = _children(running.pid)
                if uv:
                    break
                time.sleep(0.05)
            assert uv, "bump started no uv"
            running.kill()
            running.wait()
            for _ in range(100):
                if not any(map(_alive, uv)):
                    break
                time.sleep(0.05)
            assert not any(map(_alive, uv)), "uv outlived the bump"
        finally:
            for pid in filter(_alive, uv):
                os.kill(pid, signal.SIGKILL)
    assert main(bump_argv(checkout, "NOT_A_PIN=1")) == 2
    assert snapshot(checkout) == before
    assert left_behind(checkout) == [] and [p.name for p in (checkout / "tmp").iterdir()] == []


def test_a_bump_keeps_the_mode_of_the_pins_file_and_the_locks(checkout: Path) -> None:
    (checkout / "pins.env").chmod(0o444)
    (checkout / "locks" / "sglang.txt").chmod(0o640)
    assert bump(checkout, "SGLANG_VERSION=0.5.24") == 0
    assert b"SGLANG_VERSION=0.5.24" in (checkout / "pins.env").read_bytes()
    assert stat.S_IMODE((checkout / "pins.env").stat().st_mode) == 0o444
    assert stat.S_IMODE((checkout / "locks" / "sglang.txt").stat().st_mode) == 0o640


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


# A first `pins bump` holding the pins file (epstack.journal.exclusive), until its stdin closes.
HOLDER = """
import sys
from pathlib import Path
from epstack.journal import exclusive
with exclusive(Path(sys.argv[1]), what="pins bump"):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_second_bump_is_refused_naming_the_first_and_nothing_is_torn(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(checkout)
    argv = [sys.executable, "-c", HOLDER, str(checkout / "pins.env")]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as first:
        assert first.stdout is not None and first.stdin is not None
        assert first.stdout.readline() == "held\n", "the first holds the pins file"
        assert bump(checkout, "SGLANG_VERSION=0.5.24") == 2
        first.stdin.close()
        assert first.wait(timeout=60) == 0
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        f"error: {checkout / 'pins.env'}: another pins bump is moving it (pid {first.pid}: "
    )
    assert snapshot(checkout) == before, "the second read nothing and wrote nothing"
    assert bump(checkout, "SGLANG_VERSION=0.5.24") == 0, "once the first ended"
    locks = ["--pins", str(checkout / "pins.env"), "--locks", str(checkout / "locks")]
    assert main(["pins", "lock", "--check", *locks]) == 0, "pins.env and the locks agree"
