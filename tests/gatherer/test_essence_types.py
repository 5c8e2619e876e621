"""Essence type recognition: magic, then Content-Type, then name, then content and heuristics."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import tarfile
import zipfile

import pytest

from gatherer.essence.document import Document
from gatherer.essence.types import Recognition, identify, name_of, recognize

HTML = b"<!DOCTYPE html>\n<html><head><title>t</title></head><body>hi</body></html>\n"
TEXT = b"Just some words of plain text.\n"
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00"
PDF = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj << >> endobj\n%%EOF\n"
ELF = b"\x7fELF\x02\x01\x01\x00" + bytes(56)


def _tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("a.txt")
        info.size = 3
        archive.addfile(info, io.BytesIO(b"abc"))
    return buffer.getvalue()


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("a.txt", "abc")
    return buffer.getvalue()


def doc(content: bytes, name: str = "", content_type: str | None = None, **kw: str) -> Document:
    return Document(kw.get("url", f"http://example.org/{name}"), content, content_type, name=name)


CASES = [
    # magic beats a misleading name and a misleading Content-Type
    ("magic: gzip named notes.txt", doc(gzip.compress(TEXT), "notes.txt"), "GNUCompressed"),
    ("magic: bzip2 named like C", doc(bz2.compress(TEXT), "a.c"), "BZip2Compressed"),
    ("magic: xz with no name", doc(lzma.compress(TEXT)), "XZCompressed"),
    ("magic: ustar named data.c", doc(_tar(), "data.c"), "Tar"),
    ("magic: zip named readme.txt", doc(_zip(), "readme.txt"), "Zip"),
    ("magic: PDF served as text/html", doc(PDF, "x.html", "text/html"), "PDF"),
    ("magic: PNG served as text/plain", doc(PNG, "p.txt", "text/plain"), "Image"),
    ("magic: PostScript text", doc(b"%!PS-Adobe-3.0\n%%Title: t\nshowpage\n"), "PostScript"),
    ("magic: GIF", doc(b"GIF89a\x01\x00\x01\x00\x80\x00\x00"), "Image"),
    ("magic: WAV", doc(b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00"), "Audio"),
    ("magic: MP4", doc(b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom"), "Video"),
    ("magic: WOFF2 font", doc(b"wOF2\x00\x01\x00\x00" + bytes(40)), "Font"),
    ("magic: TrueType font", doc(b"\x00\x01\x00\x00\x00\x0f\x00\x80\x00\x03\x00p"), "Font"),
    ("magic: 3-byte signature on text is ignored", doc(b"ID3 tags explained\n"), "Text"),
    ("magic: BZh at the start of text is ignored", doc(b"BZh is how bzip2 starts\n"), "Text"),
    # Content-Type beats the extension
    ("type: .html served as text/plain", doc(HTML, "page.html", "text/plain"), "Text"),
    ("type: .txt served as text/html", doc(TEXT, "page.txt", "text/html"), "HTML"),
    ("type: .c served as application/pdf", doc(TEXT, "a.c", "application/pdf"), "PDF"),
    ("type: .jpg served as text/plain", doc(TEXT, "photo.jpg", "text/plain"), "Text"),
    ("type: image/*", doc(TEXT, "x.txt", "image/x-portable-bitmap"), "Image"),
    ("type: audio/*", doc(TEXT, "", "audio/basic"), "Audio"),
    ("type: video/*", doc(TEXT, "", "video/mpeg"), "Video"),
    ("type: font/*", doc(TEXT, "", "font/sfnt"), "Font"),
    ("type: application/x-gzip", doc(TEXT, "", "application/x-gzip"), "GNUCompressed"),
    ("type: application/x-tar", doc(TEXT, "", "application/x-tar"), "Tar"),
    ("type: application/zip", doc(TEXT, "", "application/zip"), "Zip"),
    ("type: case and parameters ignored", doc(TEXT, "", "Text/HTML; charset=utf-8"), "HTML"),
    ("type: octet-stream says nothing", doc(TEXT, "a.c", "application/octet-stream"), "C"),
    ("type: unknown type says nothing", doc(TEXT, "x.py", "application/x-whatever"), "Python"),
    ("type: other text/* is generic text", doc(TEXT, "", "text/markdown"), "Text"),
    ("type: text/x-c", doc(TEXT, "", "text/x-c"), "C"),
    # names refine generic text, also when served as text/plain
    ("name: README served as text/plain", doc(TEXT, "README", "text/plain"), "README"),
    ("name: README.md", doc(TEXT, "README.md"), "README"),
    ("name: READ.ME", doc(TEXT, "READ.ME"), "README"),
    ("name: readme.txt", doc(TEXT, "readme.txt"), "README"),
    ("name: README inside an archive", doc(TEXT, "pkg/src/README"), "README"),
    ("name: README.html is HTML", doc(HTML, "README.html"), "HTML"),
    ("name: FAQ", doc(TEXT, "FAQ"), "FAQ"),
    ("name: faq.txt served as text/plain", doc(TEXT, "faq.txt", "text/plain"), "FAQ"),
    ("name: .c", doc(TEXT, "main.c"), "C"),
    ("name: .h", doc(TEXT, "util.h", "text/plain"), "C"),
    ("name: .py", doc(TEXT, "tool.py"), "Python"),
    ("name: section 1 manual", doc(TEXT, "ls.1"), "ManPage"),
    ("name: section 3p manual", doc(TEXT, "printf.3p"), "ManPage"),
    ("name: .man", doc(TEXT, "intro.man", "text/plain"), "ManPage"),
    ("name: .html with no type", doc(HTML, "index.html"), "HTML"),
    ("name: .txt", doc(HTML, "notes.txt"), "Text"),
    ("name: .tar without ustar magic", doc(TEXT, "old.tar"), "Tar"),
    ("name: .jpg with no type", doc(TEXT, "photo.jpg"), "Image"),
    ("name: from the URL path", doc(TEXT, url="http://example.org/pub/README"), "README"),
    ("name: unknown extension", doc(TEXT, "x.frobnicate"), "Text"),
    # content refines generic text
    ("content: python shebang", doc(b"#!/usr/bin/env python3\nprint(1)\n", "tool"), "Python"),
    (
        "content: python shebang as text/plain",
        doc(b"#!/usr/bin/python\n", "", "text/plain"),
        "Python",
    ),
    ("content: shell shebang stays text", doc(b"#!/bin/sh\necho hi\n", "run"), "Text"),
    ("content: troff .TH", doc(b'.TH LS 1 "1994"\n.SH NAME\nls\n'), "ManPage"),
    ("content: troff comment", doc(b'.\\" Copyright 1994\n.TH X 1\n'), "ManPage"),
    # HTML sniffing only with neither type nor known name
    ("sniff: doctype", doc(HTML), "HTML"),
    ("sniff: after a comment", doc(b"  <!-- made by hand -->\n<HTML lang=en>\n"), "HTML"),
    ("sniff: head", doc(b"\n<head><title>x</title>"), "HTML"),
    ("sniff: body", doc(b"<body>\nhello"), "HTML"),
    ("sniff: not a tag", doc(b"<htmlish> is not a tag\n"), "Text"),
    ("sniff: beyond the first KiB", doc(b"x" * 1100 + b"<html>"), "Text"),
    ("sniff: not when typed text/plain", doc(HTML, "", "text/plain"), "Text"),
    # text or binary
    ("heuristic: NUL bytes", doc(b"abc\x00def"), "Binary"),
    ("heuristic: many control bytes", doc(b"ab\x01\x02\x03\x04" * 20), "Binary"),
    ("heuristic: a few control bytes", doc(b"page one\x0cpage two\x1b[1m bold\n" * 5), "Text"),
    ("heuristic: latin-1 text", doc("café crème brûlée\n".encode("latin-1")), "Text"),
    ("heuristic: UTF-16 with BOM", doc("hello".encode("utf-16")), "Text"),
    ("heuristic: empty", doc(b""), "Text"),
    ("heuristic: binary named .c", doc(b"\x00\x01\x02" * 10, "prog.c"), "Binary"),
    ("heuristic: binary served as text/plain", doc(b"\x00\x01" * 10, "", "text/plain"), "Binary"),
    ("heuristic: ELF named .c", doc(ELF, "prog.c"), "Binary"),
    ("name: .o", doc(b"objects", "main.o"), "Binary"),
]


@pytest.mark.parametrize(
    ("document", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_recognize(document: Document, expected: str) -> None:
    assert recognize(document) == expected


def test_utf16_by_charset_is_text() -> None:
    document = Document("http://e.org/x", "hello".encode("utf-16-le"), "text/plain", "utf-16le")
    assert recognize(document) == "Text"


EVIDENCE = [
    ("magic decides containers", doc(gzip.compress(TEXT), "a.txt"), "GNUCompressed", "magic"),
    ("content-type decides", doc(TEXT, "a.txt", "text/html"), "HTML", "content-type"),
    ("name refines text/plain", doc(TEXT, "README", "text/plain"), "README", "name"),
    ("name decides without a type", doc(TEXT, "x.pdf"), "PDF", "name"),
    ("content sniffed", doc(HTML), "HTML", "content"),
    ("plain text by heuristic", doc(TEXT), "Text", "heuristic"),
    ("text/plain stays by content-type", doc(TEXT, "", "text/plain"), "Text", "content-type"),
    ("binary by heuristic", doc(b"\x00" * 8, "x.txt"), "Binary", "heuristic"),
]


@pytest.mark.parametrize(
    ("document", "kind", "evidence"), [c[1:] for c in EVIDENCE], ids=[c[0] for c in EVIDENCE]
)
def test_identify_names_the_deciding_evidence(document: Document, kind: str, evidence: str) -> None:
    assert identify(document) == Recognition(kind, evidence)


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (Document("http://e.org/a/b.txt", b"", name="dir/c.txt"), "c.txt"),
        (Document("http://e.org/a/b%20c.txt?q=1", b""), "b c.txt"),
        (Document("http://e.org/a/", b""), ""),
    ],
    ids=["member name's last segment", "unquoted URL segment", "directory URL"],
)
def test_name_of(document: Document, expected: str) -> None:
    assert name_of(document) == expected


def test_recognition_repr_says_type_and_evidence() -> None:
    assert repr(Recognition("HTML", "content")) == "Recognition(HTML by content)"
