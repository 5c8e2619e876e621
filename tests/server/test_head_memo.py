"""The memo of request heads: bounded in entries and in head size; field blocks learnt after
plain request lines, which llhttp must read exactly as the memo says."""

from __future__ import annotations

import httptools
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harvest_cache.server.head_memo import MAX_HEAD, HeadMemo, ParsedHead

MAX_TARGET = 8192
FIELDS = b"Host: h\r\nUser-Agent: t/1\r\n\r\n"
RAW = ((b"Host", b"h"), (b"User-Agent", b"t/1"))


def parsed(n: int) -> ParsedHead:
    return (b"GET", b"http://h/%d" % n, "1.1", True, ((b"Host", b"h"),))


def head(n: int) -> bytes:
    return b"GET http://h/%d HTTP/1.1\r\nHost: h\r\n\r\n" % n


def memo() -> HeadMemo:
    return HeadMemo(MAX_TARGET)


def test_a_head_is_found_by_its_exact_bytes() -> None:
    m = memo()
    m.add(head(1), parsed(1))
    assert m.get(head(1)) == parsed(1)
    assert m.get(head(1).lower()) is None
    assert m.get(head(1) + b"\r\n") is None


def test_heads_over_the_size_bound_are_neither_kept_nor_looked_up() -> None:
    m = memo()
    fits = head(1)[:-2] + b"X: " + b"p" * (MAX_HEAD - len(head(1)) - 5) + b"\r\n\r\n"
    over = fits[:-4] + b"p\r\n\r\n"
    assert (len(fits), len(over)) == (MAX_HEAD, MAX_HEAD + 1)
    m.add(fits, parsed(1))
    m.add(over, parsed(2))
    assert len(m) == 1
    assert m.get(fits) == parsed(1)
    assert m.get(over) is None


def test_all_heads_are_forgotten_at_the_entry_bound() -> None:
    m = memo()
    for n in range(4096):
        m.add(head(n), parsed(n))
    assert len(m) == 4096
    assert m.get(head(0)) == parsed(0)
    m.add(head(4096), parsed(4096))
    assert len(m) == 1
    assert m.get(head(4096)) == parsed(4096)


# -- field blocks after plain request lines -------------------------------------------------


def learnt() -> HeadMemo:
    m = memo()
    m.add_fields(b"GET http://h/a HTTP/1.1\r\n" + FIELDS, (b"GET", b"http://h/a", "1.1", True, RAW))
    return m


def test_learnt_fields_are_found_after_another_plain_request_line() -> None:
    m = learnt()
    assert (len(m), m.field_blocks) == (0, 1)
    for target in (b"http://origin.example:8080/b/c?d=e&f=%20", b"https://secure.example/b"):
        assert m.by_fields(b"GET " + target + b" HTTP/1.1\r\n" + FIELDS) == (
            b"GET",
            target,
            "1.1",
            True,
            RAW,
        )


@pytest.mark.parametrize(
    "line",
    [
        b"HEAD http://h/b HTTP/1.1\r\n",
        b"GET http://h/b HTTP/1.0\r\n",
        b"GET /b HTTP/1.1\r\n",  # origin form
        b"GET ftp://h/b HTTP/1.1\r\n",
        b"GET httpss://h/b HTTP/1.1\r\n",
        b"GET http://h HTTP/1.1\r\n",  # no path
        b"GET http://h_x/b HTTP/1.1\r\n",
        b"GET http://user@h/b HTTP/1.1\r\n",
        b"GET http://h:123456/b HTTP/1.1\r\n",
        b'GET http://h/"b HTTP/1.1\r\n',
        b"GET http://h/b#c HTTP/1.1\r\n",
        b"GET http://h/\xe9 HTTP/1.1\r\n",
        b"GET http://h/b\tc HTTP/1.1\r\n",
        b"GET  http://h/b HTTP/1.1\r\n",
        b"GET http://h/b  HTTP/1.1\r\n",
        b"get http://h/b HTTP/1.1\r\n",
    ],
)
def test_only_plain_request_lines_take_learnt_fields(line: bytes) -> None:
    m = learnt()
    assert m.by_fields(line + FIELDS) is None
    other = memo()
    other.add_fields(line + FIELDS, (b"GET", b"http://h/b", "1.1", True, RAW))
    assert other.field_blocks == 0


def test_other_field_bytes_are_not_taken() -> None:
    m = learnt()
    for fields in (FIELDS[:-2], FIELDS + b"\r\n", FIELDS.lower(), b"Host: h\r\n\r\n"):
        assert m.by_fields(b"GET http://h/b HTTP/1.1\r\n" + fields) is None


def test_a_target_over_the_configured_length_is_left_to_the_parser() -> None:
    m = HeadMemo(256)
    m.add_fields(b"GET http://h/a HTTP/1.1\r\n" + FIELDS, (b"GET", b"http://h/a", "1.1", True, RAW))
    fits = b"http://h/" + b"p" * (256 - 9)
    assert len(fits) == 256
    assert m.by_fields(b"GET " + fits + b" HTTP/1.1\r\n" + FIELDS) is not None
    assert m.by_fields(b"GET " + fits + b"p HTTP/1.1\r\n" + FIELDS) is None


def test_field_blocks_are_forgotten_at_their_bound() -> None:
    m = memo()
    for n in range(256):
        data = b"GET http://h/a HTTP/1.1\r\nX: %d\r\n\r\n" % n
        m.add_fields(data, (b"GET", b"http://h/a", "1.1", True, ((b"X", b"%d" % n),)))
    assert m.field_blocks == 256
    m.add_fields(b"GET http://h/a HTTP/1.1\r\n" + FIELDS, (b"GET", b"http://h/a", "1.1", True, RAW))
    assert m.field_blocks == 1
    assert m.by_fields(b"GET http://h/b HTTP/1.1\r\nX: 0\r\n\r\n") is None


class Parsed:
    """What llhttp makes of a request head (httptools, as the connections use it)."""

    def __init__(self, data: bytes) -> None:
        self.url = b""
        self.fields: list[tuple[bytes, bytes]] = []
        self.complete = False
        self.error = False
        parser = httptools.HttpRequestParser(self)
        try:
            parser.feed_data(data)
        except httptools.HttpParserError:
            self.error = True
            return
        self.method = parser.get_method()
        self.version = parser.get_http_version()
        self.keep_alive = parser.should_keep_alive()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.fields.append((name, value))

    def on_headers_complete(self) -> None:
        self.complete = True


def as_parsed(data: bytes) -> ParsedHead:
    p = Parsed(data)
    assert not p.error
    assert p.complete
    return p.method, p.url, p.version, p.keep_alive, tuple(p.fields)


@settings(max_examples=400, deadline=None)
@given(
    learnt_fields=st.sampled_from(
        [FIELDS, b"Host: h\r\nConnection: close\r\n\r\n", b"\r\n", b"Host:  h \r\nX-A: b\r\n\r\n"]
    ),
    scheme=st.sampled_from([b"http", b"https"]),
    host=st.from_regex(rb"\A[A-Za-z0-9.-]{1,12}(:[0-9]{1,5})?\Z"),
    path=st.one_of(st.from_regex(rb"\A[\x20-\x7e]{0,30}\Z"), st.binary(max_size=30)),
    edits=st.lists(
        st.tuples(st.integers(0, 120), st.integers(0, 2), st.binary(max_size=3)), max_size=2
    ),
)
def test_whatever_is_found_parses_as_the_memo_says(
    learnt_fields: bytes,
    scheme: bytes,
    host: bytes,
    path: bytes,
    edits: list[tuple[int, int, bytes]],
) -> None:
    """Soundness: for any read the memo answers from a field block, llhttp parses the read
    into exactly the head the memo returns, whatever was changed in it."""
    first = b"GET http://h/a HTTP/1.1\r\n" + learnt_fields
    m = memo()
    m.add_fields(first, as_parsed(first))
    assert m.field_blocks == 1
    data = b"GET " + scheme + b"://" + host + b"/" + path + b" HTTP/1.1\r\n" + learnt_fields
    for at, cut, insert in edits:
        at %= len(data) + 1
        data = data[:at] + insert + data[at + cut :]
    found = m.by_fields(data)
    if found is not None:
        assert as_parsed(data) == found


def test_heads_of_intercepted_tunnels_are_remembered_with_their_origin() -> None:
    """Origin-form bytes stand for another URL in each tunnel: never found by bytes alone."""
    m = memo()
    data = b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n"
    head = (b"GET", b"https://h/a", "1.1", True, ((b"Host", b"h"),))
    m.add(data, head, b"https://h")
    assert m.get_in(b"https://h", data) == head
    assert m.get_in(b"https://other", data) is None
    assert m.get(data) is None
