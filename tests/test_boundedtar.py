"""A gzip's tar read within bounds: the caller's messages for a read over its size and for bytes past the
limit, before the bytes are read; absolute seeks only, as tarfile makes them."""

from __future__ import annotations

import gzip
import io

import pytest

from epstack.boundedtar import BoundedTar
from epstack.errors import BadInput


def bounded(data: bytes, limit: int = 1000, max_read: int = 100) -> BoundedTar:
    unzipped = gzip.GzipFile(fileobj=io.BytesIO(gzip.compress(data)))
    return BoundedTar(unzipped, limit=limit, max_read=max_read, past_limit="past", long_read="long")


def test_reads_and_absolute_seeks_within_the_bounds() -> None:
    stream = bounded(bytes(range(256)) * 4)
    assert stream.seek(512) == 512 and stream.tell() == 512
    assert stream.read(4) == bytes(range(4)) and stream.last == bytes(range(4))
    assert stream.read(0) == b""


def test_a_read_over_its_size_or_unbounded_is_the_callers_message() -> None:
    stream = bounded(bytes(1024))
    for size in (None, -1, 101):
        with pytest.raises(BadInput, match=r"^long$"):
            stream.read(size)


def test_past_the_limit_is_refused_before_it_is_read() -> None:
    stream = bounded(bytes(4096))
    stream.seek(950)
    with pytest.raises(BadInput, match=r"^past$"):
        stream.read(100)
    assert stream.tell() == 950, "nothing was read"
    with pytest.raises(BadInput, match=r"^past$"):
        stream.seek(1001)


def test_a_relative_seek_is_unsupported() -> None:
    with pytest.raises(io.UnsupportedOperation, match=r"^seek relative$"):
        bounded(bytes(10)).seek(0, io.SEEK_CUR)
