"""The tar inside a gzip, as tarfile reads it, within bounds: no read larger than `max_read` (tarfile
reads a pax or long-name header whole) and nothing past `limit` bytes unpacked, each refused with the
caller's one-line BadInput before the bytes are read. A gzip bomb costs neither memory nor time."""

from __future__ import annotations

import gzip
import io

from epstack.errors import BadInput


class BoundedTar(io.BufferedIOBase):
    last: bytes = b""  # the block of the last read (the one that ended tarfile's listing, once it has)

    def __init__(
        self, unzipped: gzip.GzipFile, *, limit: int, max_read: int, past_limit: str, long_read: str
    ) -> None:
        super().__init__()
        self._unzipped = unzipped
        self._limit, self._max_read = limit, max_read
        self._past_limit, self._long_read = past_limit, long_read

    def _check(self, end: int) -> None:
        if end > self._limit:
            raise BadInput(self._past_limit)

    def read(self, size: int | None = -1) -> bytes:
        if size is None or not 0 <= size <= self._max_read:
            raise BadInput(self._long_read)
        self._check(self.tell() + size)
        self.last = self._unzipped.read(size)
        return self.last

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence != io.SEEK_SET:  # tarfile seeks to absolute offsets only
            raise io.UnsupportedOperation("seek relative")
        self._check(offset)
        return self._unzipped.seek(offset)

    def tell(self) -> int:
        return self._unzipped.tell()
