"""Files a user names are read whole, as UTF-8, only when they are regular files of a sane size: anything
else is one BadInput line naming the path, what it is and the fix, never a hang or a traceback. A log is
searched line by line up to a cap; JSON is parsed within its bounds."""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from epstack.errors import BadInput
from epstack.inputs import MAX_BYTES, MAX_LOG_BYTES, parse_json, read_bytes, read_text, search_log

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


LINE = re.compile(r"Initialized DeepEP v2 ElasticBuffer: .*")


def test_a_log_is_searched_line_by_line_within_its_cap(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"start\nInitialized DeepEP v2 ElasticBuffer: early\n")
    assert search_log(log, LINE, what="a log") == "Initialized DeepEP v2 ElasticBuffer: early"
    log.write_bytes(b"")
    with log.open("r+b") as out:  # 128 MiB without a line break (sparse), then the line past the cap
        out.truncate(128 << 20)
        out.seek(128 << 20)
        out.write(b"\nInitialized DeepEP v2 ElasticBuffer: too late\n")
    assert search_log(log, LINE, what="a log", limit=64 << 20) is None, "only the first 64 MiB are read"
    assert MAX_LOG_BYTES == 256 << 20
    search = (  # VmHWM: this process's peak alone (ru_maxrss keeps the forking pytest's across exec)
        "import re, sys; from pathlib import Path; from epstack.inputs import search_log; "
        "search_log(Path(sys.argv[1]), re.compile('x'), what='a log', limit=64 << 20); "
        "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')))"
    )
    done = subprocess.run([sys.executable, "-c", search, log], capture_output=True, check=True)
    assert int(done.stdout) < 40 << 10, "a line at a time, not the first 64 MiB whole"


def test_a_log_that_is_a_device_is_refused() -> None:
    with pytest.raises(BadInput, match=r"^/dev/zero: a device, not a log; fix: pass a regular file$"):
        search_log(Path("/dev/zero"), LINE, what="a log")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[" * 100_000 + "]" * 100_000, "JSON nested deeper than 64"),
        ('{"a":' * 65 + "1" + "}" * 65, "JSON nested deeper than 64"),
        ('{"size": NaN}', "JSON with NaN, which JSON does not allow for a number"),
        ('{"size": -Infinity}', "JSON with -Infinity, which JSON does not allow for a number"),
        ('{"size": 2e308}', "JSON with 2e308, a number past what a float holds"),
        ('{"size": ' + "1" * 5000 + "}", "JSON with a number of 5,000 characters (at most 40)"),
        ("{'single': 1}", "not JSON (Expecting property name enclosed in double quotes, line 1)"),
        (b"\xff\xfe", "not JSON (not UTF-8 text)"),
    ],
)
def test_json_past_its_bounds_is_refused_in_words(text: str | bytes, problem: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_json(text)
    assert str(raised.value) == problem


def test_json_within_its_bounds_is_read() -> None:
    deep = '{"a":' * 63 + "[1.5e3, -7, 123456789012345678901234567890]" + "}" * 63
    assert parse_json(deep) is not None
    assert parse_json('{"n": 18446744073709551616, "x": null}') == {"n": 2**64, "x": None}
