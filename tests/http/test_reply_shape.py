"""Responses recognised by their bytes (``reply_shape``): what is recognised must be exactly
what llhttp parses from those bytes."""

from __future__ import annotations

import httptools
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harvest_cache.http.reply_shape import ReplyShape, shape_of, values_in


class Parsed:
    """What llhttp makes of a response, through httptools as the upstream connection uses it."""

    def __init__(self, data: bytes) -> None:
        self.reason = b""
        self.fields: list[tuple[bytes, bytes]] = []
        self.body = b""
        self.complete = False
        self.error = False
        self._parser = httptools.HttpResponseParser(self)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            self.error = True

    def on_headers_complete(self) -> None:
        # (read here, as the upstream connection reads them: llhttp resets at the end)
        self.status = self._parser.get_status_code()
        self.version = self._parser.get_http_version()
        self.keep_alive = self._parser.should_keep_alive()

    def on_status(self, status: bytes) -> None:
        self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self.fields.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True


FIELDS = [
    (b"Server", b"nginx/1.22.1"),
    (b"Date", b"Mon, 30 Nov 2026 23:59:59 GMT"),
    (b"Content-Type", b"text/plain"),
    (b"Content-Length", b"5"),
    (b"Connection", b"keep-alive"),
    (b"ETag", b'"6a0c-5"'),
]
GAPS = (1, 3, 5)


def shape() -> ReplyShape:
    made = shape_of("1.1", 200, "OK", FIELDS, GAPS)
    assert made is not None
    return made


def spelt(fields: list[tuple[bytes, bytes]], reason: bytes = b"OK") -> bytes:
    return b"HTTP/1.1 200 %b\r\n%b\r\n" % (reason, b"".join(b"%b: %b\r\n" % f for f in fields))


def test_a_response_of_the_shape_is_recognised_with_its_values() -> None:
    fields = [*FIELDS]
    fields[1] = (b"Date", b"Tue, 01 Dec 2026 00:00:01 GMT")
    fields[3] = (b"Content-Length", b"12")
    fields[5] = (b"ETag", b'W/"other etag"')
    head = spelt(fields)
    assert values_in(shape(), head + b"hello, world") == (fields, len(head))
    parsed = Parsed(head + b"hello, world")
    assert (parsed.fields, parsed.body, parsed.complete) == (fields, b"hello, world", True)


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b" Tue, 01 Dec 2026",  # leading space (llhttp strips it)
        b"Tue, 01 Dec 2026 ",
        b"Tue, 01 Dec 2026\t",
        b"Tue\r\nX: 1",  # a field of its own
        b"Tue\n01",
        b"Tue\x00",
        b"Tue\x7f",
        b"Tu\xe9",
    ],
)
def test_a_value_that_would_not_parse_as_itself_is_not_recognised(value: bytes) -> None:
    fields = [*FIELDS]
    fields[1] = (b"Date", value)
    assert values_in(shape(), spelt(fields)) is None


def test_other_bytes_around_the_gaps_are_not_recognised() -> None:
    head = spelt(FIELDS)
    for other in (
        head.replace(b"Server", b"server"),
        head.replace(b"Date: ", b"Date:  "),
        head.replace(b"text/plain", b"text/html"),
        head.replace(b"200 OK", b"200 Ok"),
        head.replace(b"HTTP/1.1", b"HTTP/1.0"),
        head[:-2],  # the head does not end
        spelt([*FIELDS, (b"X", b"y")]),
        spelt(FIELDS[:-1]),
    ):
        assert values_in(shape(), other) is None


@pytest.mark.parametrize(
    ("version", "reason", "fields"),
    [
        ("2.0", "OK", FIELDS),
        ("1.1", "", FIELDS),
        ("1.1", " OK", FIELDS),
        ("1.1", "OK", [*FIELDS, (b"X", b"trailing ")]),
        ("1.1", "OK", [*FIELDS, (b"X", b"")]),
        ("1.1", "OK", [*FIELDS, (b"X", b"caf\xe9")]),
        ("1.1", "OK", [*FIELDS, (b"Transfer-Encoding", b"chunked")]),
    ],
)
def test_a_response_that_cannot_be_spelt_back_has_no_shape(
    version: str, reason: str, fields: list[tuple[bytes, bytes]]
) -> None:
    assert shape_of(version, 200, reason, fields, GAPS) is None


_VALUE = st.one_of(
    st.from_regex(rb"\A[\x20-\x7e]{0,12}\Z"), st.binary(max_size=6), st.sampled_from([b"5", b"0"])
)


@settings(max_examples=500, deadline=None)
@given(
    version=st.sampled_from(["1.1", "1.0"]),
    reason=st.sampled_from(["OK", "Not Modified", "Non-Authoritative  Information"]),
    values=st.tuples(_VALUE, _VALUE, _VALUE),
    body=st.binary(max_size=8),
    edits=st.lists(
        st.tuples(st.integers(0, 200), st.integers(0, 2), st.binary(max_size=3)), max_size=2
    ),
)
def test_whatever_is_recognised_parses_as_recognised(
    version: str,
    reason: str,
    values: tuple[bytes, bytes, bytes],
    body: bytes,
    edits: list[tuple[int, int, bytes]],
) -> None:
    """Soundness: the fields ``values_in`` finds are those llhttp parses from the same bytes,
    and its head ends where llhttp's does, whatever the values and whatever was changed."""
    made = shape_of(version, 200, reason, FIELDS, GAPS)
    assert made is not None
    fields = [*FIELDS]
    for gap, value in zip(GAPS, values, strict=True):
        fields[gap] = (fields[gap][0], value)
    data = b"HTTP/%b 200 %b\r\n%b\r\n" % (
        version.encode(),
        reason.encode(),
        b"".join(b"%b: %b\r\n" % f for f in fields),
    )
    data += body
    for at, cut, insert in edits:
        at %= len(data) + 1
        data = data[:at] + insert + data[at + cut :]
    found = values_in(made, data)
    if found is None:
        return
    found_fields, end = found
    head = Parsed(data[:end])
    assert not head.error
    assert (head.version, head.status, head.reason.decode()) == (version, 200, reason)
    assert head.fields == found_fields
    length = found_fields[3][1]
    if length.isdigit() and len(data) - end == int(length):
        whole = Parsed(data)  # (as a miss plan takes it: the body whole, nothing after)
        assert (whole.error, whole.complete, whole.body) == (False, True, data[end:])
        assert whole.fields == found_fields
