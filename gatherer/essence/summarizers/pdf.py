"""The PDF summarizer: the document information (title, author, subject, keywords, dates), the
outline (bookmarks) as headings, the language, the page count, and the text of the pages, read
with pypdf. Keywords are extracted from the text and the language detected only when the
document declares none."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from gatherer.errors import SummarizeError
from gatherer.essence.document import Document, Parts
from gatherer.essence.options import EssenceOptions
from gatherer.essence.summarizers.keywords import extract as extract_keywords
from gatherer.essence.summarizers.language import detect as detect_language
from gatherer.essence.summarizers.metadata import iso_date, language_tag
from gatherer.essence.summarizers.text_tools import (
    abstract,
    attributes,
    chunks,
    collapse,
    utf8_prefix,
)

if TYPE_CHECKING:
    from datetime import datetime

    from pypdf import PdfReader

# Besides its own errors, pypdf lets these escape on malformed or hostile files.
_ESCAPING_ERRORS = (
    ValueError,
    LookupError,
    TypeError,
    AttributeError,
    ArithmeticError,
    NotImplementedError,
    RecursionError,
)
_FULL_TEXT_BYTES = 1 << 20  # Full-Text stops here: a book-length PDF is not indexed whole
# The outline's entries read as Headings, depth first; a book's outline can list thousands.
_MAX_HEADINGS = 200
_MAX_OUTLINE_DEPTH = 8
_EXTRACTED_KEYWORDS = 10  # as for HTML pages


def summarize(document: Document, options: EssenceOptions) -> Parts:
    """``Title``, ``Author``, ``Description`` (the subject), ``Keywords`` (one per line; else
    extracted from the text), ``Language``, ``Date-Published`` and ``Date-Modified`` (the
    creation and modification dates), ``Headings`` (the outline), ``Pages``, ``Abstract`` (the
    first pages' text) and, with ``full_text``, ``Full-Text``.
    An encrypted PDF is opened with the empty password; if that fails nothing is readable
    (the information dictionary is encrypted too) and no attributes are given."""
    # pypdf is loaded with the first PDF: it is most of a summarizer worker's memory, and
    # many gatherings never see a PDF.
    from pypdf.errors import PyPdfError

    try:
        return _summarize(document.content, options)
    except (PyPdfError, *_ESCAPING_ERRORS) as error:
        raise SummarizeError(document.url, f"pdf: {type(error).__name__}") from error


def _summarize(data: bytes, options: EssenceOptions) -> Parts:
    from pypdf import PasswordType, PdfReader

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
        return Parts()
    info = _information(reader)
    split_keywords = info.keywords.replace(";", ",").split(",")  # writers use either separator
    declared = list(filter(None, map(collapse, split_keywords)))
    wanted = _FULL_TEXT_BYTES if options.full_text else options.abstract_bytes
    texts: list[str] = []
    size = 0
    for page in reader.pages:
        if size >= wanted:
            break
        text = page.extract_text()
        texts.append(text)
        size += len(text)
    text = "\n".join(texts)
    language = _declared_language(reader) or detect_language(text)
    found = declared or extract_keywords(
        text, language, min(options.max_keywords, _EXTRACTED_KEYWORDS)
    )
    return Parts(
        attributes=attributes(
            ("Title", info.title),
            ("Author", info.author),
            ("Description", info.subject),
            ("Keywords", "\n".join(found)),
            ("Language", language),
            ("Date-Published", info.created),
            ("Date-Modified", info.modified),
            ("Headings", "\n".join(_outline(reader))),
            ("Pages", str(len(reader.pages))),
            ("Abstract", abstract(chunks(text), options.abstract_bytes)),
            ("Full-Text", utf8_prefix(text, wanted) if options.full_text else b""),
        )
    )


class _Information(NamedTuple):
    title: str
    author: str
    subject: str
    keywords: str
    created: str
    modified: str


def _information(reader: PdfReader) -> _Information:
    """The document information, each value collapsed (or empty), dates in ISO 8601."""
    info = reader.metadata
    if info is None:
        return _Information("", "", "", "", "", "")
    values = (info.title, info.author, info.subject, info.keywords)
    # str(): a hand-made file may hold a number or a name where text belongs.
    title, author, subject, keywords = (collapse(str(v)) if v is not None else "" for v in values)
    return _Information(
        title,
        author,
        subject,
        keywords,
        _date(lambda: info.creation_date),
        _date(lambda: info.modification_date),
    )


def _date(read: Callable[[], datetime | None]) -> str:
    """A PDF date as ISO 8601 (UTC where the file gives a zone); empty if absent or garbled
    (pypdf raises ValueError for a date it cannot parse)."""
    try:
        when = read()
    except ValueError:
        return ""
    if when is None:
        return ""
    return iso_date(when.isoformat())


def _declared_language(reader: PdfReader) -> str:
    """The catalog's ``/Lang`` (a BCP 47 tag), if it is one."""
    value = reader.root_object.get("/Lang")
    return language_tag(str(value)) if value is not None else ""


def _outline(reader: PdfReader) -> list[str]:
    """The outline's titles, depth first, at most ``_MAX_HEADINGS``."""
    headings: list[str] = []
    pending: list[tuple[list[Any], int]] = [(list(reader.outline), 0)]
    while pending and len(headings) < _MAX_HEADINGS:
        items, depth = pending.pop()
        for index, item in enumerate(items):
            if isinstance(item, list):
                if depth < _MAX_OUTLINE_DEPTH:
                    # The rest of this level after the nested one, which comes first.
                    pending.append((items[index + 1 :], depth))
                    pending.append((item, depth + 1))
                break
            title = collapse(str(getattr(item, "title", "") or ""))
            if title:
                headings.append(title)
                if len(headings) == _MAX_HEADINGS:
                    break
    return headings
