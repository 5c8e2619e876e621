"""The broker's full-text index: the interface the rest of the broker uses, and its tantivy
implementation."""

from __future__ import annotations

from broker.index.interface import Hit, Index, IndexedObject, Results
from broker.index.tantivy_engine import TantivyIndex
from broker.index.translate import needs_verification

__all__ = ["Hit", "Index", "IndexedObject", "Results", "TantivyIndex", "needs_verification"]
