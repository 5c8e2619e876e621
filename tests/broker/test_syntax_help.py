"""broker.syntax_help: the help section named beside a query that does not parse, told from
where the parser's own errors point (every example of docs/broker-query.md's error table),
and the sections' openings taken from the shipped help."""

from __future__ import annotations

import pytest

from broker.errors import QuerySyntaxError
from broker.query.parser import parse
from broker.syntax_help import SECTIONS, help_sections, section_for
from tests.support import REPO


def error_of(query: str) -> QuerySyntaxError:
    with pytest.raises(QuerySyntaxError) as caught:
        parse(query)
    return caught.value


@pytest.mark.parametrize(
    ("query", "section"),
    [
        ("a)", "boolean-operators"),
        ("a (b", "boolean-operators"),
        ("a ()", "boolean-operators"),
        ("AND a", "boolean-operators"),
        ("(OR b)", "boolean-operators"),
        ("a AND", "boolean-operators"),
        ("NOT cache", "boolean-operators"),
        ("a OR NOT b", "boolean-operators"),
        ("a NOT (NOT b NOT c)", "boolean-operators"),
        ('"object cache', "phrases-and-quoting"),
        ('""', "phrases-and-quoting"),
        ('a "b \\" c', "phrases-and-quoting"),
        ("/abc", "regular-expressions"),
        ("/ab(c/", "regular-expressions"),
        ("Title: /(a)\\1/", "regular-expressions"),
        ("/[[a]/", "regular-expressions"),
        ("/" + "a" * 300 + "/", "regular-expressions"),
        ("http://x", "attributes"),  # an unquoted URL
        ("Title:", "attributes"),
        ("Title: OR x", "attributes"),
        ("Title: NOT web", "attributes"),
        ("x:y:z", "attributes"),
        ("Title :x", "attributes"),
        ("2026:x", "attributes"),
        ("Title: (a Author: b)", "attributes"),
        ("> 5", "comparisons"),
        ("Size* > 5", "comparisons"),
        ("x >", "comparisons"),
        ("Type = HTML", "comparisons"),
        ("x > 2026-13-01", "comparisons"),
        ("x > 1e999", "comparisons"),
        ("c*", "prefixes"),
        ("ca*he", "prefixes"),
        ("cach*~1", "prefixes"),
        ("word~3", "approximate-words"),
        ("~2", "approximate-words"),
        ("a " * 65, "limits"),
        ("Title: (" + "a " * 70 + ")", "limits"),
        ("(" * 33 + "a" + ")" * 33, "limits"),
        ("a" * 1001, "limits"),
    ],
)
def test_the_section_is_told_from_where_the_error_points(query: str, section: str) -> None:
    error = error_of(query)
    assert section_for(error.query, error.position) == section


def test_every_section_named_is_in_the_shipped_help_with_its_opening() -> None:
    html = (REPO / "broker" / "templates" / "query-help.html").read_text("utf-8")
    sections = help_sections(html)
    for name in SECTIONS:
        section = sections[name]
        assert section.opening.startswith("<p>"), name
        assert "<h2" not in section.opening
    # The first paragraph, and the example right after it (not the paragraphs after that).
    comparisons = sections["comparisons"]
    assert comparisons.title == "Comparisons"
    assert comparisons.opening.count("<p>") == 1
    assert comparisons.opening.endswith("</code></pre>")
    assert "File-Size &gt; 10000" in comparisons.opening
    assert sections["limits"].opening.endswith("</table>")
    assert sections["prefixes"].opening.endswith("</p>")
