"""Keywords extracted from a document's own text, for pages that declare none: YAKE, the
unsupervised statistical method (Campos et al., 2020), by yake-rust, which gives the same
keywords as the Python ``yake`` package at a fifth of its time (bench/README.md, "Summaries
worth indexing").

Only the opening of the text is read (the title, headings and first paragraphs say what a page
is about; YAKE's time grows with the text), and stopwords are those of the page's language
where YAKE knows it, else English.
"""

from __future__ import annotations

from functools import cache

import yake_rust

# The languages yake-rust has stopwords for, by ISO 639-1 code; its name for Czech is "cz".
_STOPWORD_LANGUAGES = frozenset(
    {
        *("ar", "bg", "br", "cs", "da", "de", "el", "en", "es", "et", "fa", "fi", "fr", "hi"),
        *("hr", "hu", "hy", "id", "it", "ja", "lt", "lv", "nl", "no", "pl", "pt", "ro", "ru"),
        *("sk", "sl", "sv", "tr", "uk", "zh"),
    }
)
_YAKE_NAMES = {"cs": "cz"}
# Phrases of one or two words; longer ones are rarely what a searcher types.
_NGRAMS = 2
_TRAILING = ".,;:!?\"'()[]"
# A shorter text has too few words to tell the telling ones from the rest.
MIN_CHARS = 200
# About the first 250 words: a page's opening says what it is about (on Python's documentation
# the first 1,500 characters give nearly the keywords of the first 2,500, in 1.3 ms against 1.9).
SCAN_CHARS = 1500


def extract(text: str, language: str, count: int) -> list[str]:
    """Up to ``count`` keywords of ``text``, the most telling first, without repeats (case
    ignored); none for a text under ``MIN_CHARS``. ``language`` is a BCP 47 tag or empty."""
    if count <= 0 or len(text.strip()) < MIN_CHARS:
        return []
    found = _extractor(_stopword_language(language)).get_n_best(text[:SCAN_CHARS], n=count)
    keywords: dict[str, str] = {}
    for phrase, _score in found:
        phrase = phrase.strip(_TRAILING)  # YAKE keeps a sentence's full stop on its last word
        if phrase:
            keywords.setdefault(phrase.casefold(), phrase)
    return list(keywords.values())


def _stopword_language(tag: str) -> str:
    primary = tag.partition("-")[0].lower()
    return primary if primary in _STOPWORD_LANGUAGES else "en"


@cache
def _extractor(language: str) -> yake_rust.Yake:
    return yake_rust.Yake(language=_YAKE_NAMES.get(language, language), ngrams=_NGRAMS)
