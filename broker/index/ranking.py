"""How the index orders what a query matches: the weight of each field, the bonus for words of
a query that stand near each other, and what the words of an approximate or prefix word count.

Every word is scored by BM25 (tantivy's: k1 1.2, b 0.75) in each field that holds it, with
that field's statistics, so that a word in a short title counts more than one in a long text;
a word's score is the sum over its fields, each times the field's weight (``FIELD_WEIGHTS``),
and a query's the sum over its words. The weights are those a person reads a page by: its
title says what it is about, its keywords, description and headings nearly as much, its
running text least. Measured on the Python documentation (bench/relevance.py; bench/README.md,
"Relevance"): with bare words searching content only, transpositions, proximity and blending,
the MRR of its 69 queries went from 0.868 to 0.911; the weights alone move it by a query or
two (0.896-0.911 for a title of 1-3 and other metadata of 1-2).

Pure arithmetic: no engine.
"""

from __future__ import annotations

import math
from typing import Final

# A field's weight when a word names no attribute; every other field counts 1, as does every
# field a word names.
FIELD_WEIGHTS: Final = {
    "title": 3.0,
    "keywords": 2.0,
    "description": 2.0,
    "headings": 2.0,
    "author": 2.0,
}

# Each pair of plain words in a row of a query counts again where they stand near each other
# in a field: as a phrase with PROXIMITY_SLOP positions of slack (in order with up to 3 words
# between, or the other way round with up to 1), times the field's weight. Only for queries
# of up to PROXIMITY_WORDS plain words, and in fields where the rarer of the two is in at most
# PROXIMITY_DOCS objects: checking positions costs a look at every object holding both, and on
# 100,000 generated records pairs of common words took the p99 of two- and three-word queries
# from 2.5 to 39 ms; with this bound 2.4 (5,000: 4.2).
PROXIMITY_SLOP: Final = 3
PROXIMITY_WORDS: Final = 6
PROXIMITY_DOCS: Final = 2000


def field_weight(field: str) -> float:
    return FIELD_WEIGHTS.get(field, 1.0)


def near_weight(edits: int, df: int, most_df: int, documents: int) -> float:
    """What a word of an approximate or prefix word's expansion counts, found ``edits`` edits
    away and in ``df`` of ``documents`` objects, beside the commonest word of the expansion
    (in ``most_df``): 1 / (1 + edits), and its inverse document frequency blended with the
    commonest's (as Lucene's fuzzy queries): every word of an expansion is scored as if as
    common as the commonest, so that a rare misspelling or a rarer word (``asyncore`` for
    ``asyncoi~2``) does not outrank the word meant (``asyncio``) for being rare."""
    most_df = max(df, most_df)
    # (Deleted objects count in document frequencies until their segments merge.)
    documents = max(documents, most_df)
    return _idf(most_df, documents) / _idf(df, documents) / (1 + edits)


def _idf(df: int, documents: int) -> float:
    """BM25's inverse document frequency, as tantivy computes it (positive for df <=
    documents)."""
    return math.log(1 + (documents - df + 0.5) / (df + 0.5))
