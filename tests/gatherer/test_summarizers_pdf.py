"""The PDF summarizer: document information, page text, encryption, and broken files."""

from __future__ import annotations

import io

import pytest
from pypdf import PageObject, PdfWriter

from gatherer.errors import SummarizeError
from gatherer.essence.document import Document
from gatherer.essence.options import EssenceOptions
from gatherer.essence.summarizers import pdf

URL = "http://www.example.org/papers/harvest.pdf"


def summarize(data: bytes, **options: object) -> dict[str, bytes]:
    parts = pdf.summarize(Document(URL, data), EssenceOptions(**options))  # type: ignore[arg-type]
    found = dict(parts.attributes)
    assert len(found) == len(parts.attributes), "an attribute name appears twice"
    assert parts.links == ()
    return found


def blank_pdf(pages: int = 2, metadata: dict[str, str] | None = None, **encrypt: str) -> bytes:
    """A PDF of blank pages written by pypdf, with document information and encryption."""
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(width=612, height=792)
    if metadata is not None:
        writer.add_metadata(metadata)
    if encrypt:
        writer.encrypt(**encrypt)  # type: ignore[arg-type]
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def text_pdf(*pages: str) -> bytes:
    """A hand-made PDF with one line of Helvetica text per page (ASCII, no parentheses)."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>"
        % (b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(len(pages))), len(pages)),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, text in enumerate(pages):
        stream = b"BT /F1 12 Tf 72 712 Td (%s) Tj ET" % text.encode("ascii")
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R"
            b" /Resources << /Font << /F1 3 0 R >> >> >>" % (5 + 2 * i)
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


METADATA = {
    "/Title": "Harvest:  A Scalable,\n Customizable Discovery System",
    "/Author": "C. Mic Bowman",
    "/Subject": "Resource discovery",
    "/Keywords": "caching, indexing; replication ,, gatherer",
}
EXPECTED_METADATA = {
    "Title": b"Harvest: A Scalable, Customizable Discovery System",
    "Author": b"C. Mic Bowman",
    "Description": b"Resource discovery",
    "Keywords": b"caching\nindexing\nreplication\ngatherer",
}


def test_document_information_and_page_count() -> None:
    assert summarize(blank_pdf(3, METADATA)) == {**EXPECTED_METADATA, "Pages": b"3"}


def test_a_pdf_without_document_information_gives_its_page_count() -> None:
    assert summarize(blank_pdf(1)) == {"Pages": b"1"}


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        pytest.param(
            {},
            {"Pages": b"3", "Abstract": b"Hello PDF Second page Third page"},
            id="abstract",
        ),
        pytest.param(
            {"abstract_bytes": 14},
            {"Pages": b"3", "Abstract": b"Hello PDF Seco"},
            id="abstract-cut",
        ),
        pytest.param(
            {"full_text": True, "abstract_bytes": 5},
            {
                "Pages": b"3",
                "Abstract": b"Hello",
                "Full-Text": b"Hello PDF\nSecond page\nThird page",
            },
            id="full-text",
        ),
    ],
)
def test_page_text(options: dict[str, object], expected: dict[str, bytes]) -> None:
    assert summarize(text_pdf("Hello PDF", "Second page", "Third page"), **options) == expected


def test_the_abstract_reads_only_the_pages_it_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[str] = []
    extract_text = PageObject.extract_text

    def spy(page: PageObject) -> str:
        read.append(extract_text(page))
        return read[-1]

    monkeypatch.setattr(PageObject, "extract_text", spy)
    data = text_pdf("A first page long enough", "second", "third")
    assert summarize(data, abstract_bytes=10)["Abstract"] == b"A first pa"
    assert read == ["A first page long enough"]


@pytest.mark.parametrize(
    "algorithm", [pytest.param("RC4-128", id="rc4"), pytest.param("AES-256", id="aes")]
)
def test_encrypted_with_the_empty_password_is_read(algorithm: str) -> None:
    data = blank_pdf(2, METADATA, user_password="", owner_password="owner", algorithm=algorithm)
    assert summarize(data) == {**EXPECTED_METADATA, "Pages": b"2"}


def test_encrypted_with_a_user_password_gives_nothing() -> None:
    data = blank_pdf(2, METADATA, user_password="secret", algorithm="RC4-128")
    assert summarize(data) == {}


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        pytest.param(b"", "pdf: EmptyFileError", id="empty"),
        pytest.param(b"garbage, not a PDF at all", "pdf: PdfStreamError", id="garbage"),
        pytest.param(b"%PDF-1.4\n" + bytes(range(256)) * 4, "pdf: PdfStreamError", id="junk-body"),
        pytest.param(blank_pdf(2, METADATA)[:200], "pdf: PdfStreamError", id="truncated"),
    ],
)
def test_broken_files_raise_summarize_error(data: bytes, reason: str) -> None:
    with pytest.raises(SummarizeError) as raised:
        summarize(data)
    assert raised.value.url == URL
    assert raised.value.reason == reason


def test_outline_dates_and_language_are_read() -> None:
    from pypdf.generic import NameObject, TextStringObject

    writer = PdfWriter()
    for _ in range(3):
        writer.add_blank_page(width=612, height=792)
    writer.add_metadata(
        {
            "/Title": "Harvest",
            "/CreationDate": "D:20250102030405+01'00'",
            "/ModDate": "D:20261130120000Z",
        }
    )
    writer._root_object[NameObject("/Lang")] = TextStringObject("en-US")
    intro = writer.add_outline_item(title="Introduction", page_number=0)
    writer.add_outline_item(title="Motivation", page_number=0, parent=intro)
    writer.add_outline_item(title="Related work", page_number=1, parent=intro)
    writer.add_outline_item(title="Design", page_number=1)
    writer.add_outline_item(title="Evaluation", page_number=2)
    out = io.BytesIO()
    writer.write(out)

    found = summarize(out.getvalue())
    assert found["Headings"] == b"Introduction\nMotivation\nRelated work\nDesign\nEvaluation"
    assert found["Date-Published"] == b"2025-01-02T02:04:05Z"
    assert found["Date-Modified"] == b"2026-11-30T12:00:00Z"
    assert found["Language"] == b"en-US"


def test_a_garbled_date_is_left_out() -> None:
    found = summarize(blank_pdf(metadata={"/Title": "T", "/CreationDate": "D:yesterday"}))
    assert found["Title"] == b"T"
    assert "Date-Published" not in found


def test_keywords_and_language_come_from_the_text_when_the_file_declares_none() -> None:
    line = "Replicated brokers converge by flooding updates and repairing with anti-entropy"
    found = summarize(text_pdf(*([line] * 4)))
    keywords = found["Keywords"].split(b"\n")
    assert b"anti-entropy" in keywords or b"Replicated brokers" in keywords
    assert found["Language"] == b"en"
