"""broker.federation.summary: a broker's content summary counted from records with the index's
analyzer, bounded, scaled from a sample, and read back from its SOIF form."""

from __future__ import annotations

import pytest

from broker.federation.summary import (
    ANY,
    MAX_ATTRIBUTES,
    MAX_BYTES,
    SUMMARY,
    TERMS_ANY,
    TERMS_PER_ATTRIBUTE,
    ContentSummary,
    Counts,
    SummaryFormatError,
    TermList,
    from_record,
)
from broker.index.schema import Analyzer
from broker.sync import attributes_text
from harvest_common.hsr_client import server_record
from harvest_common.soif import Record

TOKENS = Analyzer().tokens


def record(url: str, **attributes: str) -> Record:
    return Record(
        "FILE", url, tuple((k.replace("_", "-"), v.encode()) for k, v in attributes.items())
    )


def counted(*records: Record) -> Counts:
    counts = Counts(TOKENS)
    for r in records:
        counts.add(attributes_text(r))
    return counts


def test_each_object_counts_once_per_word_in_each_attribute_and_in_any() -> None:
    summary = counted(
        record("http://a.example/1", Title="Squid cache, the cache", Keywords="proxy cache"),
        record("http://a.example/2", Title="Web proxy", Author="Wessels"),
        record("http://b.example/3", Title="Squid"),
    ).summary(3)
    assert (summary.documents, summary.sampled) == (3, 3)
    everywhere = summary.list_of(None)
    assert everywhere is not None
    assert everywhere.attribute == ANY
    # "cache" twice in one Title and again in its Keywords is one object; the URL counts too.
    assert dict(everywhere.terms)["cache"] == 1
    assert dict(everywhere.terms)["squid"] == 2
    assert dict(everywhere.terms)["example"] == 3
    title = summary.list_of("title")
    assert title is not None
    assert title.attribute == "Title"
    assert title.documents == 3
    assert title.terms[:2] == (("squid", 2), ("cache", 1))  # most frequent first, then a-z
    assert summary.list_of("Author") == TermList("Author", 1, (("wessels", 1),))
    assert summary.list_of("Abstract") is None


def test_stop_words_numbers_single_letters_and_bookkeeping_attributes_are_not_counted() -> None:
    summary = counted(
        record(
            "http://x/",
            Title="The RFC 2616 of a web",
            MD5="d41d8cd98f00b204e9800998ecf8427e",
            Gatherer_Name="campus",
            Update_Time="1764503554",
        )
    ).summary(1)
    assert [t for t, _ in summary.list_of("Title").terms] == ["rfc", "web"]  # type: ignore[union-attr]
    assert {t.attribute for t in summary.lists} == {ANY, "Title", "URL"}
    assert "d41d8cd98f00b204e9800998ecf8427e" not in dict(summary.lists[0].terms)


def test_the_lists_are_bounded_and_say_when_they_were_cut() -> None:
    many = [
        record(
            f"http://x/{n}",
            Title=" ".join(f"word{n}x{k}" for k in range(3)),
            # In half the objects: fewer than hold Title and URL, which are kept.
            **{f"Attribute-{a}": f"value{n}" for a in range(MAX_ATTRIBUTES + 4) if n % 2},
        )
        for n in range(200)
    ]
    summary = counted(*many).summary(200)
    assert len(summary.lists) == 1 + MAX_ATTRIBUTES
    assert [t.attribute for t in summary.lists[1:3]] == ["Title", "URL"]
    everywhere = summary.lists[0]
    assert len(everywhere.terms) == TERMS_ANY
    assert everywhere.cut
    assert all(len(t.terms) <= TERMS_PER_ATTRIBUTE for t in summary.lists[1:])
    assert summary.list_of("Title").cut  # type: ignore[union-attr]
    assert "+" in summary.text().splitlines()[0].split()[-1]
    small = counted(record("http://y/", Title="alpha beta")).summary(1)
    assert not any(t.cut for t in small.lists)


def test_a_summary_of_long_words_is_cut_until_it_fits() -> None:
    # 40-byte words (the analyzer's longest) everywhere: the full lists would be ~95 KB.
    words = [f"{n:04d}" + "w" * 36 for n in range(400)]
    many = [
        record(
            f"http://x/{n}",
            **{
                f"A{a}": " ".join(words[(n + a * 7 + k) % 400] for k in range(20))
                for a in range(16)
            },
        )
        for n in range(100)
    ]
    summary = counted(*many).summary(100)
    assert len(summary.text().encode()) <= MAX_BYTES
    assert 0 < len(summary.lists[0].terms) < TERMS_ANY


def test_a_sample_is_scaled_to_every_document() -> None:
    sample = [record(f"http://x/{n}", Title="cache" if n % 4 == 0 else "proxy") for n in range(100)]
    summary = counted(*sample).summary(1000)
    assert (summary.documents, summary.sampled) == (1000, 100)
    assert dict(summary.list_of("Title").terms) == {"proxy": 750, "cache": 250}  # type: ignore[union-attr]
    assert summary.list_of("Title").documents == 1000  # type: ignore[union-attr]


def test_the_soif_form_reads_back() -> None:
    summary = counted(
        record("http://x/1", Title="Squid cache", Keywords="proxy"),
        record("http://x/2", Title="Harvest broker"),
    ).summary(2)
    registration = server_record(
        "broker", name="b", host="h.example", port=8501, attributes=summary.attributes()
    )
    assert from_record(registration) == summary
    assert from_record(server_record("broker", name="b", host="h", port=1)) is None
    empty = ContentSummary(0, 0, (TermList(ANY, 0, ()),))
    assert (
        from_record(
            server_record("broker", name="b", host="h", port=1, attributes=empty.attributes())
        )
        == empty
    )


@pytest.mark.parametrize(
    ("attributes", "problem"),
    [
        ({"Content-Documents": "many", "Content-Sampled": "1", SUMMARY: "* 1 a:1"}, "whole number"),
        ({"Content-Documents": "1", SUMMARY: "* 1 a:1"}, "Content-Sampled"),
        ({"Content-Documents": "1", "Content-Sampled": "1", SUMMARY: "Title 1 a:1"}, "start"),
        (
            {"Content-Documents": "1", "Content-Sampled": "1", SUMMARY: "* 1 cache"},
            "word:frequency",
        ),
        ({"Content-Documents": "1", "Content-Sampled": "1", SUMMARY: "* 1 a:-3"}, "whole number"),
        ({"Content-Documents": "1", "Content-Sampled": "1", SUMMARY: "*"}, "count"),
        ({"Content-Documents": "1", "Content-Sampled": "1", SUMMARY: " \n "}, "start"),
    ],
    ids=["documents", "no-sampled", "no-any-list", "no-frequency", "negative", "no-count", "blank"],
)
def test_a_summary_that_cannot_be_read_is_refused(attributes: dict[str, str], problem: str) -> None:
    registration = server_record(
        "broker", name="b", host="h", port=1, attributes=tuple(attributes.items())
    )
    with pytest.raises(SummaryFormatError, match=problem):
        from_record(registration)


def test_prefixes_and_missing_words() -> None:
    terms = TermList("Title", 10, (("cache", 6), ("caching", 5), ("proxy", 2)), cut=True)
    assert terms.frequency("proxy") == 2
    assert terms.frequency("squid") is None
    assert terms.prefixed("cach") == 10  # 11, but no more than the objects holding Title
    assert terms.prefixed("zz") is None
    assert terms.least == 2
    assert terms.line() == "Title 10 cache:6 caching:5 proxy:2 +"
