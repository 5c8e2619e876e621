"""What the words of an approximate or prefix word count (broker/index/ranking.py)."""

from __future__ import annotations

import math

import pytest

from broker.index.ranking import near_weight


def test_the_commonest_word_asked_for_exactly_counts_in_full() -> None:
    assert near_weight(0, 40, 40, 100) == 1.0


def test_each_edit_counts_less() -> None:
    assert near_weight(1, 40, 40, 100) == pytest.approx(1 / 2)
    assert near_weight(2, 40, 40, 100) == pytest.approx(1 / 3)


def idf(df: int, documents: int) -> float:
    """BM25's, as tantivy computes it."""
    return math.log(1 + (documents - df + 0.5) / (df + 0.5))


@pytest.mark.parametrize("df", [1, 10, 90])
def test_a_rarer_word_is_scored_as_if_as_common_as_the_commonest(df: int) -> None:
    # BM25 multiplies by the word's inverse document frequency: weighted, it is the
    # commonest's.
    assert near_weight(0, df, 90, 100) * idf(df, 100) == pytest.approx(idf(90, 100))


def test_deleted_objects_counted_in_frequencies_keep_weights_positive() -> None:
    assert 0 < near_weight(1, 120, 130, 100) <= 1 / 2
