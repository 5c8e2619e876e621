"""HTTP content codings (gzip, deflate) undone under a cap, without I/O.

A compression bomb must not expand past ``max_bytes``: every call says how many bytes may
come out, and zlib stops there (``max_length``) instead of inflating the rest.
"""

from __future__ import annotations

import zlib

from gatherer.errors import FetchError

_GZIP = 16 + zlib.MAX_WBITS
_ZLIB = zlib.MAX_WBITS
_RAW_DEFLATE = -zlib.MAX_WBITS


def _zlib_header(data: bytes) -> bool:
    """RFC 1950's two header bytes: method 8 and a check making them a multiple of 31."""
    return data[0] & 0x0F == 8 and ((data[0] << 8) | data[1]) % 31 == 0


class Decoder:
    """Undoes one Content-Encoding (``identity``, ``gzip``, ``x-gzip`` or ``deflate``).

    ``deflate`` should be zlib-wrapped (RFC 9110) but many servers send raw deflate; the
    first two bytes tell which. Anything else fails with ``protocol``: only gzip and deflate
    are asked for.
    """

    def __init__(self, url: str, coding: str) -> None:
        self._url = url
        self._zlib: zlib._Decompress | None = None
        self._pending = b""  # deflate: bytes seen before its wrapping is known
        coding = coding.strip().lower()
        self._coded = coding not in ("", "identity")
        if coding in ("gzip", "x-gzip"):
            self._zlib = zlib.decompressobj(_GZIP)
        elif self._coded and coding != "deflate":
            raise FetchError(url, "protocol", f"unsupported Content-Encoding {coding!r}")

    def feed(self, data: bytes, limit: int) -> bytes:
        """The decoded bytes of ``data``, at most ``limit`` of them when coded (``limit``
        >= 1); what would come out beyond is not produced: the caller gives up then."""
        if not self._coded:
            return data
        if self._zlib is None:
            self._pending += data
            if len(self._pending) < 2:
                return b""
            wbits = _ZLIB if _zlib_header(self._pending) else _RAW_DEFLATE
            self._zlib = zlib.decompressobj(wbits)
            data, self._pending = self._pending, b""
        try:
            return self._zlib.decompress(data, limit)
        except zlib.error as error:
            raise FetchError(self._url, "protocol", f"bad compressed body: {error}") from error

    def finish(self) -> bytes:
        """What is left once the body has ended (nothing, for a complete stream)."""
        if self._zlib is None:
            if self._pending:
                raise FetchError(self._url, "protocol", "a one-byte deflate body")
            return b""
        try:
            return self._zlib.flush()
        except zlib.error as error:
            raise FetchError(self._url, "protocol", f"bad compressed body: {error}") from error
