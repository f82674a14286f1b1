"""`epstack pins bump --open-pr` end to end: a real git clone of a bare origin in the test's folder,
uv resolving against the package index on 127.0.0.1, and the stand-in forge (tests/bump/standinforge.py)
recording the pull request calls. GitHub itself cannot be reached from a test."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from epstack.bump.branch import CREDENTIAL_HELPER
from epstack.commands.main import main
from tests.bump.conftest import snapshot
from tests.bump.standinforge import OWNER, REPO, TOKEN, Forge, standin_forge

pytestmark = pytest.mark.aws  # loopback only: the package index and the stand-in forge on 127.0.0.1

BRANCH = "epstack/pins-bump-sglang-version"


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def clone(checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The locked checkout as a clone of a bare origin, on main."""
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(name, raising=False)
    (checkout / ".gitignore").write_text("uv-cache/\n")
    git(checkout, "init", "-q", "-b", "main")
    git(checkout, "add", ".")
    git(checkout, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "pins")
    git(tmp_path, "clone", "-q", "--bare", str(checkout), "origin.git")
    git(checkout, "remote", "add", "origin", str(tmp_path / "origin.git"))
    return checkout


@pytest.fixture
def forge(monkeypatch: pytest.MonkeyPatch) -> Iterator[Forge]:
    with standin_forge() as served:
        monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
        monkeypatch.setenv("GITHUB_API_URL", served.url)
        monkeypatch.setenv("GITHUB_REPOSITORY", f"{OWNER}/{REPO}")
        yield served


def open_pr(root: Path, *args: str) -> int:
    pins, locks = str(root / "pins.env"), str(root / "locks")
    return main(
        ["pins", "bump", "--pins", pins, "--locks", locks, "SGLANG_VERSION=0.5.24", "--open-pr", *args]
    )


def test_create_then_nothing_to_do_then_update(
    clone: Path, forge: Forge, capsys: pytest.CaptureFixture[str]
) -> None:
    main_head = git(clone, "rev-parse", "HEAD").strip()
    assert open_pr(clone) == 0
    err = "".join(capsys.readouterr())
    assert f"pull request #1 created: https://github.com/{OWNER}/{REPO}/pull/1" in err
    origin = clone.parent / "origin.git"
    commit = git(origin, "rev-parse", BRANCH).strip()
    assert git(origin, "log", "--format=%P %s", "-1", BRANCH).strip() == (
        f"{main_head} pins: SGLANG_VERSION 0.5.23 -> 0.5.24"
    ), "one commit on main's head"
    assert git(origin, "diff", "--name-only", "main", BRANCH).split() == ["locks/sglang.txt", "pins.env"]
    assert git(clone, "show", f"{commit}:pins.env") == (clone / "pins.env").read_text()
    assert (
        git(clone, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
        and git(clone, "diff", "--cached") == ""
    )
    ((method, path),) = forge.writes()
    assert (method, path) == ("POST", f"/repos/{OWNER}/{REPO}/pulls")
    created = forge.calls[-1].payload or {}
    assert (created["head"], created["base"], created["title"]) == (
        BRANCH,
        "main",
        "pins: SGLANG_VERSION 0.5.23 -> 0.5.24",
    )
    assert created["body"].startswith("## epstack pins bump SGLANG_VERSION=0.5.24\n")
    assert (
        "- [SGLANG_VERSION 0.5.24: release notes](https://github.com/sgl-project/sglang/releases/tag/v0.5.24)"
        in created["body"]
    )
    assert "| `sglang` | `tinydep` | `1.0` | `2.0` |" in created["body"], "the summary's tables"
    assert all(call.authorization == f"Bearer {TOKEN}" for call in forge.calls)
    assert TOKEN not in err

    # The next scheduled run, in a fresh checkout of main: the same commit, the same pull request.
    git(clone, "checkout", "-q", "--", "pins.env", "locks")
    assert open_pr(clone) == 0
    err = "".join(capsys.readouterr())
    assert f"branch {BRANCH}: {commit[:12]} already there" in err and "pull request #1 unchanged" in err
    assert len(forge.writes()) == 1, "nothing to do: no call that writes"
    assert [c.method for c in forge.calls] == ["GET", "POST", "GET"]

    forge.pulls[0]["body"] = "edited by hand"
    git(clone, "checkout", "-q", "--", "pins.env", "locks")
    assert open_pr(clone) == 0
    assert "pull request #1 updated" in "".join(capsys.readouterr())
    assert forge.writes()[-1] == ("PATCH", f"/repos/{OWNER}/{REPO}/pulls/1")
    assert forge.pulls[0]["body"] == created["body"] and len(forge.pulls) == 1


def branches(origin: Path) -> list[str]:
    return git(origin, "for-each-ref", "--format=%(refname:short)", "refs/heads").split()


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if not line.startswith("+ ")]


def test_no_token_is_one_line_exit_2_and_nothing_touched(
    clone: Path, forge: Forge, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("GITHUB_TOKEN")
    before = snapshot(clone)
    assert open_pr(clone) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert "GITHUB_TOKEN is not set; fix: export GITHUB_TOKEN" in line
    assert (
        snapshot(clone) == before and forge.calls == [] and branches(clone.parent / "origin.git") == ["main"]
    )


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_token_is_one_line_exit_2_before_any_work(
    clone: Path, forge: Forge, status: int, capsys: pytest.CaptureFixture[str]
) -> None:
    forge.refuse = status
    before = snapshot(clone)
    assert open_pr(clone) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert (
        f"answered HTTP {status}" in line and "GITHUB_TOKEN was refused; fix:" in line and TOKEN not in line
    )
    assert snapshot(clone) == before, "asked before the bump: nothing written"
    assert [c.method for c in forge.calls] == ["GET"] and branches(clone.parent / "origin.git") == ["main"]


def test_open_pr_with_dry_run_is_bad_input(
    clone: Path, forge: Forge, capsys: pytest.CaptureFixture[str]
) -> None:
    assert open_pr(clone, "--dry-run") == 2
    assert "--open-pr and --dry-run" in capsys.readouterr().err and forge.calls == []


def test_outside_a_git_checkout_is_bad_input(
    checkout: Path, forge: Forge, capsys: pytest.CaptureFixture[str]
) -> None:
    assert open_pr(checkout) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert "is not in a git checkout" in line and forge.calls == []


def test_locks_outside_the_checkout_are_bad_input(
    clone: Path, tmp_path: Path, forge: Forge, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    args = [
        "pins",
        "bump",
        "--pins",
        str(clone / "pins.env"),
        "--locks",
        str(elsewhere),
        "SGLANG_VERSION=0.5.24",
    ]
    assert main([*args, "--open-pr"]) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert f"--open-pr: {elsewhere} is outside the checkout {clone}; fix:" in line and forge.calls == []


def test_git_gets_the_token_from_the_environment_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the push's credential helper answers git for github.com: the token of the environment it
    runs in; the helper's text (on git's command line) holds no token."""
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    assert TOKEN not in CREDENTIAL_HELPER
    helper = ["-c", "credential.helper=", "-c", f"credential.helper={CREDENTIAL_HELPER}"]
    asked = "protocol=https\nhost=github.com\n\n"
    answer = subprocess.run(
        ["git", *helper, "credential", "fill"],
        input=asked,
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert f"username=x-access-token\npassword={TOKEN}\n" in answer.stdout


def test_a_failed_open_pr_is_resumed_by_the_same_request(
    clone: Path, forge: Forge, capsys: pytest.CaptureFixture[str]
) -> None:
    forge.fail_writes = 502
    assert open_pr(clone) == 3
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert f"POST {forge.url}/repos/{OWNER}/{REPO}/pulls answered HTTP 502 (Server Error)" in line
    written = (clone / "pins.env").read_text()
    assert "SGLANG_VERSION=0.5.24" in written and forge.pulls == [], "written and pushed, no pull request"

    forge.fail_writes = 0
    assert open_pr(clone) == 0, "not 'SGLANG_VERSION is already 0.5.24'"
    err = capsys.readouterr().err
    assert "already hold this bump: resuming its pull request" in err
    assert f"branch {BRANCH}: " in err and "already there" in err and "pull request #1 created" in err
    assert (clone / "pins.env").read_text() == written and len(forge.pulls) == 1
    assert forge.pulls[0]["title"] == "pins: SGLANG_VERSION 0.5.23 -> 0.5.24"
    assert forge.pulls[0]["body"].startswith("## epstack pins bump SGLANG_VERSION=0.5.24\n")

    assert open_pr(clone) == 2, "made: nothing is pending any more"
    assert "SGLANG_VERSION is already 0.5.24" in capsys.readouterr().err


def test_a_pending_pull_request_is_not_resumed_once_the_files_changed(
    clone: Path, forge: Forge, capsys: pytest.CaptureFixture[str]
) -> None:
    forge.fail_writes = 502
    assert open_pr(clone) == 3
    forge.fail_writes = 0
    pins = clone / "pins.env"
    pins.write_text(pins.read_text() + "# edited by hand\n")
    capsys.readouterr()
    assert open_pr(clone) == 2
    assert "SGLANG_VERSION is already 0.5.24" in capsys.readouterr().err and forge.pulls == []
