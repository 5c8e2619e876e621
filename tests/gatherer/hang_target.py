"""A summarizer for the tests that hangs on one document, like a parser caught in a loop on
malformed HTML; every other document goes through the real pipeline."""

from __future__ import annotations

import time

from gatherer.essence.document import Document, Summary
from gatherer.essence.options import EssenceOptions
from gatherer.essence.pipeline import summarize as real_summarize


def summarize(document: Document, options: EssenceOptions) -> Summary:
    if document.url.endswith("/bad.html"):
        time.sleep(3600)
    return real_summarize(document, options)
