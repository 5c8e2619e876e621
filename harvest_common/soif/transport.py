"""SOIF streams over HTTP, both ends: how the gatherer's ``/records`` and the broker's ``/bulk``
send a SOIF stream, and how the broker's collector reads one it pulls.

Serving: ``choose_encoding`` picks the content coding from the client's Accept-Encoding (zstd
if listed, else gzip, else identity) and ``compressed`` compresses the stream chunk by chunk
as it is produced, on a worker thread. The body is ``SOIF_TYPE``.

Pulling: the client asks with ``ACCEPT_ENCODING``; ``content_coding`` reads the coding the
answer's headers name, and a ``BodyDecoder`` turns the body's chunks into SOIF items, a
bounded step at a time (at most ``STEP`` bytes of output, so a small compressed body cannot
balloon in memory). A body that is not what its headers promise raises MalformedStream.
"""

from __future__ import annotations

import asyncio
import re
import zlib
from collections.abc import AsyncGenerator, AsyncIterable, Mapping
from typing import Protocol

import zstandard

from harvest_common.errors import MalformedStream
from harvest_common.soif import Decoder, Item

SOIF_TYPE = "application/x-soif"
ENCODINGS = ("zstd", "gzip", "identity")
ACCEPT_ENCODING = "zstd, gzip"
# Most decompressed bytes one step produces (and feeds the decoder) before its items are staged.
STEP = 256 * 1024
# zstd's decompressobj has no output limit, so its input goes in small slices. At zstd's
# extreme ratio (a 128 KiB block in 4 bytes) one slice still expands to at most 16 MiB: the
# order of the largest value the SOIF decoder buffers anyway (64 MiB).
ZSTD_SLICE = 512

_QVALUE = re.compile(r"0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?")


# -- serving -----------------------------------------------------------------------------------


def choose_encoding(accept_encoding: str | None) -> str:
    """The content coding for an export: zstd when the client lists it (q > 0), else gzip
    when acceptable, else identity. No header at all means any coding will do (RFC 9110
    §12.5.3), so gzip; a malformed weight counts as 0."""
    if accept_encoding is None:
        return "gzip"
    weights: dict[str, float] = {}
    for item in accept_encoding.split(","):
        coding, *params = item.split(";")
        weight = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                value = value.strip()
                weight = float(value) if _QVALUE.fullmatch(value) else 0.0
        if coding := coding.strip().lower():
            weights[coding] = weight
    if weights.get("zstd", 0.0) > 0:
        return "zstd"
    anything = weights.get("*", 0.0)
    if max(weights.get("gzip", anything), weights.get("x-gzip", 0.0)) > 0:
        return "gzip"
    return "identity"


class _Compressor(Protocol):
    def compress(self, data: bytes, /) -> bytes: ...

    def flush(self) -> bytes: ...


def _compressor(encoding: str) -> _Compressor:
    if encoding == "gzip":
        return zlib.compressobj(wbits=31)  # 31: a gzip header and trailer
    if encoding == "zstd":
        return zstandard.ZstdCompressor().compressobj()
    raise ValueError(f"unknown content coding {encoding!r}; expected one of {ENCODINGS}")


async def compressed(chunks: AsyncIterable[bytes], encoding: str) -> AsyncGenerator[bytes, None]:
    """``chunks`` in ``encoding`` (zstd, gzip or identity), chunk by chunk as they come.

    Each chunk is compressed on a worker thread: a batch takes milliseconds of CPU (zlib and
    zstd release the GIL meanwhile), far too long to hold the event loop.
    """
    if encoding == "identity":
        async for chunk in chunks:
            yield chunk
        return
    compressor = _compressor(encoding)
    loop = asyncio.get_running_loop()
    async for chunk in chunks:
        if out := await loop.run_in_executor(None, compressor.compress, chunk):
            yield out
    yield await loop.run_in_executor(None, compressor.flush)


# -- pulling -----------------------------------------------------------------------------------


class _Identity:
    def __init__(self) -> None:
        self._input = b""

    def push(self, data: bytes) -> None:
        self._input = data

    @property
    def pending(self) -> bool:
        return bool(self._input)

    def take(self) -> bytes:
        # Network chunks are already small (one socket read): passed on whole.
        data, self._input = self._input, b""
        return data

    def finish(self) -> None:
        pass


class _Gzip:
    def __init__(self) -> None:
        self._z = zlib.decompressobj(wbits=31)  # 31: a gzip header and trailer
        self._input = b""
        self._held = False  # the last step stopped at STEP: zlib may hold more output

    def push(self, data: bytes) -> None:
        if data and self._z.eof:
            raise MalformedStream("bytes after the end of the gzip stream")
        self._input = data

    @property
    def pending(self) -> bool:
        return bool(self._input) or self._held

    def take(self) -> bytes:
        out = self._z.decompress(self._input, STEP)
        self._input = self._z.unconsumed_tail
        self._held = len(out) == STEP
        if self._z.unused_data:
            raise MalformedStream("bytes after the end of the gzip stream")
        return out

    def finish(self) -> None:
        if not self._z.eof:
            raise MalformedStream("the body ended inside the gzip stream")


class _Zstd:
    def __init__(self) -> None:
        self._z = zstandard.ZstdDecompressor().decompressobj()
        self._input = memoryview(b"")

    def push(self, data: bytes) -> None:
        if data and self._z.eof:
            raise MalformedStream("bytes after the end of the zstd frame")
        self._input = memoryview(data)

    @property
    def pending(self) -> bool:
        return len(self._input) > 0

    def take(self) -> bytes:
        parts: list[bytes] = []
        size = 0
        while self._input and size < STEP:
            if self._z.eof:
                raise MalformedStream("bytes after the end of the zstd frame")
            piece, self._input = self._input[:ZSTD_SLICE], self._input[ZSTD_SLICE:]
            out = self._z.decompress(piece)
            parts.append(out)
            size += len(out)
            if self._z.eof and self._z.unused_data:
                raise MalformedStream("bytes after the end of the zstd frame")
        return b"".join(parts)

    def finish(self) -> None:
        if not self._z.eof:
            raise MalformedStream("the body ended inside the zstd frame")


class BodyDecoder:
    """Sans-IO: the response body's chunks in, SOIF items out, a bounded step at a time.

    ``push`` a chunk, then call ``step`` while ``pending``; ``finish`` at the end of the body.
    The steps run on a worker thread (decompression and decoding are CPU work); they are
    called one at a time, so the state needs no lock.
    """

    def __init__(self, coding: str) -> None:
        self._inflater: _Identity | _Gzip | _Zstd = (
            _Gzip() if coding == "gzip" else _Zstd() if coding == "zstd" else _Identity()
        )
        self._decoder = Decoder()

    def push(self, data: bytes) -> None:
        self._inflater.push(data)

    @property
    def pending(self) -> bool:
        return self._inflater.pending

    def step(self) -> list[Item]:
        try:
            data = self._inflater.take()
        except (zlib.error, zstandard.ZstdError) as error:
            raise MalformedStream(str(error)) from error
        return self._decoder.feed(data)

    def finish(self) -> None:
        self._inflater.finish()
        self._decoder.close()


def content_coding(headers: Mapping[str, str]) -> str:
    """The coding of a pulled body, from its Content-Encoding: identity, gzip or zstd."""
    value = headers.get("Content-Encoding", "identity").strip().lower()
    if value in ("", "identity"):
        return "identity"
    if value in ("gzip", "x-gzip"):  # x-gzip: RFC 9110 8.4.1.3
        return "gzip"
    if value == "zstd":
        return "zstd"
    raise MalformedStream(f"unsupported Content-Encoding {value!r} (asked for {ACCEPT_ENCODING})")
