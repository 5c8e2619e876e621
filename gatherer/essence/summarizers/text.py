"""The plain-text summarizer, for the types Text, README and FAQ: a title line, keywords,
the first lines, and the full text (always for README and FAQ, which Harvest indexed whole)."""

from __future__ import annotations

from gatherer.essence.document import Document, Parts
from gatherer.essence.options import EssenceOptions
from gatherer.essence.summarizers.text_tools import (
    attributes,
    collapse,
    decode,
    keywords,
    leading_lines,
)

_TITLE_CHARS = 200
_TITLE_SCAN_CHARS = 4096  # how far into the text the first line is looked for


def summarize(document: Document, options: EssenceOptions) -> Parts:
    """``Title``, ``Keywords``, ``Partial-Text``, and ``Full-Text`` with ``full_text``."""
    return _summarize(document, options, full_text=options.full_text)


def summarize_with_full_text(document: Document, options: EssenceOptions) -> Parts:
    """Like ``summarize``, with ``Full-Text`` always: for README and FAQ files."""
    return _summarize(document, options, full_text=True)


def _summarize(document: Document, options: EssenceOptions, *, full_text: bool) -> Parts:
    text = decode(document.content, document.charset)
    return Parts(
        attributes=attributes(
            ("Title", _first_line(text)),
            ("Keywords", "\n".join(keywords(text, options.max_keywords))),
            ("Partial-Text", leading_lines(text, options.abstract_bytes)),
            ("Full-Text", text if full_text else ""),
        )
    )


def _first_line(text: str) -> str:
    """The first non-blank line of ``text``, whitespace collapsed, at most 200 characters."""
    lines = text[:_TITLE_SCAN_CHARS].lstrip().splitlines()
    return collapse(lines[0])[:_TITLE_CHARS].rstrip() if lines else ""
