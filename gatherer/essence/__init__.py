"""Essence: recognizes a document's type, selects it, unnests it and summarizes it into
attributes (Harvest's Essence, 1994).

The entry point is ``gatherer.essence.pipeline.summarize``, run in the worker processes of
``gatherer.essence.pool``. This package itself imports only the plain values, so the crawl's
own process never loads the summarizers and their parsers.
"""

from __future__ import annotations

from gatherer.essence.document import Document, Parts, Summary
from gatherer.essence.options import DEFAULT_STOPLIST, EssenceOptions

__all__ = ["DEFAULT_STOPLIST", "Document", "EssenceOptions", "Parts", "Summary"]
