"""bump.client_hello against the first flights OpenSSL really sends, cut anywhere, and fuzzed."""

from __future__ import annotations

import ssl

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harvest_cache.bump.client_hello import INCOMPLETE, MAX_HELLO, NOT_TLS, ClientHello, parse


def first_flight(
    server_name: str | None, alpn: list[str] | None = None, version: ssl.TLSVersion | None = None
) -> bytes:
    """The bytes an OpenSSL client sends first, to ``server_name``."""
    context = ssl.create_default_context()
    if alpn:
        context.set_alpn_protocols(alpn)
    if version is not None:
        context.maximum_version = version
    if server_name is None:
        context.check_hostname = False
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    return outgoing.read()


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_the_name_and_protocols_of_a_real_first_flight(version: ssl.TLSVersion) -> None:
    data = first_flight("WWW.Example.org", ["h2", "http/1.1"], version)
    assert parse(data) == ClientHello("www.example.org", ("h2", "http/1.1"), len(data))
    # What follows the first flight is not its business.
    assert parse(data + b"\x17\x03\x03\x00\x01x") == ClientHello(
        "www.example.org", ("h2", "http/1.1"), len(data)
    )


def test_no_server_name_and_no_alpn() -> None:
    data = first_flight(None)
    assert parse(data) == ClientHello(None, (), len(data))


def test_every_prefix_asks_for_more() -> None:
    data = first_flight("prefix.example", ["http/1.1"])
    for cut in range(len(data)):
        assert parse(data[:cut]) is INCOMPLETE, cut


def test_a_first_flight_in_several_records() -> None:
    """A handshake message may span records (large post-quantum key shares do)."""
    data = first_flight("split.example", ["http/1.1"])
    body = data[5:]
    half = len(body) // 2
    records = b"".join(
        b"\x16\x03\x01" + len(piece).to_bytes(2, "big") + piece
        for piece in (body[:half], body[half:])
    )
    assert parse(records) == ClientHello("split.example", ("http/1.1",), len(records))
    assert parse(records[: 5 + half + 3]) is INCOMPLETE


@pytest.mark.parametrize(
    "data",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"SSH-2.0-OpenSSH_9.2\r\n",
        b"\x16\x02\x00\x00\x05hello",  # SSL 2 record version
        b"\x16\x03\x01\x00\x00",  # an empty record
        b"\x15\x03\x03\x00\x02\x02\x28",  # an alert, not a handshake
        b"\x16\x03\x01\x00\x04\x02\x00\x00\x00",  # a ServerHello
    ],
)
def test_what_is_not_a_client_hello(data: bytes) -> None:
    assert parse(data) is NOT_TLS


def test_a_hello_too_long_to_wait_for() -> None:
    length = MAX_HELLO + 1
    assert parse(b"\x16\x03\x01\x40\x00\x01" + length.to_bytes(3, "big")) is NOT_TLS


def test_a_server_name_that_is_not_a_host_name_is_none() -> None:
    data = bytearray(first_flight("abc.example"))
    at = data.find(b"abc.example")
    data[at : at + 3] = b"a/c"
    hello = parse(bytes(data))
    assert isinstance(hello, ClientHello)
    assert hello.server_name is None


@given(st.binary(max_size=600))
def test_any_bytes_are_answered_without_an_error(data: bytes) -> None:
    assert parse(data) in (INCOMPLETE, NOT_TLS) or isinstance(parse(data), ClientHello)


_REAL = first_flight("fuzz.example", ["h2", "http/1.1"])


@given(st.integers(0, len(_REAL) - 1), st.integers(0, 255))
def test_a_real_flight_with_any_byte_changed_is_answered(at: int, value: int) -> None:
    data = bytearray(_REAL)
    data[at] = value
    found = parse(bytes(data))
    assert found in (INCOMPLETE, NOT_TLS) or isinstance(found, ClientHello)
