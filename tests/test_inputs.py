"""Files a user names are read whole, as UTF-8, only when they are regular files of a sane size: anything
else is one BadInput line naming the path, what it is and the fix, never a hang or a traceback."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from epstack.errors import BadInput
from epstack.inputs import MAX_BYTES, read_bytes, read_text

WHAT = "a pins file"


def refused(path: Path, **kwargs: int) -> str:
    with pytest.raises(BadInput) as caught:
        read_text(path, what=WHAT, **kwargs)
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    return message


def test_a_regular_utf8_file_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "pins.env"
    path.write_text("CUDA_VERSION=13.0.3\n# 13.0 — the newest patch\n")
    assert read_text(path, what=WHAT) == "CUDA_VERSION=13.0.3\n# 13.0 — the newest patch\n"
    assert read_bytes(path, what=WHAT) == path.read_bytes()


def test_an_empty_file_is_empty_text(tmp_path: Path) -> None:
    path = tmp_path / "empty.env"
    path.touch()
    assert read_text(path, what=WHAT) == ""


def test_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.env"
    assert refused(path) == f"{path}: no such file; fix: pass the path of a pins file"


def test_a_path_through_a_file_cannot_be_opened(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    path = tmp_path / "file" / "pins.env"
    assert refused(path) == f"{path}: cannot open a pins file (Not a directory); fix: pass a readable file"


def test_a_path_with_a_nul_byte_cannot_be_opened() -> None:
    path = Path("pins\0.env")
    assert refused(path) == f"{path}: cannot open a pins file (embedded null byte); fix: pass a readable file"


def test_a_socket_cannot_be_opened(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        assert refused(path) == (
            f"{path}: cannot open a pins file (No such device or address); fix: pass a readable file"
        )


def test_a_directory(tmp_path: Path) -> None:
    assert refused(tmp_path) == f"{tmp_path}: a directory, not a pins file; fix: pass a regular file"


def test_a_fifo_nobody_writes_is_refused_without_waiting(tmp_path: Path) -> None:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    assert refused(path) == f"{path}: a FIFO, not a pins file; fix: pass a regular file"


def test_a_character_device() -> None:
    assert refused(Path("/dev/zero")) == "/dev/zero: a device, not a pins file; fix: pass a regular file"


def test_a_block_device(tmp_path: Path) -> None:
    path = tmp_path / "loop"
    try:
        os.mknod(path, stat.S_IFBLK | 0o600, os.makedev(7, 0))
    except PermissionError:
        pytest.skip("making a device node needs CAP_MKNOD")
    assert refused(path) == f"{path}: a device, not a pins file; fix: pass a regular file"


def test_a_file_that_cannot_be_read() -> None:
    """/proc/self/mem opens, but reading its first page (never mapped) fails with EIO."""
    assert refused(Path("/proc/self/mem")) == (
        "/proc/self/mem: cannot read a pins file (Input/output error); fix: pass a readable file"
    )


def test_a_file_of_exactly_the_limit_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "pins.env"
    path.write_text("0123456789")
    assert read_text(path, what=WHAT, limit=10) == "0123456789"
    assert read_bytes(path, what=WHAT, limit=10) == b"0123456789"


def test_a_file_over_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "pins.env"
    path.write_text("0123456789A")
    assert (
        refused(path, limit=10)
        == f"{path}: over 10 bytes, too large for a pins file; fix: pass a pins file itself"
    )
    with pytest.raises(BadInput, match=r"over 10 bytes, too large for a build report"):
        read_bytes(path, what="a build report", limit=10)


def test_the_default_limit_is_4_mib(tmp_path: Path) -> None:
    path = tmp_path / "pins.env"
    path.write_bytes(b"#" * MAX_BYTES)
    assert len(read_text(path, what=WHAT)) == MAX_BYTES == 4 << 20
    path.write_bytes(b"#" * (MAX_BYTES + 1))
    assert (
        refused(path)
        == f"{path}: over 4194304 bytes, too large for a pins file; fix: pass a pins file itself"
    )


def test_a_huge_sparse_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    """1 TiB that takes no disk: reading it whole would be a MemoryError."""
    path = tmp_path / "huge.env"
    with path.open("wb") as file:
        file.truncate(1 << 40)
    assert (
        refused(path)
        == f"{path}: over 4194304 bytes, too large for a pins file; fix: pass a pins file itself"
    )


@pytest.mark.parametrize(("data", "start"), [(b"\xff", 0), (b"KEY=\xe9t\xe9\n", 4), (b"abc\xe2\x82", 3)])
def test_bytes_that_are_not_utf8(tmp_path: Path, data: bytes, start: int) -> None:
    path = tmp_path / "pins.env"
    path.write_bytes(data)
    assert refused(path) == (
        f"{path}: not UTF-8 text (byte {start}), so not a pins file; fix: save it as UTF-8"
    )
    assert read_bytes(path, what=WHAT) == data
