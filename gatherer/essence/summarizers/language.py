"""The language of a text a document does not declare one for, by lingua (its low-accuracy
mode: the trigram models, reliable on a paragraph or more and a quarter of the memory of the
full ones). The detector is built on first use, so a worker whose documents all declare their
language never loads its models (about 50 MB)."""

from __future__ import annotations

from functools import cache

from lingua import LanguageDetector, LanguageDetectorBuilder

# Shorter texts are guessed at too often to be worth an attribute.
MIN_CHARS = 200
# More adds time, not certainty.
SCAN_CHARS = 2000


def detect(text: str) -> str:
    """The ISO 639-1 code of ``text``'s language, or empty when it is too short or unclear."""
    sample = text[:SCAN_CHARS]
    if len(sample.strip()) < MIN_CHARS:
        return ""
    found = _detector().detect_language_of(sample)
    return found.iso_code_639_1.name.lower() if found is not None else ""


@cache
def _detector() -> LanguageDetector:
    return LanguageDetectorBuilder.from_all_languages().with_low_accuracy_mode().build()
