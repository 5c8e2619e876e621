"""Essence's type recognition: which Essence type a document is, and on what evidence.

Evidence is weighed in this order, the first that decides wins:

1. ``magic``: binary and container signatures in the content (``puremagic``, plus tar's
   ``ustar`` at offset 257). Content decides over any label for these, so a gzip file named
   ``notes.txt`` is ``GNUCompressed``. Text signatures are ignored here: text is typed by the
   steps below.
2. ``content-type``: the server's media type (``text/html`` -> ``HTML``, ``image/*`` ->
   ``Image``...). ``application/octet-stream`` and unknown types say nothing.
3. ``name``: the extension table, and README / FAQ names (the document's name, else the last
   segment of its URL path).
4. ``content``: with no label at all, HTML is sniffed in the first KiB (the WHATWG idea).
5. ``heuristic``: NUL bytes or many control bytes in the first 4 KiB make ``Binary``; anything
   else is ``Text``.

Text results are then refined: a generic ``Text`` (say ``text/plain``) becomes ``README``,
``FAQ``, ``C``, ``Python`` or ``ManPage`` by name, then ``Python`` by a ``#!`` python line or
``ManPage`` by troff content (``.TH``, ``.\\"``). A text type whose content looks binary is
``Binary``.

Type names: ``HTML``, ``Text``, ``README``, ``FAQ``, ``C``, ``Python``, ``ManPage``, ``PDF``,
``PostScript``, ``Tar``, ``Zip``, ``GNUCompressed``, ``BZip2Compressed``, ``XZCompressed``,
``Image``, ``Audio``, ``Video``, ``Font``, ``Binary``, and ``Directory`` (the listings the
FILE, FTP and Gopher fetchers make, by their content types).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import puremagic

from gatherer.essence.document import Document

# Text types that a name or content refines a generic "Text" into.
_REFINED_TEXT = frozenset({"README", "FAQ", "C", "Python", "ManPage"})
# Types whose content must be text; binary content under such a label is "Binary".
TEXT_TYPES = frozenset({"Text", "HTML", "Directory"} | _REFINED_TEXT)

_SNIFF_BYTES = 4096
_HTML_SNIFF_BYTES = 1024
# Share of control bytes above which content without NULs still counts as binary.
_MAX_CONTROL_SHARE = 0.05
# puremagic's confidence is tenths of the signature length: 0.4 is a 4-byte signature.
# Shorter ones ("ID3", "BZh") also start ordinary text, so they need binary-looking content.
_CONFIDENT_MAGIC = 0.4
_MIN_MAGIC = 0.3

# Bytes the WHATWG sniffing standard calls binary data bytes.
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f]")
_TEXT_BOMS = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")
_WIDE_CHARSETS = ("utf-16", "utf-32")
_HTML_TAG = re.compile(rb"<(?:!doctype\s+html|html|head|body)[\s/>]", re.IGNORECASE)
_TROFF = re.compile(rb"\.TH[ \t]|[.'][ \t]*\\\"")
_PYTHON_SHEBANG = re.compile(rb"#![^\n]*\bpython[0-9.]*\b")
_README = re.compile(r"(?:readme|read\.me)(?:[._-].*)?", re.IGNORECASE)
_FAQ = re.compile(r"faq(?:[._-].*)?", re.IGNORECASE)
_MANUAL_SECTION = re.compile(r"[1-9][a-z]?|man")

# Media types by exact name; prefixes (image/, audio/...) are handled in _by_content_type.
_MEDIA_TYPES = {
    # What the FILE, FTP and Gopher fetchers call their listings.
    "text/directory": "Directory",
    "text/x-gopher-menu": "Directory",
    "text/html": "HTML",
    "application/xhtml+xml": "HTML",
    "text/plain": "Text",
    "text/x-c": "C",
    "text/x-csrc": "C",
    "text/x-chdr": "C",
    "text/x-python": "Python",
    "text/x-script.python": "Python",
    "text/troff": "ManPage",
    "text/x-troff-man": "ManPage",
    "application/x-troff-man": "ManPage",
    "application/xml": "Text",
    "application/json": "Text",
    "application/javascript": "Text",
    "application/x-sh": "Text",
    "application/pdf": "PDF",
    "application/postscript": "PostScript",
    "application/gzip": "GNUCompressed",
    "application/x-gzip": "GNUCompressed",
    "application/x-bzip2": "BZip2Compressed",
    "application/x-bzip": "BZip2Compressed",
    "application/x-xz": "XZCompressed",
    "application/x-tar": "Tar",
    "application/x-gtar": "Tar",
    "application/x-ustar": "Tar",
    "application/zip": "Zip",
    "application/x-zip-compressed": "Zip",
    "application/x-executable": "Binary",
    "application/x-sharedlib": "Binary",
    "application/x-object": "Binary",
    "application/vnd.microsoft.portable-executable": "Binary",
    "application/java": "Binary",
    "application/x-python-bytecode": "Binary",
}
_MEDIA_PREFIXES = (
    ("image/", "Image"),
    ("audio/", "Audio"),
    ("video/", "Video"),
    ("font/", "Font"),
    ("application/font-", "Font"),
    ("application/x-font-", "Font"),
    ("text/", "Text"),
)
# Types content magic may decide; text types are left to the later steps.
_MAGIC_TYPES = frozenset(
    {
        "PDF",
        "PostScript",
        "GNUCompressed",
        "BZip2Compressed",
        "XZCompressed",
        "Tar",
        "Zip",
        "Image",
        "Audio",
        "Video",
        "Font",
        "Binary",
    }
)
# puremagic reports some fonts with an extension but no media type.
_MAGIC_FONT_EXTENSIONS = frozenset({".ttf", ".otf", ".woff", ".woff2"})

_EXTENSIONS = {
    **dict.fromkeys(("html", "htm", "shtml", "xhtml"), "HTML"),
    **dict.fromkeys(("txt", "text"), "Text"),
    **dict.fromkeys(("c", "h"), "C"),
    **dict.fromkeys(("py", "pyw"), "Python"),
    "pdf": "PDF",
    **dict.fromkeys(("ps", "eps"), "PostScript"),
    "tar": "Tar",
    "zip": "Zip",
    **dict.fromkeys(("gz", "tgz"), "GNUCompressed"),
    **dict.fromkeys(("bz2", "tbz", "tbz2"), "BZip2Compressed"),
    **dict.fromkeys(("xz", "txz"), "XZCompressed"),
    **dict.fromkeys(
        ("gif", "jpg", "jpeg", "png", "bmp", "tif", "tiff", "xbm", "xpm", "ico", "webp", "svg"),
        "Image",
    ),
    **dict.fromkeys(("au", "snd", "wav", "mp3", "flac", "aif", "aiff", "mid", "midi"), "Audio"),
    **dict.fromkeys(("mpg", "mpeg", "mp4", "mov", "qt", "avi", "webm", "mkv"), "Video"),
    **dict.fromkeys(("ttf", "otf", "woff", "woff2", "pfa", "pfb", "bdf", "pcf"), "Font"),
    **dict.fromkeys(("o", "a", "so", "exe", "dll", "class", "pyc", "bin", "obj"), "Binary"),
}


@dataclass(frozen=True, slots=True)
class Recognition:
    """An Essence type name and the evidence that decided it.

    ``evidence`` is one of ``magic``, ``content-type``, ``name``, ``content``, ``heuristic``.
    """

    type: str
    evidence: str

    def __repr__(self) -> str:
        return f"Recognition({self.type} by {self.evidence})"


def recognize(document: Document) -> str:
    """The Essence type name of ``document``."""
    return identify(document).type


def identify(document: Document) -> Recognition:
    """The Essence type of ``document`` with the evidence for it (see the module docstring)."""
    head = document.content[:_SNIFF_BYTES]
    binary = _looks_binary(head, document.charset)
    magic = _by_magic(document.content, binary)
    if magic is not None:
        return Recognition(magic, "magic")
    name = name_of(document)
    named = _by_name(name)
    declared = _by_content_type(document.content_type)
    if declared is not None and declared not in TEXT_TYPES:
        return Recognition(declared, "content-type")
    if declared is None and named is not None and named not in TEXT_TYPES:
        return Recognition(named, "name")
    # Malformed pages carry junk bytes too: served as HTML and tagged as HTML, they stay HTML.
    if binary and not (declared == "HTML" and _HTML_TAG.search(head)):
        return Recognition("Binary", "heuristic")
    if declared is not None and declared != "Text":
        return Recognition(declared, "content-type")
    # Only refined types override a declared text/plain: a .html served as text/plain is Text.
    if named is not None and named != "Text" and (declared is None or named in _REFINED_TEXT):
        return Recognition(named, "name")
    sniffed = _by_text_content(head, html=declared is None and named is None)
    if sniffed is not None:
        return Recognition(sniffed, "content")
    if declared is not None:
        return Recognition("Text", "content-type")
    return Recognition("Text", "heuristic" if named is None else "name")


def name_of(document: Document) -> str:
    """The name type recognition looks at: the last segment of ``name``, else of the URL path."""
    if document.name:
        return document.name.rsplit("/", 1)[-1]
    return unquote(urlsplit(document.url).path.rsplit("/", 1)[-1])


def _looks_binary(head: bytes, charset: str | None) -> bool:
    if head.startswith(_TEXT_BOMS) or (charset or "").lower().startswith(_WIDE_CHARSETS):
        return False  # UTF-16 and UTF-32 text is full of NULs
    if b"\0" in head:
        return True
    return len(_CONTROL.findall(head)) > _MAX_CONTROL_SHARE * len(head)


def _by_magic(content: bytes, binary: bool) -> str | None:
    if not content:
        return None
    try:
        matches = puremagic.magic_string(content)
    except puremagic.PureError:  # no signature matched
        return None
    floor = _MIN_MAGIC if binary else _CONFIDENT_MAGIC
    for match in matches:  # most confident first
        if match.confidence < floor:
            break
        found = _by_content_type(match.mime_type)
        if found is None and match.extension in _MAGIC_FONT_EXTENSIONS:
            found = "Font"
        if found in _MAGIC_TYPES:
            return found
    return None


def _by_content_type(content_type: str | None) -> str | None:
    if not content_type:
        return None
    media = content_type.split(";", 1)[0].strip().lower()
    if media in _MEDIA_TYPES:
        return _MEDIA_TYPES[media]
    return next((kind for prefix, kind in _MEDIA_PREFIXES if media.startswith(prefix)), None)


def _by_name(name: str) -> str | None:
    stem, dot, extension = name.rpartition(".")
    by_extension = _EXTENSIONS.get(extension.lower()) if dot and stem else None
    if by_extension is not None and by_extension != "Text":
        return by_extension  # README.html is HTML, README.gz is compressed
    if _README.fullmatch(name):
        return "README"
    if _FAQ.fullmatch(name):
        return "FAQ"
    if dot and stem and _MANUAL_SECTION.fullmatch(extension.lower()):
        return "ManPage"
    return by_extension


def _by_text_content(head: bytes, *, html: bool) -> str | None:
    if html and _HTML_TAG.search(head[:_HTML_SNIFF_BYTES]):
        return "HTML"
    if _PYTHON_SHEBANG.match(head):
        return "Python"
    if _TROFF.match(head):
        return "ManPage"
    return None
