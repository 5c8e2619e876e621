"""Text helpers every summarizer shares: decoding bytes, collapsing whitespace, cutting
abstracts at a character boundary, picking keywords, and packing attributes."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator

# Tried after the declared charsets: UTF-8 first (most text today), then cp1252, which
# decodes what 1990s Western pages mostly were; latin-1, which decodes any byte, is last.
_FALLBACK_CHARSETS = ("utf-8", "cp1252")

# Only this much of a text is scanned for keywords: it bounds the work on huge documents.
_KEYWORD_SCAN_CHARS = 1 << 20

_WORD = re.compile(r"[^\W\d_]{4,}")

# English words of four letters or more that say nothing about a document.
_STOPWORD_LIST = """
    about above after again against also although among another anything around because been
    before being below between both came cannot could does doing done down during each
    either else even ever every from further gets given goes going have having here hers
    herself himself however into itself just last less like made make many might more most
    much must myself near need neither never next none only onto other others ours ourselves
    over same shall should since some such than that their theirs them themselves then there
    these they this those though through thus till together under unless until upon used
    using very want well were what whatever when where whether which while whom whose will
    with within without would your yours yourself yourselves
"""
_STOPWORDS = frozenset(_STOPWORD_LIST.split())


def decode(data: bytes, *declared: str | None) -> str:
    """``data`` as text: the first declared charset that is known and fits, else UTF-8,
    cp1252 or latin-1. Never raises; a leading byte-order mark is dropped."""
    for charset in (*declared, *_FALLBACK_CHARSETS):
        if not charset:
            continue
        try:
            text = data.decode(charset)
        except (LookupError, ValueError):  # unknown or non-text codec; bytes that don't fit
            continue
        return text.removeprefix("\ufeff")
    return data.decode("latin-1")


def collapse(text: str) -> str:
    """``text`` with each run of whitespace (including no-break spaces) made one space."""
    return " ".join(text.split())


def utf8(text: str) -> bytes:
    """``text`` as UTF-8; a lone surrogate becomes ``?`` instead of raising."""
    return text.encode("utf-8", "replace")


def utf8_prefix(text: str, limit: int) -> bytes:
    """At most ``limit`` bytes of ``text`` in UTF-8, cut at a character boundary."""
    head = utf8(text[: max(limit, 0)])  # a character is at least one byte
    if len(head) <= limit:
        return head
    # The cut may split a multi-byte character; "ignore" drops only that trailing piece.
    return head[:limit].decode("utf-8", "ignore").encode("utf-8")


def chunks(text: str, size: int = 1 << 16) -> Iterator[str]:
    """``text`` in pieces of ``size`` characters, so consumers can stop early."""
    return (text[start : start + size] for start in range(0, len(text), size))


def abstract(pieces: Iterable[str], limit: int) -> bytes:
    """The first ``limit`` bytes of the concatenated ``pieces``, whitespace collapsed and
    cut at a character boundary; stops consuming ``pieces`` once it has enough."""
    buffer: list[str] = []
    size = 0
    check_at = limit  # collapsing only shrinks text: below ``limit`` there is never enough
    for piece in pieces:
        buffer.append(piece)
        size += len(piece)
        if size > check_at:
            head = collapse("".join(buffer))
            # Only the last word can still grow with more pieces, and it lies past ``limit``.
            if len(head) > limit:
                return utf8_prefix(head, limit)
            check_at = size * 2  # doubling keeps the re-collapsing linear overall
    return utf8_prefix(collapse("".join(buffer)), limit)


def leading_lines(text: str, limit: int) -> bytes:
    """The whole first lines of ``text`` that fit in ``limit`` bytes (leading blank lines
    skipped, trailing spaces dropped); a first line longer than ``limit`` is cut."""
    body = text.lstrip()
    # Whole lines within ``limit`` bytes lie within the first ``limit`` characters.
    head = body[: limit + 1]
    lines = head.splitlines(keepends=True)
    if len(body) > len(head) and lines and lines[-1].splitlines()[0] == lines[-1]:
        lines.pop()  # the slice cut it short: not a whole line
    kept: list[bytes] = []
    size = 0
    for line in lines:
        encoded = utf8(line.rstrip())
        if size + len(encoded) > limit:
            break
        kept.append(encoded)
        size += len(encoded) + 1
    if not kept:
        return utf8_prefix(body, limit)
    return b"\n".join(kept).rstrip()


def keywords(text: str, count: int) -> list[str]:
    """The ``count`` most frequent words of four or more letters, lowercased, without
    stopwords; ties go alphabetically so the result is deterministic."""
    words = Counter(_WORD.findall(text[:_KEYWORD_SCAN_CHARS].lower()))
    ranked = sorted(
        (word for word in words if word not in _STOPWORDS), key=lambda w: (-words[w], w)
    )
    return ranked[: max(count, 0)]


def attributes(*pairs: tuple[str, str | bytes]) -> tuple[tuple[str, bytes], ...]:
    """SOIF attributes from ``(name, value)`` pairs: text becomes UTF-8, empty values go."""
    packed = ((name, utf8(value) if isinstance(value, str) else value) for name, value in pairs)
    return tuple((name, value) for name, value in packed if value)
