"""scripts/gpu/install-deepep.sh refuses a source that is not the pinned commit, before building."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "gpu" / "install-deepep.sh"


def _commit(repo: Path, message: str) -> str:
    (repo / "setup.py").write_text(f"# {message}\n")
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message],
        check=True,
    )
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def deepep(tmp_path: Path) -> tuple[Path, str, str]:
    """A git repository named DeepEP with two commits: (repo, first, second)."""
    repo = tmp_path / "DeepEP"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return repo, _commit(repo, "first"), _commit(repo, "second")


def _archive(repo: Path, commit: str, tmp_path: Path) -> Path:
    """`git archive` of one commit, as the device run carries DeepEP."""
    archive = tmp_path / "DeepEP.tar.gz"
    subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "archive",
            "--format=tar.gz",
            "--prefix=DeepEP/",
            "-o",
            str(archive),
            commit,
        ],
        check=True,
    )
    return archive


def _install(src: Path, ref: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    manifest = tmp_path / "manifest" / "deepep-source.json"
    result = subprocess.run(
        [
            "bash",
            str(SCRIPT),
            "--src",
            str(src),
            "--ref",
            ref,
            "--keep",
            str(tmp_path / "work"),
            "--manifest",
            str(manifest),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert not manifest.exists()
    return result


def test_archive_of_another_commit_is_refused(deepep: tuple[Path, str, str], tmp_path: Path) -> None:
    repo, first, second = deepep
    result = _install(_archive(repo, first, tmp_path), second, tmp_path)
    assert result.returncode == 1
    assert f"the source is commit '{first}', expected {second}" in result.stderr


def test_archive_of_the_pinned_commit_passes_the_check(deepep: tuple[Path, str, str], tmp_path: Path) -> None:
    repo, first, _ = deepep
    result = _install(_archive(repo, first, tmp_path), first, tmp_path)
    assert result.returncode == 1  # the next check: the archive holds no third-party/fmt
    assert "third-party/fmt is empty" in result.stderr


def test_directory_without_git_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    result = _install(plain, "d4f41e4e93602a15e95f55f6ee8df8f1aaa0e4bb", tmp_path)
    assert result.returncode == 1
    assert "the source is commit 'unknown'" in result.stderr
