"""Summarizers, one module per document type; ``SUMMARIZERS`` maps Essence type names to them."""

from __future__ import annotations

from collections.abc import Callable

from gatherer.essence.document import Document, Parts
from gatherer.essence.options import EssenceOptions
from gatherer.essence.summarizers import binary, html, listing, man, pdf, source, text

Summarizer = Callable[[Document, EssenceOptions], Parts]

SUMMARIZERS: dict[str, Summarizer] = {
    "HTML": html.summarize,
    "Text": text.summarize,
    "README": text.summarize_with_full_text,
    "FAQ": text.summarize_with_full_text,
    "C": source.summarize_c,
    "Python": source.summarize_python,
    "PDF": pdf.summarize,
    "ManPage": man.summarize,
    "Binary": binary.summarize,
    "Directory": listing.summarize,
}

__all__ = ["SUMMARIZERS", "Summarizer"]
