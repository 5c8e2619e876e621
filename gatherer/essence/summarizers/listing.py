"""The summarizer for listings the fetchers make: FILE and FTP directories and Gopher menus.

Their entries are already links (the fetcher gives them), so the record says what the listing
is: its name as the title and the entries as text to search.
"""

from __future__ import annotations

from posixpath import basename
from urllib.parse import unquote, urlsplit

from gatherer.essence.document import Document, Parts
from gatherer.essence.options import EssenceOptions
from gatherer.essence.summarizers.text_tools import attributes, decode, leading_lines

GOPHER_MENU = "text/x-gopher-menu"


def summarize(document: Document, options: EssenceOptions) -> Parts:
    """``Title``: a Gopher menu's first line (menus open with their name), a directory's
    name, else the host; ``Partial-Text``: the first entries, one per line."""
    text = decode(document.content, document.charset)
    parts = urlsplit(document.url)
    if document.content_type == GOPHER_MENU:
        title = next((line.strip() for line in text.splitlines() if line.strip()), "")
    else:
        title = unquote(basename(parts.path.rstrip("/")))
    return Parts(
        attributes=attributes(
            ("Title", title or parts.hostname or document.url),
            ("Partial-Text", leading_lines(text, options.abstract_bytes)),
        )
    )
