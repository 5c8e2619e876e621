"""Manually written IAFA-style templates: parsing, every error, and merge precedence."""

from __future__ import annotations

import pytest

from gatherer.errors import ConfigError
from gatherer.essence.manual import ManualRecord, merge, parse_templates
from harvest_common.soif import Record

EXAMPLE = """\
Template-Type: DOCUMENT
URI: http://example.org/paper.ps
Title: Type Structured File Systems
Author-Name: Mike Schwartz
Keywords: file systems, typing
Description: A long value can continue
  on indented lines.
"""


def test_the_example_template() -> None:
    assert parse_templates(EXAMPLE, "papers.iafa") == [
        ManualRecord(
            url="http://example.org/paper.ps",
            template="DOCUMENT",
            attributes=(
                ("Title", b"Type Structured File Systems"),
                ("Author", b"Mike Schwartz"),
                ("Keywords", b"file systems, typing"),
                ("Description", b"A long value can continue\non indented lines."),
            ),
            source="papers.iafa:1",
        )
    ]


def test_several_templates_comments_and_blank_lines() -> None:
    text = (
        "# maintained by hand\n"
        "\n"
        "URI: http://example.org/a\n"
        "Title: A\n"
        "# a comment inside a template does not end it\n"
        "Abstract: about A\n"
        "   \t\n"
        "\n"
        "uri: http://example.org/b\n"
        "template-type: SERVICE\n"
        "Custom-Field: kept as written\n"
    )
    assert parse_templates(text, "f") == [
        ManualRecord(
            "http://example.org/a", "FILE", (("Title", b"A"), ("Abstract", b"about A")), "f:3"
        ),
        ManualRecord(
            "http://example.org/b", "SERVICE", (("Custom-Field", b"kept as written"),), "f:9"
        ),
    ]


VALUES = [
    ("continuation after an empty value", "Description:\n  first\n\tsecond\n", b"first\nsecond"),
    ("value whitespace trimmed", "Description:   padded   \n", b"padded"),
    ("empty value", "Description:\n", b""),
    ("repeated name joined", "Description: one\ndescription: two\n", b"one\ntwo"),
    ("colons in the value", "Description: see http://x/y: z\n", b"see http://x/y: z"),
    ("utf-8 value", "Description: caf\u00e9\n", "caf\u00e9".encode()),
]


@pytest.mark.parametrize(("lines", "value"), [c[1:] for c in VALUES], ids=[c[0] for c in VALUES])
def test_values(lines: str, value: bytes) -> None:
    (record,) = parse_templates(f"URI: http://e.org/\n{lines}", "f")
    assert record.attributes == (("Description", value),)


def test_author_names_become_author_ignoring_case() -> None:
    text = "URI: http://e.org/\nauthor-name: One\nAUTHOR-NAME: Two\n"
    (record,) = parse_templates(text, "f")
    assert record.attributes == (("Author", b"One\nTwo"),)


def test_crlf_line_ends() -> None:
    (record,) = parse_templates("URI: http://e.org/\r\nTitle: T\r\n  more\r\n", "f")
    assert (record.url, record.attributes) == ("http://e.org/", (("Title", b"T\nmore"),))


def test_empty_text_has_no_templates() -> None:
    assert parse_templates("# nothing here\n\n", "f") == []


def test_records_are_valid_soif() -> None:
    for record in parse_templates(EXAMPLE, "f"):
        assert Record(record.template, record.url, record.attributes).url == record.url


ERRORS = [
    ("missing URI", "Title: no URI\n", ["f:1: template has no URI"]),
    (
        "malformed line",
        "URI: http://e.org/\nthis line has no colon\n",
        ["f:2: expected 'Name: value', got 'this line has no colon'"],
    ),
    (
        "bad attribute name",
        "URI: http://e.org/\nBad Name: x\n",
        ["f:2: expected 'Name: value', got 'Bad Name: x'"],
    ),
    (
        "continuation with no attribute",
        "  dangling\nURI: http://e.org/\n",
        ["f:1: continuation line with no attribute before it"],
    ),
    (
        "URI twice",
        "URI: http://e.org/a\nURI: http://e.org/b\n",
        ["f:2: URI given twice in one template"],
    ),
    (
        "Template-Type twice",
        "Template-Type: A\nURI: http://e.org/\nTemplate-Type: B\n",
        ["f:3: Template-Type given twice in one template"],
    ),
    ("empty URI", "URI:\nTitle: t\n", ["f:1: URI is empty"]),
    (
        "URI with whitespace",
        "URI: http://e.org/a b\n",
        ["f:1: URI 'http://e.org/a b' contains whitespace"],
    ),
    (
        "bad template name",
        "Template-Type: NOT OK\nURI: http://e.org/\n",
        ["f:1: Template-Type 'NOT OK' is not a SOIF template name"],
    ),
    (
        "reserved template name",
        "Template-Type: UPDATE\nURI: http://e.org/\n",
        ["f:1: Template-Type 'UPDATE' is not a SOIF template name"],
    ),
    (
        "same URI twice in a file",
        "URI: http://e.org/\n\nURI: http://e.org/\n",
        ["f:3: a template for http://e.org/ comes earlier in the file"],
    ),
    (
        "every problem collected",
        "Title: first\n\nnonsense\nURI: http://e.org/\n\n  orphan\nURI: http://e.org/x\n",
        [
            "f:1: template has no URI",
            "f:3: expected 'Name: value', got 'nonsense'",
            "f:6: continuation line with no attribute before it",
        ],
    ),
]


@pytest.mark.parametrize(("text", "problems"), [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_errors(text: str, problems: list[str]) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_templates(text, "f")
    assert raised.value.problems == problems


def test_record_repr_names_its_source() -> None:
    (record,) = parse_templates(EXAMPLE, "p")
    assert repr(record) == (
        "ManualRecord(DOCUMENT 'http://example.org/paper.ps' "
        "[Title, Author, Keywords, Description] from p:1)"
    )


GENERATED = (("Title", b"generated title"), ("Keywords", b"gen"), ("Body", b"text"))

MERGES = [
    (
        "manual replaces in place, ignoring case",
        (("title", b"Hand title"),),
        (("title", b"Hand title"), ("Keywords", b"gen"), ("Body", b"text")),
    ),
    (
        "new manual attributes follow in their order",
        (("Author", b"A"), ("Keywords", b"hand"), ("Abstract", b"B")),
        (
            ("Title", b"generated title"),
            ("Keywords", b"hand"),
            ("Body", b"text"),
            ("Author", b"A"),
            ("Abstract", b"B"),
        ),
    ),
    ("no manual attributes keeps the generated", (), GENERATED),
]


@pytest.mark.parametrize(
    ("manual", "expected"), [c[1:] for c in MERGES], ids=[c[0] for c in MERGES]
)
def test_merge(
    manual: tuple[tuple[str, bytes], ...], expected: tuple[tuple[str, bytes], ...]
) -> None:
    record = ManualRecord("http://e.org/", "FILE", manual, "f:1")
    assert merge(GENERATED, record) == expected


def test_merge_with_nothing_generated_is_the_manual_record() -> None:
    record = ManualRecord("http://e.org/", "FILE", (("Title", b"T"), ("Author", b"A")), "f:1")
    assert merge((), record) == record.attributes
