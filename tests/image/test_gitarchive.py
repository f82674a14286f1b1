"""epstack.image.gitarchive on its own: what a verified `git archive` holds, and each refusal's message
(the file, the problem, the fix), at the edges of its caps."""

from __future__ import annotations

import gzip
import io
import os
import re
import socket
import stat
import tarfile
import tempfile
import tracemalloc
from pathlib import Path

import pytest

from epstack.errors import BadInput
from epstack.image import gitarchive
from tests.image.test_sources import archive, repository
from tests.image.test_untrusted_archives import COMMIT, GOOD, member, tar_bytes, within, without_end, write

FIX = "; fix: make it with `git archive --format=tar.gz` of the pinned commit"


def refused(path: Path) -> str:
    """The one-line BadInput of reading `path`."""
    with pytest.raises(BadInput) as error:
        gitarchive.read(path)
    message = str(error.value)
    assert "\n" not in message
    return message


def test_a_git_archive_reads_back_its_commit_and_its_exact_bytes(tmp_path: Path) -> None:
    repo, (sha,) = repository(tmp_path / "DeepEP", "one")
    path = archive(repo, sha, tmp_path / "DeepEP.tar.gz")
    found = gitarchive.read(path)
    assert found.commit == sha and found.data == path.read_bytes()


def test_a_link_to_an_archive_reads_as_the_archive(tmp_path: Path) -> None:
    target = write(tmp_path / "real.tar.gz", tar_bytes(*GOOD))
    (tmp_path / "link.tar.gz").symlink_to(target)
    assert gitarchive.read(tmp_path / "link.tar.gz").data == target.read_bytes()


def test_a_socket_is_named_and_not_read() -> None:
    with tempfile.TemporaryDirectory() as short:  # a socket's path is at most 107 bytes
        path = Path(short) / "s.tar.gz"
        with socket.socket(socket.AF_UNIX) as listening:
            listening.bind(str(path))
            assert refused(path) == (
                f"{path}: a socket, not a `git archive` tarball; fix: put the tarball itself there"
            )


def test_a_missing_archive_cannot_be_read(tmp_path: Path) -> None:
    assert refused(tmp_path / "gone.tar.gz") == (
        f"{tmp_path / 'gone.tar.gz'}: cannot be read (No such file or directory); "
        "fix: make it a readable `git archive` tarball"
    )


def test_the_file_size_cap_lets_an_archive_of_exactly_the_cap_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "a.tar.gz", tar_bytes(*GOOD))
    size = path.stat().st_size
    monkeypatch.setattr(gitarchive, "MAX_ARCHIVE_BYTES", size)
    assert gitarchive.read(path).data == path.read_bytes()
    monkeypatch.setattr(gitarchive, "MAX_ARCHIVE_BYTES", size - 1)
    assert refused(path) == f"{path}: more than {size - 1} bytes, not a source archive{FIX}"


def test_an_archive_that_grows_past_the_cap_after_its_stat_is_read_no_further_than_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stat said small, the file is 256 MiB by the time it is opened: one byte past the cap is
    read, not the whole file (what the cap on a file's bytes is for)."""
    path = write(tmp_path / "a.tar.gz", tar_bytes(*GOOD))
    monkeypatch.setattr(gitarchive, "MAX_ARCHIVE_BYTES", 1 << 20)
    real_open = os.open

    def grow_then_open(name: str, flags: int) -> int:
        os.truncate(name, 256 << 20)  # sparse: no disk used
        return real_open(name, flags)

    monkeypatch.setattr(os, "open", grow_then_open)
    tracemalloc.start()
    try:
        assert refused(path) == f"{path}: more than {1 << 20} bytes, not a source archive{FIX}"
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


def test_the_unpacked_cap_is_the_ratio_of_the_packed_size_between_floor_and_ceiling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole tar (10240 bytes) and one read past its end (MAX_READ) fit exactly under the cap."""
    path = write(tmp_path / "a.tar.gz", tar_bytes(*GOOD))
    packed = path.stat().st_size
    needed = 10240 + gitarchive.MAX_READ
    monkeypatch.setattr(gitarchive, "RATIO_FLOOR", needed)
    assert gitarchive.read(path).commit == COMMIT
    monkeypatch.setattr(gitarchive, "RATIO_FLOOR", needed - 1)
    monkeypatch.setattr(gitarchive, "MAX_RATIO", 1)
    assert refused(path) == (
        f"{path}: unpacks to more than {needed - 1} bytes (the cap: 1 times its {packed} bytes, at least "
        f"{needed - 1}, at most {gitarchive.MAX_UNPACKED_BYTES}){FIX}"
    )
    monkeypatch.setattr(gitarchive, "RATIO_FLOOR", 0)
    monkeypatch.setattr(gitarchive, "MAX_RATIO", needed // packed + 1)  # the ratio alone allows it
    assert gitarchive.read(path).commit == COMMIT
    monkeypatch.setattr(gitarchive, "MAX_RATIO", 2)
    assert f"unpacks to more than {2 * packed} bytes" in refused(path)
    monkeypatch.setattr(gitarchive, "RATIO_FLOOR", 10 * needed)
    monkeypatch.setattr(gitarchive, "MAX_UNPACKED_BYTES", needed - 1)  # the ceiling wins over the floor
    assert f"unpacks to more than {needed - 1} bytes" in refused(path)


def test_two_end_of_archive_blocks_without_padding_verify(tmp_path: Path) -> None:
    tar = without_end(tar_bytes(*GOOD))
    assert gitarchive.read(write(tmp_path / "two.tar.gz", tar + bytes(1024))).commit == COMMIT
    one = write(tmp_path / "one.tar.gz", tar + bytes(512))
    assert refused(one) == f"{one}: cut short (one end-of-archive block of two){FIX}"


@pytest.mark.parametrize("byte", [b"\xff", b"X"])
def test_a_corrupt_header_names_its_byte(byte: bytes, tmp_path: Path) -> None:
    tar = tar_bytes(*GOOD, member("DeepEP/b.py", data=b"x"))
    last = tar.rindex(b"DeepEP/b.py") // 512 * 512
    corrupt = write(tmp_path / "corrupt.tar.gz", tar[:last] + byte * 512 + tar[last + 512 :])
    assert refused(corrupt) == f"{corrupt}: cut short or corrupt at byte {last} of its tar{FIX}"


@pytest.mark.parametrize("data", [b"x", b"X"])
def test_data_after_the_end_is_refused_however_far_into_the_padding(data: bytes, tmp_path: Path) -> None:
    tar = tar_bytes(*GOOD)
    for late in (tar + data, tar + bytes(gitarchive.MAX_READ * 2) + data):
        path = write(tmp_path / "late.tar.gz", late)
        assert refused(path) == f"{path}: holds data after the end of its tar{FIX}"


@pytest.mark.parametrize("after", [511, gitarchive.MAX_READ + 100])
def test_padding_counts_every_zero_after_the_first_end_block(after: int, tmp_path: Path) -> None:
    """511 zeros are not a second end-of-archive block; a megabyte of zeros read in two parts is."""
    tar = without_end(tar_bytes(*GOOD)) + bytes(512 + after)
    path = write(tmp_path / "a.tar.gz", tar)
    if after < 512:
        assert refused(path) == f"{path}: cut short (one end-of-archive block of two){FIX}"
    else:
        assert gitarchive.read(path).commit == COMMIT


def test_an_archive_without_a_commit_says_so(tmp_path: Path) -> None:
    path = write(tmp_path / "empty.tar.gz", tar_bytes(*GOOD, commit=""))
    assert refused(path) == f"{path}: holds no commit (not made by `git archive` of a commit){FIX}"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:  # no pax header at all
        tar.addfile(member("DeepEP", tarfile.DIRTYPE)[0])
    path = write(tmp_path / "plain.tar.gz", raw.getvalue())
    assert refused(path) == f"{path}: holds no commit (not made by `git archive` of a commit){FIX}"
    dropped = without_end(tar_bytes(*GOOD)) + tar_bytes(
        member("DeepEP/x"), commit=""
    )  # a later header empties it
    path = write(tmp_path / "dropped.tar.gz", dropped)
    assert refused(path) == f"{path}: holds no commit (not made by `git archive` of a commit){FIX}"


def test_an_empty_pax_header_is_read_like_any_other(tmp_path: Path) -> None:
    empty = tarfile.TarInfo("DeepEP/pax")
    empty.type = tarfile.XHDTYPE
    tar = (
        without_end(tar_bytes(*GOOD))
        + empty.tobuf(tarfile.USTAR_FORMAT)
        + tar_bytes(member("DeepEP/x"))[1024:]
    )
    assert gitarchive.read(write(tmp_path / "a.tar.gz", tar)).commit == COMMIT


def test_a_member_given_twice_is_named(tmp_path: Path) -> None:
    path = write(tmp_path / "a.tar.gz", tar_bytes(*GOOD, member("DeepEP/setup.py", data=b"evil")))
    assert refused(path) == f"{path}: member 'DeepEP/setup.py' is given twice{FIX}"


def test_a_filter_refusal_without_words_of_its_own_keeps_tarfiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A newer Python may add reasons to the data filter: they are passed on, not dropped."""

    class NewFilterError(tarfile.FilterError):
        pass

    def data_filter(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
        raise NewFilterError("a reason from a newer Python")

    monkeypatch.setattr(tarfile, "data_filter", data_filter)
    path = write(tmp_path / "a.tar.gz", tar_bytes(*GOOD))
    assert refused(path) == f"{path}: member 'DeepEP' a reason from a newer Python{FIX}"


class _StatSays(type(Path())):  # type: ignore[misc]
    """A path whose stat() reports another file's: what a swap between the stat and the open looks like."""

    says: os.stat_result

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        return self.says


def stat_says(path: Path, says: os.stat_result) -> Path:
    swapped = _StatSays(path)
    swapped.says = says
    return swapped


def test_a_fifo_swapped_in_after_the_stat_is_refused_without_blocking(tmp_path: Path) -> None:
    regular = write(tmp_path / "a.tar.gz", tar_bytes(*GOOD))
    fifo = tmp_path / "fifo.tar.gz"
    os.mkfifo(fifo)
    with within(10):
        message = refused(stat_says(fifo, regular.stat()))
    assert message == f"{fifo}: a FIFO, not a `git archive` tarball; fix: put the tarball itself there"


@pytest.mark.parametrize(
    ("mode", "what"),
    [
        (stat.S_IFCHR, "a character device"),
        (stat.S_IFBLK, "a block device"),
        (stat.S_IFLNK, "not a regular file"),  # no kind stat() returns: it follows links
    ],
)
def test_a_device_or_other_kind_of_file_is_named_and_never_opened(
    mode: int, what: str, tmp_path: Path
) -> None:
    regular = write(tmp_path / "a.tar.gz", tar_bytes(*GOOD))
    says = list(regular.stat())
    says[0] = mode | 0o666
    regular.chmod(0)  # opened, it would fail as unreadable (or, as root, verify)
    assert refused(stat_says(regular, os.stat_result(says))) == (
        f"{regular}: {what}, not a `git archive` tarball; fix: put the tarball itself there"
    )


def test_a_second_commit_header_is_refused(tmp_path: Path) -> None:
    tar = without_end(tar_bytes(*GOOD)) + tar_bytes(member("DeepEP/x"), commit="d" * 40)
    path = write(tmp_path / "two.tar.gz", tar)
    assert refused(path) == f"{path}: names two commits ({COMMIT}, then {'d' * 40}){FIX}"


@pytest.mark.parametrize(
    ("members", "reason"),
    [
        ((member("DeepEP/h", tarfile.LNKTYPE, link="DeepEP/setup.py"),), "is a hard link"),
        ((member("DeepEP/c", tarfile.CONTTYPE),), "is of tar type b'7'"),
        ((member("."),), "is not a normal path (`.`, `..` or `//` in it)"),
        ((member("DeepEP//x"),), "is not a normal path (`.`, `..` or `//` in it)"),
        ((member("DeepEP/./x"),), "is not a normal path (`.`, `..` or `//` in it)"),
        ((member("/etc/x"),), "is an absolute path"),
    ],
    ids=["hardlink", "contiguous", "dot", "double-slash", "dot-inside", "absolute"],
)
def test_a_member_git_never_writes_is_named_with_why(
    members: tuple[tuple[tarfile.TarInfo, bytes], ...], reason: str, tmp_path: Path
) -> None:
    path = write(tmp_path / "a.tar.gz", tar_bytes(*GOOD, *members))
    name = members[0][0].name
    message = refused(path)
    assert message.startswith(f"{path}: member {name!r} {reason}"), message
    assert message.endswith(FIX)
    if reason.startswith("is a hard link") or reason.startswith("is of tar type"):
        assert "(git archive writes only files, directories and symbolic links)" in message


def test_links_that_stay_inside_the_tree_verify(tmp_path: Path) -> None:
    links = (
        member("DeepEP/include", tarfile.DIRTYPE),
        member("DeepEP/include/ep.h"),
        member("DeepEP/ep.h", tarfile.SYMTYPE, link="include/ep.h"),
        member("DeepEP/headers", tarfile.SYMTYPE, link="include"),
        member("DeepEP/up.h", tarfile.SYMTYPE, link="include/../ep.h"),
        member("DeepEP/include/back.h", tarfile.SYMTYPE, link="../setup.py"),
        member("DeepEP/via.h", tarfile.SYMTYPE, link="headers/ep.h"),
    )
    assert gitarchive.read(write(tmp_path / "a.tar.gz", tar_bytes(*GOOD, *links))).commit == COMMIT


@pytest.mark.parametrize(
    "links",
    [
        (("DeepEP/p", "."), ("DeepEP/q", "p/../../x")),
        (("DeepEP/p", "."), ("DeepEP/q", "x/../p/../../y")),
        (("DeepEP/p", "../DeepEP"), ("DeepEP/q", "p/../setup.py")),
    ],
    ids=["first-part", "later-part", "one-level"],
)
def test_a_link_climbing_out_of_another_link_is_refused(
    links: tuple[tuple[str, str], ...], tmp_path: Path
) -> None:
    members = [member(name, tarfile.SYMTYPE, link=target) for name, target in links]
    path = write(tmp_path / "a.tar.gz", tar_bytes(*GOOD, *members))
    link, target = links[-1]
    assert refused(path) == f"{path}: member {link!r} links to {target!r}, climbing out of another link{FIX}"


def test_a_member_under_a_link_names_both(tmp_path: Path) -> None:
    members = (member("DeepEP/d", tarfile.DIRTYPE), member("DeepEP/l", tarfile.SYMTYPE, link="d"),
               member("DeepEP/l/sub", tarfile.DIRTYPE), member("DeepEP/l/sub/x"))  # fmt: skip
    path = write(tmp_path / "a.tar.gz", tar_bytes(*GOOD, *members))
    assert re.fullmatch(
        rf"{re.escape(str(path))}: member 'DeepEP/l/sub(/x)?' lies under the symbolic link 'DeepEP/l'"
        + re.escape(FIX),
        refused(path),
    )


def test_a_gzip_that_is_not_a_tar_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.tar.gz"
    path.write_bytes(gzip.compress(b"not a tar" * 100))
    message = refused(path)
    assert message.startswith(f"{path}: not a readable tar archive (") and message.endswith(FIX)
