"""A document body gathered chunk by chunk under the ``max_bytes`` cap."""

from __future__ import annotations

import io

from gatherer.errors import FetchError


class Body:
    """Accumulates at most ``limit`` bytes: one byte more fails with ``too_large``, or, when
    ``truncate``, is dropped (and the reader stops once the body is ``done``)."""

    def __init__(self, url: str, limit: int, *, truncate: bool = False) -> None:
        self._url = url
        self._limit = limit
        self._truncate = truncate
        # BytesIO hands its buffer to getvalue() without a copy: the body is held once.
        self._buffer = io.BytesIO()

    @property
    def room(self) -> int:
        """How many more bytes fit."""
        return self._limit - self._buffer.tell()

    @property
    def done(self) -> bool:
        """A truncating body holding all it will keep."""
        return self._truncate and self.room <= 0

    def expect(self, size: int) -> None:
        """``size`` bytes are announced (or were received before decoding): fail now if they
        cannot fit, rather than after reading them."""
        if size > self._limit and not self._truncate:
            raise FetchError(self._url, "too_large", f"{size} bytes, over {self._limit}")

    def add(self, data: bytes) -> None:
        room = self.room
        if len(data) > room:
            if not self._truncate:
                raise FetchError(self._url, "too_large", f"larger than {self._limit} bytes")
            data = data[:room]
        self._buffer.write(data)

    def value(self) -> bytes:
        return self._buffer.getvalue()
