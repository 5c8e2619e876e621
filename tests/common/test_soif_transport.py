"""The SOIF stream transport's serving side: the content coding chosen from Accept-Encoding,
and compression chunk by chunk. (Its pulling side is tested through the broker's collector,
tests/broker/test_collector.py.)"""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator

import pytest
import zstandard

from harvest_common.soif.transport import choose_encoding, compressed


async def chunks_of(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


@pytest.mark.parametrize("encoding", ["gzip", "zstd", "identity"])
async def test_compressed_round_trips(encoding: str) -> None:
    parts = [b"@FILE { http://a/\nTitle{3}:\tabc\n}\n" * 1000, b"", b"tail" * 50000]

    out = [chunk async for chunk in compressed(chunks_of(*parts), encoding)]

    assert len(out) >= 2  # compressed as it comes, not all at the end
    assert decompress(b"".join(out), encoding) == b"".join(parts)


async def test_an_unknown_coding_is_refused() -> None:
    with pytest.raises(ValueError, match="br"):
        await anext(compressed(chunks_of(b"x"), "br"))


def decompress(data: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.decompress(data)
    if encoding == "zstd":
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    return data


@pytest.mark.parametrize(
    ("accept", "chosen"),
    [
        (None, "gzip"),
        ("", "identity"),
        ("gzip, deflate", "gzip"),
        ("gzip, zstd", "zstd"),
        ("ZSTD;q=0.5, gzip;q=1", "zstd"),
        ("zstd;q=0, gzip", "gzip"),
        ("zstd;q=0", "identity"),
        ("identity", "identity"),
        ("*", "gzip"),
        ("*;q=0, identity", "identity"),
        ("gzip;q=0, *", "identity"),
        ("x-gzip", "gzip"),
        ("br", "identity"),
        ("zstd;q=banana, gzip", "gzip"),
        ("gzip ; q=0.001", "gzip"),
    ],
)
def test_choose_encoding(accept: str | None, chosen: str) -> None:
    assert choose_encoding(accept) == chosen
