"""The PDF summarizer: the document information (title, author, subject, keywords), the page
count, and the text of the pages, read with pypdf."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from gatherer.errors import SummarizeError
from gatherer.essence.document import Document, Parts
from gatherer.essence.options import EssenceOptions
from gatherer.essence.summarizers.text_tools import (
    abstract,
    attributes,
    chunks,
    collapse,
    utf8_prefix,
)

if TYPE_CHECKING:
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


def summarize(document: Document, options: EssenceOptions) -> Parts:
    """``Title``, ``Author``, ``Description`` (the subject), ``Keywords`` (one per line),
    ``Pages``, ``Abstract`` (the first pages' text) and, with ``full_text``, ``Full-Text``.
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
    title, author, subject, keywords = _information(reader)
    split_keywords = keywords.replace(";", ",").split(",")  # writers use either separator
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
    return Parts(
        attributes=attributes(
            ("Title", title),
            ("Author", author),
            ("Description", subject),
            ("Keywords", "\n".join(filter(None, map(collapse, split_keywords)))),
            ("Pages", str(len(reader.pages))),
            ("Abstract", abstract(chunks(text), options.abstract_bytes)),
            ("Full-Text", utf8_prefix(text, wanted) if options.full_text else b""),
        )
    )


def _information(reader: PdfReader) -> tuple[str, str, str, str]:
    """Title, author, subject and keywords from the document information, each collapsed
    (or empty)."""
    info = reader.metadata
    if info is None:
        return "", "", "", ""
    values = (info.title, info.author, info.subject, info.keywords)
    # str(): a hand-made file may hold a number or a name where text belongs.
    title, author, subject, keywords = (collapse(str(v)) if v is not None else "" for v in values)
    return title, author, subject, keywords
