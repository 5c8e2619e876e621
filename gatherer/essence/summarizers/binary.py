"""The fallback summarizer for binary files: the printable strings in them, as strings(1)
prints them, and keywords drawn from those strings."""

from __future__ import annotations

import re

from gatherer.essence.document import Document, Parts
from gatherer.essence.options import EssenceOptions
from gatherer.essence.summarizers.text_tools import attributes, keywords

_MIN_LENGTH = 6
_PRINTABLE_RUN = re.compile(rb"[\t\x20-\x7e]{%d,}" % _MIN_LENGTH)


def summarize(document: Document, options: EssenceOptions) -> Parts:
    """``Strings`` (printable ASCII runs of six or more characters, each once, in order, up
    to twice ``abstract_bytes``) and ``Keywords`` from them."""
    budget = 2 * options.abstract_bytes
    found: dict[str, None] = {}
    size = 0
    for run in _PRINTABLE_RUN.finditer(document.content):
        if size >= budget:
            break
        string = run.group().strip().decode("ascii")
        if len(string) >= _MIN_LENGTH and string not in found:
            found[string] = None
            size += len(string) + 1
    strings = "\n".join(found)[:budget]  # ASCII: characters are bytes
    return Parts(
        attributes=attributes(
            ("Strings", strings),
            ("Keywords", "\n".join(keywords(strings, options.max_keywords))),
        )
    )
