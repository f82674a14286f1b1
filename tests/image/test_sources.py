"""Offline git sources: `git archive` tarballs checked against the pins before anything is unpacked."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from epstack.commands.main import main
from epstack.errors import BadInput
from epstack.image import gitarchive
from epstack.image.sources import context_files, patch_bytes, verify
from epstack.pins.deepepsources import parse_patches
from tests.conftest import pins_variant
from tests.pins.test_deepepsources import pinned_patch


def git(*args: str | Path) -> str:
    return subprocess.run(["git", *map(str, args)], check=True, capture_output=True, text=True).stdout.strip()


def commit(repo: Path, name: str, content: str) -> str:
    (repo / name).write_text(content)
    git("-C", repo, "add", ".")
    git("-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", content)
    return git("-C", repo, "rev-parse", "HEAD")


def repository(path: Path, *contents: str) -> tuple[Path, list[str]]:
    """A git repository with one commit per content, and their SHAs."""
    path.mkdir(parents=True)
    git("init", "-q", path)
    return path, [commit(path, "setup.py", content) for content in contents]


def archive(repo: Path, sha: str, out: Path) -> Path:
    git("-C", repo, "archive", "--format=tar.gz", f"--prefix={repo.name}/", "-o", out, sha)
    return out


def test_the_commit_git_archive_records_is_read_back(tmp_path: Path) -> None:
    repo, (first, second) = repository(tmp_path / "DeepEP", "one", "two")
    assert gitarchive.read(archive(repo, first, tmp_path / "a.tar.gz")).commit == first
    verify(archive(repo, second, tmp_path / "b.tar.gz"), second)
    with pytest.raises(BadInput, match=f"holds commit {first}, DEEPEP_REF is {second}"):
        verify(tmp_path / "a.tar.gz", second, "DEEPEP_REF")


def test_a_tarball_not_made_by_git_archive_is_refused(tmp_path: Path) -> None:
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "setup.py").write_text("plain")
    plain = tmp_path / "plain.tar.gz"
    subprocess.run(["tar", "-czf", plain, "-C", tmp_path / "tree", "."], check=True)
    with pytest.raises(BadInput, match="no commit"):
        verify(plain, "0" * 40)
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tarball")
    with pytest.raises(BadInput, match="not a readable tar archive"):
        verify(tmp_path / "junk.tar.gz", "0" * 40)


@pytest.fixture
def folder(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A sources folder with DeepEP and fmt archives (no GDRCopy), and the pins that match them."""
    deepep, (deepep_sha,) = repository(tmp_path / "repos/DeepEP", "deepep")
    fmt, (fmt_sha,) = repository(tmp_path / "repos/fmt", "fmt")
    folder = tmp_path / "sources"
    folder.mkdir()
    archive(deepep, deepep_sha, folder / f"DeepEP-{deepep_sha}.tar.gz")
    archive(fmt, fmt_sha, folder / f"fmt-{fmt_sha}.tar.gz")
    pinned = {"DEEPEP_REPO": "https://example.invalid/DeepEP.git", "DEEPEP_REF": deepep_sha,
              "DEEPEP_FMT_REF": fmt_sha, "GDRCOPY_REF": "1" * 40}  # fmt: skip
    return folder, pinned


def test_the_pinned_archives_go_into_the_context_with_a_manifest(folder: tuple[Path, dict[str, str]]) -> None:
    path, pinned = folder
    files = context_files(path, {}, pinned)
    deepep = f"DeepEP-{pinned['DEEPEP_REF']}.tar.gz"
    assert sorted(files) == sorted(
        [f"sources/deepep/{deepep}", f"sources/deepep/fmt-{pinned['DEEPEP_FMT_REF']}.tar.gz",
         "sources/deepep/sources.json", "sources/base/sources.json"]
    )  # fmt: skip
    listed = json.loads(files["sources/deepep/sources.json"])["files"]
    assert listed[0] == {"file": deepep, "sha256": hashlib.sha256((path / deepep).read_bytes()).hexdigest()}
    assert context_files(None, {}, pinned) == {
        "sources/base/sources.json": b'{\n  "files": []\n}\n',
        "sources/deepep/sources.json": b'{\n  "files": []\n}\n',
    }


def test_an_archive_of_another_commit_is_an_error(folder: tuple[Path, dict[str, str]]) -> None:
    path, pinned = folder
    with pytest.raises(BadInput, match=r"not DEEPEP_REF=2{40}; fix: add DeepEP-2{40}"):
        context_files(path, {}, {**pinned, "DEEPEP_REF": "2" * 40})


def test_a_renamed_archive_is_caught_by_its_commit(folder: tuple[Path, dict[str, str]]) -> None:
    path, pinned = folder
    wrong = path / f"DeepEP-{pinned['DEEPEP_REF']}.tar.gz"
    wrong.write_bytes((path / f"fmt-{pinned['DEEPEP_FMT_REF']}.tar.gz").read_bytes())
    with pytest.raises(
        BadInput,
        match=f"holds commit {pinned['DEEPEP_FMT_REF']}, DEEPEP_REF is {pinned['DEEPEP_REF']}; fix: ",
    ):
        context_files(path, {}, pinned)


def test_the_efa_installer_is_checked_by_its_pinned_sha256(tmp_path: Path) -> None:
    installer = tmp_path / "aws-efa-installer-1.50.0.tar.gz"
    installer.write_bytes(b"installer bytes")
    digest = hashlib.sha256(b"installer bytes").hexdigest()
    base = {"EFA_INSTALLER_VERSION": "1.50.0", "EFA_INSTALLER_SHA256": digest}
    deepep = {"DEEPEP_REPO": "x", "DEEPEP_REF": "0" * 40, "DEEPEP_FMT_REF": "0" * 40, "GDRCOPY_REF": "0" * 40}
    files = context_files(tmp_path, base, deepep)
    assert files["sources/base/aws-efa-installer-1.50.0.tar.gz"] == b"installer bytes"
    with pytest.raises(
        BadInput, match=rf"^{installer}: sha256 {digest}, EFA_INSTALLER_SHA256 is 0{{64}}; fix: "
    ):
        context_files(tmp_path, {**base, "EFA_INSTALLER_SHA256": "0" * 64}, deepep)


def test_sources_verify_command(
    folder: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, pinned = folder
    deepep = str(path / f"DeepEP-{pinned['DEEPEP_REF']}.tar.gz")
    assert main(["image", "sources-verify", deepep, pinned["DEEPEP_REF"]]) == 0
    assert main(["image", "sources-verify", deepep, "3" * 40]) == 2
    assert "fix: git archive" in capsys.readouterr().err


def test_render_puts_every_fabrics_pinned_patches_in_the_context(tmp_path: Path) -> None:
    """The IB patch reaches sources/deepep/ though the render's context is shared by every target."""
    patch = b"--- a/x\n+++ b/x\n"
    digest = hashlib.sha256(patch).hexdigest()
    folder = tmp_path / "sources"
    folder.mkdir()
    (folder / "fix.patch").write_bytes(patch)
    pins = pins_variant(tmp_path, DEEPEP_PATCHES_IB=f"https://example.invalid/fix.patch#sha256={digest}")
    out = tmp_path / "out"
    assert main(["render", "--pins", str(pins), "--out-dir", str(out), "--sources", str(folder)]) == 0
    assert (out / "sources/deepep/fix.patch").read_bytes() == patch
    (folder / "fix.patch").write_bytes(patch + b"\n")
    assert main(["render", "--pins", str(pins), "--out-dir", str(out), "--sources", str(folder)]) == 2


@pytest.mark.parametrize("given", ["prefix", "empty", "upper-case"])
def test_sources_verify_wants_the_whole_commit(
    given: str, folder: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """A 7-hex prefix, an empty commit or the commit in capitals does not verify the pinned archive."""
    path, pinned = folder
    sha = pinned["DEEPEP_REF"]
    deepep = path / f"DeepEP-{sha}.tar.gz"
    commit = {"prefix": sha[:7], "empty": "", "upper-case": sha.upper()}[given]
    assert main(["image", "sources-verify", str(deepep), commit]) == 2
    err = capsys.readouterr().err
    assert f"holds commit {sha}, the pin is {commit};" in err
    with pytest.raises(
        BadInput, match=f"^{deepep}: holds commit {sha}, the pin is {commit}; fix: git archive"
    ):
        verify(deepep, commit)


def test_verify_returns_the_archives_bytes(folder: tuple[Path, dict[str, str]]) -> None:
    path, pinned = folder
    deepep = path / f"DeepEP-{pinned['DEEPEP_REF']}.tar.gz"
    assert verify(deepep, pinned["DEEPEP_REF"], "DEEPEP_REF") == deepep.read_bytes()


def test_a_wrong_fmt_archive_names_its_pin(folder: tuple[Path, dict[str, str]]) -> None:
    path, pinned = folder
    fmt = path / f"fmt-{pinned['DEEPEP_FMT_REF']}.tar.gz"
    fmt.write_bytes((path / f"DeepEP-{pinned['DEEPEP_REF']}.tar.gz").read_bytes())
    with pytest.raises(
        BadInput,
        match=f"^{fmt}: holds commit {pinned['DEEPEP_REF']}, DEEPEP_FMT_REF is {pinned['DEEPEP_FMT_REF']}",
    ):
        context_files(path, {}, pinned)


def test_a_gdrcopy_archive_goes_into_the_context_when_it_is_the_pinned_one(
    folder: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    path, pinned = folder
    gdrcopy, (sha,) = repository(tmp_path / "repos/gdrcopy", "gdrcopy")
    archive(gdrcopy, sha, path / f"gdrcopy-{sha}.tar.gz")
    files = context_files(path, {}, {**pinned, "GDRCOPY_REF": sha})
    assert files[f"sources/deepep/gdrcopy-{sha}.tar.gz"] == (path / f"gdrcopy-{sha}.tar.gz").read_bytes()
    with pytest.raises(
        BadInput, match=rf"gdrcopy-{sha}.tar.gz: not GDRCOPY_REF=1{{40}}; fix: add gdrcopy-1{{40}}"
    ):
        context_files(path, {}, pinned)


def test_deepep_without_fmt_names_the_missing_fmt_archive(folder: tuple[Path, dict[str, str]]) -> None:
    path, pinned = folder
    fmt = f"fmt-{pinned['DEEPEP_FMT_REF']}.tar.gz"
    (path / fmt).unlink()
    with pytest.raises(
        BadInput,
        match=f"^{path}: holds no {fmt} beside the other archive; fix: add it "
        rf"\(git archive {pinned['DEEPEP_FMT_REF']}\), or remove both to clone",
    ):
        context_files(path, {}, pinned)


def test_a_patch_is_taken_from_the_folder_only_when_it_is_there_and_pinned(tmp_path: Path) -> None:
    (patch,) = parse_patches(pinned_patch("fix.patch", b"fix"))
    assert patch_bytes(None, patch) is None
    assert patch_bytes(tmp_path, patch) is None
    (tmp_path / "fix.patch").write_bytes(b"fix")
    assert patch_bytes(tmp_path, patch) == b"fix"
    (tmp_path / "fix.patch").write_bytes(b"other")
    other = hashlib.sha256(b"other").hexdigest()
    with pytest.raises(
        BadInput, match=f"^{tmp_path / 'fix.patch'}: sha256 {other}, its pin is {patch.sha256}; fix"
    ):
        patch_bytes(tmp_path, patch)
