"""The SOIF codec: exact encoding, round trips in any chunking, and exact error offsets."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harvest_common.errors import SoifError
from harvest_common.soif import (
    Decoder,
    Delete,
    Item,
    Record,
    Refresh,
    Update,
    decode,
    encode,
    encode_delete,
    encode_refresh,
    encode_update,
)
from harvest_common.soif.record import MAX_NAME_BYTES, MAX_URL_BYTES, WRAPPER_TEMPLATES
from harvest_common.soif.stream import WRAPPERS, Wrapper

EXAMPLE = Record(
    "FILE",
    "http://harvest.cs.colorado.edu/",
    (("Title", b"Type Structured File Systems"), ("Keywords", b"cache\nfoo")),
)
EXAMPLE_BYTES = (
    b"@FILE { http://harvest.cs.colorado.edu/\n"
    b"Title{28}:\tType Structured File Systems\n"
    b"Keywords{9}:\tcache\nfoo\n"
    b"}\n"
)
SMALL = Record("FILE", "u", (("A", b"x"),))
SMALL_BYTES = b"@FILE { u\nA{1}:\tx\n}\n"


def feed_in_chunks(data: bytes, cuts: Iterable[int], decoder: Decoder | None = None) -> list[Item]:
    """Feed ``data`` split at ``cuts``, close, and return every item."""
    decoder = decoder or Decoder()
    items: list[Item] = []
    start = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        items += decoder.feed(data[start:cut])
        start = cut
    decoder.close()
    assert decoder.offset == len(data)
    return items


def failure_of(call: Callable[[], object]) -> SoifError | None:
    try:
        call()
    except SoifError as error:
        return error
    return None


def error_of(data: bytes, cuts: Iterable[int] = (), max_value_bytes: int = 1 << 20) -> SoifError:
    with pytest.raises(SoifError) as caught:
        feed_in_chunks(data, cuts, Decoder(max_value_bytes))
    return caught.value


# --- encoding ---------------------------------------------------------------------------


def test_encode_writes_the_harvest_example_exactly() -> None:
    assert encode(EXAMPLE) == EXAMPLE_BYTES


def test_encode_writes_an_object_without_attributes() -> None:
    assert encode(Record("FILE", "ftp://a/b")) == b"@FILE { ftp://a/b\n}\n"


def test_encode_counts_utf8_bytes_of_url_and_binary_values() -> None:
    record = Record("FILE", "http://h/\u00e9", (("Data", b"\x00}\n@"), ("Empty", b"")))
    assert encode(record) == (b"@FILE { http://h/\xc3\xa9\nData{4}:\t\x00}\n@\nEmpty{0}:\t\n}\n")


@pytest.mark.parametrize(
    ("encoder", "keyword"),
    [(encode_update, b"UPDATE"), (encode_refresh, b"REFRESH"), (encode_delete, b"DELETE")],
)
def test_wrapper_encoders_enclose_the_encoded_objects(
    encoder: Callable[[Iterable[Record]], bytes], keyword: bytes
) -> None:
    assert encoder([]) == b"@" + keyword + b" {\n}\n"
    assert encoder(iter([EXAMPLE, SMALL])) == (
        b"@" + keyword + b" {\n" + EXAMPLE_BYTES + SMALL_BYTES + b"}\n"
    )


def test_wrapper_items_and_reserved_templates_agree() -> None:
    assert set(WRAPPERS) == WRAPPER_TEMPLATES
    assert all(WRAPPERS[kind.keyword] is kind for kind in (Update, Refresh, Delete))


# --- decoding well-formed input -----------------------------------------------------------


def test_decode_reads_the_harvest_example() -> None:
    assert decode(EXAMPLE_BYTES) == [EXAMPLE]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(b"", [], id="empty-input-has-no-items"),
        pytest.param(b" \t\r\n", [], id="whitespace-only-has-no-items"),
        pytest.param(b"@FILE{u\nA{1}:\tx\n}", [SMALL], id="no-spaces-around-brace"),
        pytest.param(b"@FILE \t{ \t u \t\r\nA{1}:\tx\n}", [SMALL], id="url-line-blanks-and-cr"),
        pytest.param(
            b"\r\n" + SMALL_BYTES + b"  \n\t" + SMALL_BYTES, [SMALL, SMALL], id="space-between"
        ),
        pytest.param(b"@FILE { u\n}" + SMALL_BYTES, [Record("FILE", "u"), SMALL], id="no-gap"),
        pytest.param(b"@UPDATE {\n}\n", [], id="empty-wrapper"),
        pytest.param(b"@UPDATE{" + SMALL_BYTES[:-1] + b"}", [Update(SMALL)], id="tight-wrapper"),
        pytest.param(
            b"@REFRESH {\r\n " + SMALL_BYTES + b"\n" + SMALL_BYTES + b" }",
            [Refresh(SMALL), Refresh(SMALL)],
            id="refresh-wrapper-with-whitespace",
        ),
        pytest.param(
            encode_delete([SMALL]) + SMALL_BYTES + encode_update([EXAMPLE]),
            [Delete(SMALL), SMALL, Update(EXAMPLE)],
            id="bare-object-between-wrappers",
        ),
        pytest.param(
            b"@FILE { u\nA{0}:\t\nb.c_d-E{2}:\t}\n\n}",
            [Record("FILE", "u", (("A", b""), ("b.c_d-E", b"}\n")))],
            id="empty-value-and-brace-newline-value",
        ),
        pytest.param(
            b"@FILE { u\nA{02}:\txy\n}", [Record("FILE", "u", (("A", b"xy"),))], id="leading-zero"
        ),
        pytest.param(
            b"@DOC-2_b { http://h/\xc3\xa9?q=1\n}",
            [Record("DOC-2_b", "http://h/\u00e9?q=1")],
            id="any-template-and-utf8-url",
        ),
    ],
)
def test_decode_accepts(data: bytes, expected: list[Item]) -> None:
    assert decode(data) == expected
    # The same items whatever the chunking: here, one byte at a time.
    assert feed_in_chunks(data, range(len(data))) == expected


def test_wrapped_objects_come_out_before_the_wrapper_closes() -> None:
    decoder = Decoder()
    assert decoder.feed(b"@DELETE {\n" + SMALL_BYTES) == [Delete(SMALL)]
    assert decoder.feed(SMALL_BYTES) == [Delete(SMALL)]
    assert decoder.feed(b"}\n") == []
    decoder.close()


def test_offset_counts_bytes_consumed_across_chunks() -> None:
    decoder = Decoder()
    assert decoder.feed(SMALL_BYTES[:5]) == []
    assert decoder.offset <= 5
    assert decoder.feed(SMALL_BYTES[5:] + SMALL_BYTES) == [SMALL, SMALL]
    assert decoder.offset == 2 * len(SMALL_BYTES)


def test_a_value_arriving_in_pieces_is_kept_whole() -> None:
    value = bytes(range(256)) * 40
    data = encode(Record("FILE", "u", (("Blob", value),)))
    assert feed_in_chunks(data, range(0, len(data), 7)) == [Record("FILE", "u", (("Blob", value),))]


# --- decoding malformed input ------------------------------------------------------------

OBJ = b"@FILE { u\n"  # 10 bytes: attributes start at offset 10


@pytest.mark.parametrize(
    ("data", "offset"),
    [
        pytest.param(b"x@FILE { u\n}", 0, id="junk-where-at-expected"),
        pytest.param(b"\r\n \tx", 4, id="junk-after-whitespace"),
        pytest.param(SMALL_BYTES + b"junk", len(SMALL_BYTES), id="junk-after-object"),
        pytest.param(b"}", 0, id="close-brace-outside-wrapper"),
        pytest.param(b"@ {u\n}", 1, id="empty-template-name"),
        pytest.param(b"@FI.LE { u\n}", 3, id="bad-byte-in-template-name"),
        pytest.param(b"@" + b"T" * (MAX_NAME_BYTES + 1), 1 + MAX_NAME_BYTES, id="long-template"),
        pytest.param(b"@FILE u\n}", 6, id="missing-open-brace"),
        pytest.param(b"@FILE\n{ u\n}", 5, id="newline-before-open-brace"),
        pytest.param(b"@FILE {  \n}", 9, id="missing-url"),
        pytest.param(b"@FILE { a b\n}", 9, id="space-inside-url"),
        pytest.param(b"@FILE { a\xc2\xa0b\n}", 9, id="unicode-space-inside-url"),
        pytest.param(b"@FILE { ab\xff\n}", 10, id="url-not-utf8"),
        pytest.param(
            b"@FILE { " + b"a" * (MAX_URL_BYTES + 1) + b"\n}", 8 + MAX_URL_BYTES, id="long-url"
        ),
        pytest.param(
            b"@FILE {" + b" " * 8 + b"a" * (MAX_URL_BYTES + MAX_NAME_BYTES),
            7 + MAX_URL_BYTES + MAX_NAME_BYTES,
            id="url-line-without-newline",
        ),
        pytest.param(OBJ + b"{3}:\tabc\n}", 10, id="missing-attribute-name"),
        pytest.param(OBJ + b"\n}", 10, id="blank-line-among-attributes"),
        pytest.param(OBJ + b"Ti tle{3}:\tabc\n}", 12, id="bad-byte-in-attribute-name"),
        pytest.param(OBJ + b"Title:\tabc\n}", 15, id="missing-byte-count"),
        pytest.param(OBJ + b"N" * (MAX_NAME_BYTES + 1) + b"{1}:\tx\n}", 266, id="long-name"),
        pytest.param(OBJ + b"Title{}:\t\n}", 16, id="empty-byte-count"),
        pytest.param(OBJ + b"Title{3x}:\tabc\n}", 17, id="byte-count-not-decimal"),
        pytest.param(OBJ + b"Title{-3}:\tabc\n}", 16, id="byte-count-negative"),
        pytest.param(OBJ + b"Title{" + b"0" * 21 + b"}:\t\n}", 36, id="byte-count-21-digits"),
        pytest.param(OBJ + b"Title{3:\tabc\n}", 17, id="byte-count-unclosed"),
        pytest.param(OBJ + b"Title{3}\tabc\n}", 18, id="missing-colon"),
        pytest.param(OBJ + b"Title{3}: abc\n}", 19, id="space-instead-of-tab"),
        pytest.param(OBJ + b"Title{3}:\tabcd\n}", 23, id="value-longer-than-count"),
        pytest.param(OBJ + b"Title{3}:\tab\n}\n", 23, id="value-shorter-than-count"),
        pytest.param(OBJ + b"Title{1}:\ta\nTITLE{1}:\tb\n}", 22, id="duplicate-name-any-case"),
        pytest.param(OBJ + b"A{1}:\tx\n@FILE { v\n}", 18, id="missing-close-brace"),
        pytest.param(b"@UPDATE {\n@DELETE {\n}\n}", 10, id="wrapper-inside-wrapper"),
        pytest.param(b"@UPDATE {\n@UPDATE {\n}\n}", 10, id="same-wrapper-inside-wrapper"),
        pytest.param(b"@UPDATE {\nfoo\n}", 10, id="junk-inside-wrapper"),
        pytest.param(b"@update {\n}", 9, id="lowercase-wrapper-is-a-template-without-url"),
        pytest.param(b"@UPDATE {\n" + OBJ + b"}\n}\n}", 24, id="extra-close-brace"),
    ],
)
def test_decode_rejects_at_the_offending_byte(data: bytes, offset: int) -> None:
    assert error_of(data).offset == offset
    # Errors do not depend on how the input was split.
    assert error_of(data, range(len(data))).offset == offset


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        pytest.param(b"@FIL", "the opening that began at byte 0", id="inside-opening"),
        pytest.param(b"@FILE {", "the @FILE object that began at byte 0", id="before-url"),
        pytest.param(b"@FILE { u", "the @FILE object", id="inside-url"),
        pytest.param(OBJ + b"A{3}:\tab", "the @FILE object", id="inside-value"),
        pytest.param(OBJ + b"A{3}:\tabc", "the @FILE object", id="before-value-newline"),
        pytest.param(OBJ + b"A{3}:\tabc\n", "the @FILE object", id="before-close-brace"),
        pytest.param(b"@UPDATE {\n", "the @UPDATE wrapper that began at byte 0", id="wrapper"),
        pytest.param(b"@DELETE {\n" + SMALL_BYTES, "the @DELETE wrapper", id="wrapper-after-obj"),
        pytest.param(b"@DELETE {\n" + OBJ, "the @FILE object that began at byte 10", id="nested"),
    ],
)
def test_close_rejects_input_ending_inside_an_item(data: bytes, detail: str) -> None:
    error = error_of(data)
    assert error.offset == len(data)
    assert detail in error.reason


def test_a_failed_decoder_stays_failed() -> None:
    decoder = Decoder()
    with pytest.raises(SoifError) as first:
        decoder.feed(b"junk")
    for call in (lambda: decoder.feed(SMALL_BYTES), decoder.close, lambda: decoder.feed(b"")):
        with pytest.raises(SoifError) as again:
            call()
        assert (again.value.offset, again.value.reason) == (first.value.offset, first.value.reason)


def test_a_decoder_failed_at_close_stays_failed() -> None:
    decoder = Decoder()
    decoder.feed(b"@FILE {")
    with pytest.raises(SoifError):
        decoder.close()
    with pytest.raises(SoifError) as again:
        decoder.feed(b" u\n}\n")
    assert again.value.offset == 7


@pytest.mark.parametrize(
    "header",
    [
        pytest.param(OBJ + b"Body{1001}:\t", id="whole-header"),
        pytest.param(OBJ + b"Body{1001}", id="before-colon"),
        pytest.param(OBJ + b"Body{99999999999999999999}", id="twenty-digits"),
    ],
)
def test_max_value_bytes_is_enforced_before_the_value_arrives(header: bytes) -> None:
    decoder = Decoder(max_value_bytes=1000)
    with pytest.raises(SoifError) as caught:
        decoder.feed(header)  # no value bytes fed at all
    assert caught.value.offset == len(OBJ) + len(b"Body{")


def test_max_value_bytes_admits_a_value_of_exactly_that_size() -> None:
    record = Record("FILE", "u", (("Body", b"v" * 1000),))
    decoder = Decoder(max_value_bytes=1000)
    assert decoder.feed(encode(record)) == [record]


def test_max_value_bytes_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="max_value_bytes"):
        Decoder(max_value_bytes=-1)


def test_an_endless_url_line_fails_once_past_its_limit() -> None:
    decoder = Decoder()
    decoder.feed(b"@FILE { ")

    def feed_400_kb() -> None:  # far beyond the URL line limit
        for _ in range(100):
            decoder.feed(b"a" * 4096)

    with pytest.raises(SoifError) as caught:
        feed_400_kb()
    assert caught.value.offset == 7 + MAX_URL_BYTES + MAX_NAME_BYTES


# --- Record -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "url", "attributes"),
    [
        pytest.param("", "u", (), id="empty-template"),
        pytest.param("FI LE", "u", (), id="space-in-template"),
        pytest.param("FILE.x", "u", (), id="dot-in-template"),
        pytest.param("T" * (MAX_NAME_BYTES + 1), "u", (), id="long-template"),
        pytest.param("UPDATE", "u", (), id="wrapper-template-update"),
        pytest.param("DELETE", "u", (), id="wrapper-template-delete"),
        pytest.param("REFRESH", "u", (), id="wrapper-template-refresh"),
        pytest.param("FILE", "", (), id="empty-url"),
        pytest.param("FILE", "http://a b/", (), id="space-in-url"),
        pytest.param("FILE", "http://a/\n", (), id="newline-in-url"),
        pytest.param("FILE", "\thttp://a/", (), id="tab-in-url"),
        pytest.param("FILE", "http://a/\u2028", (), id="unicode-line-separator-in-url"),
        pytest.param("FILE", "a" * (MAX_URL_BYTES + 1), (), id="long-url"),
        pytest.param("FILE", "u", (("", b""),), id="empty-attribute-name"),
        pytest.param("FILE", "u", (("Ti tle", b""),), id="space-in-attribute-name"),
        pytest.param("FILE", "u", (("Title:", b""),), id="colon-in-attribute-name"),
        pytest.param("FILE", "u", (("Ti\u00e9", b""),), id="non-ascii-attribute-name"),
        pytest.param("FILE", "u", (("N" * (MAX_NAME_BYTES + 1), b""),), id="long-name"),
        pytest.param("FILE", "u", (("Title", b"a"), ("tITLE", b"b")), id="duplicate-any-case"),
    ],
)
def test_record_rejects_invalid_parts(
    template: str, url: str, attributes: tuple[tuple[str, bytes], ...]
) -> None:
    with pytest.raises(ValueError, match=r"."):
        Record(template, url, attributes)


def test_record_rejects_a_value_that_is_not_bytes() -> None:
    with pytest.raises(TypeError, match="Title"):
        Record("FILE", "u", (("Title", "text"),))  # type: ignore[arg-type]


def test_record_accepts_an_embedded_member_attribute() -> None:
    record = Record("FILE", "u", (("Embed1-Title", b"a"), ("Embed12-Type", b"Text")))
    assert decode(encode(record)) == [record]


@pytest.mark.parametrize("name", ["Keywords", "keywords", "KEYWORDS", "kEyWoRdS"])
def test_get_ignores_case(name: str) -> None:
    assert EXAMPLE.get(name) == b"cache\nfoo"


def test_get_and_text_of_a_missing_attribute_are_none() -> None:
    assert EXAMPLE.get("Author") is None
    assert EXAMPLE.text("Author") is None


def test_text_decodes_utf8_and_replaces_bad_bytes() -> None:
    record = Record("FILE", "u", (("Title", "caf\u00e9 ".encode() + b"\xff"),))
    assert record.text("title") == "caf\u00e9 \ufffd"


def test_replace_keeps_the_position_and_takes_the_new_spelling() -> None:
    replaced = EXAMPLE.replace("TITLE", "Caching \u00e9")
    assert replaced.attributes == (
        ("TITLE", "Caching \u00e9".encode()),
        ("Keywords", b"cache\nfoo"),
    )
    assert EXAMPLE.get("Title") == b"Type Structured File Systems"  # the original is unchanged


def test_replace_appends_a_new_attribute() -> None:
    assert EXAMPLE.replace("Author", b"\x00").names == ("Title", "Keywords", "Author")
    assert EXAMPLE.replace("Author", b"\x00").get("author") == b"\x00"


def test_replace_validates_the_new_name() -> None:
    with pytest.raises(ValueError, match="attribute name"):
        EXAMPLE.replace("bad name", b"")


def test_without_removes_any_case_and_ignores_missing_names() -> None:
    assert EXAMPLE.without("title").attributes == (("Keywords", b"cache\nfoo"),)
    assert EXAMPLE.without("Author") == EXAMPLE


def test_record_is_a_frozen_hashable_value() -> None:
    assert hash(EXAMPLE) == hash(dataclasses.replace(EXAMPLE))
    with pytest.raises(dataclasses.FrozenInstanceError):
        EXAMPLE.url = "v"  # type: ignore[misc]


def test_record_repr_shows_names_and_sizes_not_values() -> None:
    text = repr(EXAMPLE)
    assert "FILE" in text
    assert "http://harvest.cs.colorado.edu/" in text
    assert "Title:28" in text
    assert "Keywords:9" in text
    assert "Structured" not in text


# --- properties -------------------------------------------------------------------------

_NAME_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"
templates = st.text(_NAME_ALPHABET.replace(".", ""), min_size=1, max_size=12).filter(
    lambda template: template not in WRAPPER_TEMPLATES
)
urls = st.text(
    st.characters(exclude_categories=("Cs", "Zs", "Zl", "Zp", "Cc")), min_size=1, max_size=40
).filter(lambda u: not any(c.isspace() for c in u))
# Values full of the bytes that would break a delimiter-based format.
values = st.one_of(
    st.binary(max_size=64),
    st.lists(st.sampled_from([b"\n", b"}", b"{", b"@", b"\x00", b"\t", b":", b"\r\n", b"a"])).map(
        b"".join
    ),
)
attribute_lists = st.lists(
    st.tuples(st.text(_NAME_ALPHABET, min_size=1, max_size=12), values),
    max_size=6,
    unique_by=lambda pair: pair[0].lower(),
).map(tuple)
records = st.builds(Record, templates, urls, attribute_lists)
blanks = st.text(" \t\r\n", max_size=3).map(str.encode)

Segment = tuple[Wrapper | None, list[Record]]
segments: st.SearchStrategy[Segment] = st.one_of(
    st.tuples(st.none(), st.lists(records, min_size=1, max_size=1)),
    st.tuples(st.sampled_from([Update, Refresh, Delete]), st.lists(records, max_size=3)),
)
_ENCODERS: dict[Wrapper, Callable[[Iterable[Record]], bytes]] = {
    Update: encode_update,
    Refresh: encode_refresh,
    Delete: encode_delete,
}


def stream_of(parts: Sequence[tuple[Segment, bytes]]) -> tuple[bytes, list[Item]]:
    """Encode segments (each followed by its blanks); return the bytes and expected items."""
    data = b""
    items: list[Item] = []
    for (kind, group), gap in parts:
        if kind is None:
            data += encode(group[0]) + gap
            items.append(group[0])
        else:
            data += _ENCODERS[kind](group) + gap
            items += [kind(record) for record in group]
    return data, items


streams = st.lists(st.tuples(segments, blanks), max_size=4).map(stream_of)


@given(records)
def test_a_record_round_trips(record: Record) -> None:
    assert decode(encode(record)) == [record]


@given(streams, st.data())
def test_a_stream_decodes_the_same_in_any_chunking(
    stream: tuple[bytes, list[Item]], data: st.DataObject
) -> None:
    encoded, expected = stream
    cuts = data.draw(st.lists(st.integers(0, len(encoded)), max_size=12))
    assert feed_in_chunks(encoded, cuts) == expected


@given(streams)
def test_a_stream_decodes_one_byte_at_a_time(stream: tuple[bytes, list[Item]]) -> None:
    encoded, expected = stream
    assert feed_in_chunks(encoded, range(len(encoded))) == expected


@given(streams, st.data())
def test_a_truncated_stream_yields_a_prefix_or_fails_at_its_end(
    stream: tuple[bytes, list[Item]], data: st.DataObject
) -> None:
    encoded, expected = stream
    cut = data.draw(st.integers(0, len(encoded)))
    decoder = Decoder()
    items = decoder.feed(encoded[:cut])
    assert items == expected[: len(items)]
    failure = failure_of(decoder.close)
    if failure is None:  # cut between top-level items: the rest is a stream of the remaining items
        assert decode(encoded[cut:]) == expected[len(items) :]
    else:
        assert failure.offset == cut


def check_decodes_or_refuses(data: bytes) -> None:
    """``data`` decodes to items that survive a round trip, or raises SoifError in range."""
    items: list[Item] = []
    failure = failure_of(lambda: items.extend(decode(data)))
    if failure is not None:
        assert 0 <= failure.offset <= len(data)
        return
    reencoded = b"".join(
        encode(item) if isinstance(item, Record) else _ENCODERS[type(item)]([item.record])
        for item in items
    )
    assert decode(reencoded) == items


@given(streams, st.data())
def test_damaged_input_raises_only_soif_error(
    stream: tuple[bytes, list[Item]], data: st.DataObject
) -> None:
    encoded, _ = stream
    at = data.draw(st.integers(0, len(encoded)))
    check_decodes_or_refuses(encoded[:at] + data.draw(st.binary(max_size=3)) + encoded[at + 1 :])


@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_soif_error(junk: bytes) -> None:
    check_decodes_or_refuses(b"@FILE { u\n" + junk)
    check_decodes_or_refuses(junk)
