"""Untrusted source archives (issue 19, class 5): verified whole before render copies them, `sources
verify` passes them or `deepep build` unpacks them. Every member checked (tarfile's data filter, and what
git archive never writes), the stream read to its end, size caps; a pinned archive that is present but
wrong is refused, never cloned around."""

from __future__ import annotations

import gzip
import io
import os
import re
import signal
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from epstack.commands.main import main
from epstack.errors import BadInput
from epstack.image import deepep, gitarchive
from epstack.image.sources import context_files, verify
from tests.conftest import REPO, pins_variant
from tests.image.test_sources import archive, git, repository

COMMIT = "c" * 40
FMT_COMMIT = "f" * 40
PINNED = {"DEEPEP_REPO": "/nonexistent/DeepEP.git", "DEEPEP_REF": COMMIT, "DEEPEP_FMT_REF": FMT_COMMIT,
          "GDRCOPY_REF": "9" * 40}  # fmt: skip
SHARED_SOURCES = Path(os.environ.get("EPSTACK_TEST_SOURCES") or REPO.parent / "shared" / "sources")

Member = tuple[tarfile.TarInfo, bytes]


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", link: str = "") -> Member:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, len(data), link
    return info, data


def tar_bytes(*members: Member, commit: str = COMMIT) -> bytes:
    """A tar laid out as `git archive` writes it: pax, the commit in the global header, then `members`."""
    raw = io.BytesIO()
    with tarfile.open(
        fileobj=raw, mode="w", format=tarfile.PAX_FORMAT, pax_headers={"comment": commit}
    ) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def without_end(tar: bytes) -> bytes:
    """The tar up to its end-of-archive blocks."""
    with tarfile.open(fileobj=io.BytesIO(tar)) as listed:
        listed.getmembers()
        return tar[: listed.offset]


def write(path: Path, tar: bytes) -> Path:
    path.write_bytes(gzip.compress(tar))
    return path


GOOD = (member("DeepEP", tarfile.DIRTYPE), member("DeepEP/setup.py", data=b"print()\n"))

HOSTILE: dict[str, tuple[tuple[Member, ...], str]] = {
    "dot-dot": ((member("DeepEP/../../evil"),), "leaves the archive's folder"),
    "dot-dot-inside": ((member("DeepEP/../DeepEP/x"),), "is not a normal path"),
    "absolute": ((member("/etc/evil"),), "is an absolute path"),
    "absolute-symlink": ((member("DeepEP/l", tarfile.SYMTYPE, link="/etc/passwd"),), "links to an absolute"),
    "outside-symlink": ((member("DeepEP/l", tarfile.SYMTYPE, link="../../etc"),), "links outside"),
    "hardlink": ((*GOOD, member("DeepEP/h", tarfile.LNKTYPE, link="DeepEP/setup.py")), "is a hard link"),
    "outside-hardlink": ((member("DeepEP/h", tarfile.LNKTYPE, link="../etc/passwd"),), "links outside"),
    "char-device": ((member("DeepEP/tty", tarfile.CHRTYPE),), "device, FIFO"),
    "block-device": ((member("DeepEP/sda", tarfile.BLKTYPE),), "device, FIFO"),
    "fifo": ((member("DeepEP/pipe", tarfile.FIFOTYPE),), "device, FIFO"),
    "contiguous": ((member("DeepEP/c", tarfile.CONTTYPE),), "of tar type b'7'"),
    "twice": ((*GOOD, member("DeepEP/setup.py", data=b"evil")), "is given twice"),
    "under-a-symlink": (
        (
            member("DeepEP/d", tarfile.DIRTYPE),
            member("DeepEP/l", tarfile.SYMTYPE, link="d"),
            member("DeepEP/l/x"),
        ),
        "lies under the symbolic link 'DeepEP/l'",
    ),
    # p is DeepEP itself, so p/../.. is the parent of the destination; lexically it stays inside.
    "link-chain": (
        (
            member("DeepEP/p", tarfile.SYMTYPE, link="."),
            member("DeepEP/q", tarfile.SYMTYPE, link="p/../../x"),
        ),
        "climbing out of another link",
    ),
    "huge-header": ((member("DeepEP/" + "a" * (2 << 20)),), "a tar header of more than"),
}


@contextmanager
def within(seconds: float) -> Iterator[None]:
    """Fail instead of hanging: a FIFO opened for reading blocks until a writer comes."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("blocked: something opened the FIFO for reading")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def sources_verify(path: Path, capsys: pytest.CaptureFixture[str], commit: str = COMMIT) -> str:
    """`epstack image sources-verify PATH COMMIT`, which must refuse with exit 2 and one line with its fix."""
    with within(20):
        assert main(["image", "sources-verify", str(path), commit]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and "; fix: " in err, err
    return err


@pytest.mark.parametrize("case", HOSTILE)
def test_every_member_is_checked_by_sources_verify(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    members, reason = HOSTILE[case]
    hostile = write(tmp_path / f"DeepEP-{COMMIT}.tar.gz", tar_bytes(*members))
    assert reason in sources_verify(hostile, capsys)


@pytest.mark.parametrize("case", ["dot-dot", "hardlink", "twice", "link-chain", "fifo"])
def test_render_and_deepep_build_refuse_the_same_archives(case: str, tmp_path: Path) -> None:
    """One verification: render's sources context and deepep build's source refuse what verify does,
    with BadInput (exit 2), not a traceback, and unpack nothing."""
    members, reason = HOSTILE[case]
    folder = tmp_path / "sources"
    folder.mkdir()
    write(folder / f"DeepEP-{COMMIT}.tar.gz", tar_bytes(*members))
    write(folder / f"fmt-{FMT_COMMIT}.tar.gz", tar_bytes(member("fmt", tarfile.DIRTYPE), commit=FMT_COMMIT))
    with pytest.raises(BadInput, match=re.escape(reason)):
        context_files(folder, {}, PINNED)
    with pytest.raises(BadInput, match=re.escape(reason)):
        deepep.fetch_source(folder, PINNED, tmp_path / "work")
    assert not (tmp_path / "work").exists()


def test_render_copies_no_hostile_archive_into_the_context(tmp_path: Path) -> None:
    pins = pins_variant(tmp_path)
    ref = next(line.split("=")[1] for line in pins.read_text().splitlines() if line.startswith("DEEPEP_REF="))
    folder = tmp_path / "sources"
    folder.mkdir()
    write(folder / f"DeepEP-{ref}.tar.gz", tar_bytes(*HOSTILE["outside-symlink"][0], commit=ref))
    out = tmp_path / "out"
    assert main(["render", "--pins", str(pins), "--out-dir", str(out), "--sources", str(folder)]) == 2
    assert not out.exists()


def a_real_archive(tmp_path: Path, folder: Path) -> str:
    """`git archive` of a small repository with symbolic links inside its tree (legitimate), in `folder`."""
    repo, (sha,) = repository(tmp_path / "repos" / "DeepEP", "setup")
    (repo / "include").mkdir()
    (repo / "include" / "ep.h").write_text("// ep\n")
    os.symlink("include/ep.h", repo / "ep.h")
    os.symlink("include", repo / "headers")
    os.symlink("ep.h", repo / "chain.h")
    git("-C", repo, "add", ".")
    git("-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "links")
    sha = git("-C", repo, "rev-parse", "HEAD")
    archive(repo, sha, folder / f"DeepEP-{sha}.tar.gz")
    return sha


def test_git_archive_symlinks_inside_the_tree_verify_and_unpack(
    no_clone_folder: Path, tmp_path: Path
) -> None:
    sha = a_real_archive(tmp_path, no_clone_folder)
    tree, _ = deepep.fetch_source(no_clone_folder, {**PINNED, "DEEPEP_REF": sha}, tmp_path / "work")
    assert (tree / "chain.h").read_text() == "// ep\n" and (tree / "headers" / "ep.h").is_file()


@pytest.mark.skipif(not SHARED_SOURCES.is_dir(), reason=f"no pinned archives in {SHARED_SOURCES}")
def test_the_pinned_archives_still_verify() -> None:
    for path in sorted(SHARED_SOURCES.glob("*-*.tar.gz")):
        found = gitarchive.read(path)
        assert len(found.commit) == 40 and found.data == path.read_bytes()


def test_truncated_archives_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tar = tar_bytes(*GOOD, member("DeepEP/b.py", data=b"x" * 3000))
    packed = gzip.compress(tar)
    cut_gzip = tmp_path / "gzip.tar.gz"
    cut_gzip.write_bytes(packed[: len(packed) // 2])
    assert "not a readable tar archive" in sources_verify(cut_gzip, capsys)
    last = tar.rindex(b"DeepEP/b.py") // 512 * 512  # the last member's header block
    at_a_header = write(tmp_path / "header.tar.gz", tar[:last])
    assert "cut short" in sources_verify(at_a_header, capsys)
    in_its_data = write(tmp_path / "data.tar.gz", tar[: last + 1024])
    assert "not a readable tar archive" in sources_verify(in_its_data, capsys)
    end = tar.index(bytes(1024), last + 512)  # one end-of-archive block of two
    assert "cut short" in sources_verify(write(tmp_path / "end.tar.gz", tar[: end + 512]), capsys)


def test_a_corrupt_header_or_data_after_the_end_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tar = tar_bytes(*GOOD, member("DeepEP/b.py", data=b"x"))
    last = tar.rindex(b"DeepEP/b.py") // 512 * 512
    corrupt = write(tmp_path / "corrupt.tar.gz", tar[:last] + b"\xff" * 512 + tar[last + 512 :])
    assert "cut short or corrupt" in sources_verify(corrupt, capsys)
    appended = tar + tar_bytes(member("DeepEP/setup.py", data=b"evil"))
    assert "data after the end" in sources_verify(write(tmp_path / "after.tar.gz", appended), capsys)


def test_a_valid_header_before_2_gb_of_zeros_is_refused_without_unpacking_them(tmp_path: Path) -> None:
    """Issue 19: render copied it whole. 2 GiB of zeros as 2048 gzip members of 1 MiB (2 MB on disk):
    the ratio cap stops the read at 50 times the file."""
    zeros = gzip.compress(bytes(1 << 20))
    folder = tmp_path / "sources"
    folder.mkdir()
    bomb = folder / f"DeepEP-{COMMIT}.tar.gz"
    bomb.write_bytes(gzip.compress(without_end(tar_bytes(*GOOD))) + zeros * 2048)
    with pytest.raises(
        BadInput, match=rf"unpacks to more than {gitarchive.MAX_RATIO * bomb.stat().st_size} bytes"
    ):
        context_files(folder, {}, PINNED)


def test_a_member_declaring_600_mb_is_refused_before_it_is_read(tmp_path: Path) -> None:
    info, _ = member("DeepEP/big")
    info.size = 600 << 20
    header = without_end(tar_bytes(*GOOD)) + info.tobuf(tarfile.PAX_FORMAT)
    with pytest.raises(BadInput, match=f"unpacks to more than {gitarchive.RATIO_FLOOR} bytes"):
        verify(write(tmp_path / "big.tar.gz", header + bytes(10240)), COMMIT)


def test_the_member_count_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cap (10000) lowered to 100: the same check, without writing 10000 members."""
    monkeypatch.setattr(gitarchive, "MAX_MEMBERS", 100)
    files = [member(f"DeepEP/{n}") for n in range(gitarchive.MAX_MEMBERS)]
    verify(write(tmp_path / "many.tar.gz", tar_bytes(*files)), COMMIT)
    with pytest.raises(BadInput, match=f"more than {gitarchive.MAX_MEMBERS} members"):
        verify(write(tmp_path / "more.tar.gz", tar_bytes(*files, member("DeepEP/one-more"))), COMMIT)


def test_a_file_over_the_size_cap_is_not_read(tmp_path: Path) -> None:
    sparse = tmp_path / f"DeepEP-{COMMIT}.tar.gz"
    with sparse.open("wb") as file:
        file.truncate(gitarchive.MAX_ARCHIVE_BYTES + 1)
    with pytest.raises(BadInput, match=f"more than {gitarchive.MAX_ARCHIVE_BYTES} bytes"):
        verify(sparse, COMMIT)


@pytest.fixture
def no_clone_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A sources folder with a good fmt archive; deepep build must never clone beside it."""

    def clone(*args: object) -> Path:
        raise AssertionError("fell back to git clone")

    monkeypatch.setattr(deepep, "_clone", clone)
    folder = tmp_path / "sources"
    folder.mkdir()
    write(folder / f"fmt-{FMT_COMMIT}.tar.gz", tar_bytes(member("fmt", tarfile.DIRTYPE), commit=FMT_COMMIT))
    return folder


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda path: path.mkdir(), "a directory, not a `git archive` tarball"),
        (os.mkfifo, "a FIFO, not a `git archive` tarball"),
        (lambda path: path.symlink_to("gone.tar.gz"), "cannot be read (No such file or directory)"),
    ],
    ids=["directory", "fifo", "dangling-symlink"],
)
def test_a_pinned_name_that_is_not_an_archive_is_refused_not_cloned(
    make: object, reason: str, no_clone_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pinned = no_clone_folder / f"DeepEP-{COMMIT}.tar.gz"
    make(pinned)  # type: ignore[operator]
    with within(20):
        with pytest.raises(BadInput, match=re.escape(reason)):
            deepep.fetch_source(no_clone_folder, PINNED, tmp_path / "work")
        with pytest.raises(BadInput, match=re.escape(reason)):
            context_files(no_clone_folder, {}, PINNED)
    assert reason in sources_verify(pinned, capsys)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_archive_is_refused(no_clone_folder: Path, tmp_path: Path) -> None:
    pinned = write(no_clone_folder / f"DeepEP-{COMMIT}.tar.gz", tar_bytes(*GOOD))
    pinned.chmod(0)
    with pytest.raises(BadInput, match="cannot be read"):
        deepep.fetch_source(no_clone_folder, PINNED, tmp_path / "work")


def test_deepep_build_refuses_a_renamed_or_lone_archive_instead_of_cloning(
    no_clone_folder: Path, tmp_path: Path
) -> None:
    """Renamed: DeepEP-<another commit>. Lone: fmt's archive without DeepEP's (render refuses it too, before
    the image's build). A --sources folder that is not there."""
    renamed = write(no_clone_folder / f"DeepEP-{'1' * 40}.tar.gz", tar_bytes(*GOOD))
    with pytest.raises(BadInput, match=f"not DEEPEP_REF={COMMIT}; fix: add DeepEP-{COMMIT}.tar.gz"):
        deepep.fetch_source(no_clone_folder, PINNED, tmp_path / "work")
    renamed.unlink()
    lone = f"holds no DeepEP-{COMMIT}.tar.gz beside the other archive"
    with pytest.raises(BadInput, match=lone):
        deepep.fetch_source(no_clone_folder, PINNED, tmp_path / "work")
    with pytest.raises(BadInput, match=lone):
        context_files(no_clone_folder, {}, PINNED)
    with pytest.raises(BadInput, match="no such sources folder"):
        deepep.fetch_source(tmp_path / "typo", PINNED, tmp_path / "work")


@given(cut=st.floats(0.01, 0.99))
def test_an_archive_cut_anywhere_is_refused(cut: float) -> None:
    """A gzip cut at any byte, or the tar inside it cut anywhere before its end-of-archive blocks."""
    tar = tar_bytes(*GOOD, member("DeepEP/b.py", data=bytes(range(256)) * 8))
    end = tar.index(bytes(1024), tar.rindex(b"DeepEP/b.py")) + 512
    packed = gzip.compress(tar)
    with tempfile.TemporaryDirectory() as tmp:
        for data in (packed[: int(len(packed) * cut)], gzip.compress(tar[: int(end * cut)])):
            with pytest.raises(BadInput):
                verify(raw(Path(tmp), data), COMMIT)


def raw(folder: Path, data: bytes) -> Path:
    (folder / "cut.tar.gz").write_bytes(data)
    return folder / "cut.tar.gz"


PARTS = st.sampled_from(["DeepEP", "a", "b", "..", ".", ""])
KINDS = st.sampled_from(
    [tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE]
)
PATHS = st.builds(
    lambda root, parts: root + "/".join(parts),
    st.sampled_from(["", "/"]),
    st.lists(PARTS, min_size=1, max_size=4),
)


@given(st.lists(st.tuples(PATHS, KINDS, PATHS), min_size=1, max_size=6))
def test_an_archive_that_verifies_unpacks_inside_its_folder(entries: list[tuple[str, bytes, str]]) -> None:
    """Generated members: verify refuses (BadInput) or the archive unpacks with nothing outside its folder."""
    with tempfile.TemporaryDirectory() as tmp:
        data = gzip.compress(tar_bytes(*(member(name, kind, link=link) for name, kind, link in entries)))
        path = raw(Path(tmp), data)
        try:
            verify(path, COMMIT)
        except BadInput:
            return
        destination = Path(tmp) / "box" / "dest"
        destination.mkdir(parents=True)
        with tarfile.open(path) as tar:  # as deepep build unpacks it
            tar.extractall(destination, filter="data")
        assert sorted(p.name for p in Path(tmp).iterdir()) == ["box", "cut.tar.gz"]
        assert [p.name for p in (Path(tmp) / "box").iterdir()] == ["dest"]
        for extracted in destination.rglob("*"):
            assert extracted.resolve().is_relative_to(destination.resolve()), extracted
