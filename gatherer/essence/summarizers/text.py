"""The plain-text summarizer, for the types Text, README and FAQ: a title line, keywords
(YAKE's, as for web pages), the language, the first lines, and the full text (always for
README and FAQ, which Harvest indexed whole)."""

from __future__ import annotations

from gatherer.essence.document import Document, Parts
from gatherer.essence.options import EssenceOptions
from gatherer.essence.summarizers.keywords import extract as extract_keywords
from gatherer.essence.summarizers.language import detect as detect_language
from gatherer.essence.summarizers.text_tools import attributes, collapse, decode, leading_lines

_TITLE_CHARS = 200
_TITLE_SCAN_CHARS = 4096  # how far into the text the first line is looked for
_EXTRACTED_KEYWORDS = 10  # as for HTML pages


def summarize(document: Document, options: EssenceOptions) -> Parts:
    """``Title``, ``Keywords``, ``Language``, ``Partial-Text``, and ``Full-Text`` with
    ``full_text``."""
    return _summarize(document, options, full_text=options.full_text)


def summarize_with_full_text(document: Document, options: EssenceOptions) -> Parts:
    """Like ``summarize``, with ``Full-Text`` always: for README and FAQ files."""
    return _summarize(document, options, full_text=True)


def _summarize(document: Document, options: EssenceOptions, *, full_text: bool) -> Parts:
    text = decode(document.content, document.charset)
    language = detect_language(text)
    found = extract_keywords(text, language, min(options.max_keywords, _EXTRACTED_KEYWORDS))
    return Parts(
        attributes=attributes(
            ("Title", _first_line(text)),
            ("Keywords", "\n".join(found)),
            ("Language", language),
            ("Partial-Text", leading_lines(text, options.abstract_bytes)),
            ("Full-Text", text if full_text else ""),
        )
    )


def _first_line(text: str) -> str:
    """The first non-blank line of ``text``, whitespace collapsed, at most 200 characters."""
    lines = text[:_TITLE_SCAN_CHARS].lstrip().splitlines()
    return collapse(lines[0])[:_TITLE_CHARS].rstrip() if lines else ""
