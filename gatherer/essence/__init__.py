"""Essence: recognizes a document's type, selects it, unnests it and summarizes it into
attributes (Harvest's Essence, 1994). ``summarize`` is the entry point."""

from __future__ import annotations

from gatherer.essence.document import Document, Parts, Summary
from gatherer.essence.manual import ManualRecord, merge, parse_templates
from gatherer.essence.options import DEFAULT_STOPLIST, EssenceOptions
from gatherer.essence.pipeline import summarize
from gatherer.essence.types import Recognition, identify, recognize
from gatherer.essence.unnest import NESTED_TYPES, Unnested, unnest

__all__ = [
    "DEFAULT_STOPLIST",
    "NESTED_TYPES",
    "Document",
    "EssenceOptions",
    "ManualRecord",
    "Parts",
    "Recognition",
    "Summary",
    "Unnested",
    "identify",
    "merge",
    "parse_templates",
    "recognize",
    "summarize",
    "unnest",
]
