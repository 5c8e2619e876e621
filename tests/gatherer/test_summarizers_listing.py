"""The listing summarizer: directories (FILE, FTP) and Gopher menus, recognized by the content
types their fetchers give them."""

from __future__ import annotations

import pytest

from gatherer.essence.document import Document
from gatherer.essence.options import EssenceOptions
from gatherer.essence.pipeline import summarize
from gatherer.essence.types import recognize


@pytest.mark.parametrize(
    ("url", "content_type", "content", "title"),
    [
        ("file:///srv/pub/docs/", "text/directory", b"README\nsub/\n", "docs"),
        ("ftp://ftp.example.edu/pub/", "text/directory", b"a.txt\n", "pub"),
        ("ftp://ftp.example.edu/", "text/directory", b"pub/\n", "ftp.example.edu"),
        ("gopher://g.example.org/1", "text/x-gopher-menu", b"\nWelcome\nFiles\n", "Welcome"),
        ("gopher://g.example.org/1/empty", "text/x-gopher-menu", b"", "g.example.org"),
    ],
)
def test_listing_title_and_entries(url: str, content_type: str, content: bytes, title: str) -> None:
    document = Document(url, content, content_type)
    assert recognize(document) == "Directory"
    summary = summarize(document, EssenceOptions())
    assert summary.type == "Directory"
    attributes = dict(summary.attributes)
    assert attributes["Title"] == title.encode()
    assert attributes.get("Partial-Text", b"") == content.strip()


def test_a_directory_holding_a_readme_is_still_a_directory() -> None:
    # Named like its first entry would make it a README by name; its content type decides.
    document = Document("file:///srv/README/", b"README\n", "text/directory", name="README")
    assert recognize(document) == "Directory"
