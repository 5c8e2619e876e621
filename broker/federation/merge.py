"""Federated results: each broker's answer read from its JSON and checked (another broker is
not trusted: every value is checked, every length bounded, its snippets' HTML taken apart
into text and marks), and the answers merged into one page.

No I/O: the answers in, the page out.

**Comparable scores.** A broker's scores are BM25 over its own objects, so the same score
means different things at two brokers. As in CORI's merging (Callan, Lu and Croft, 1995),
each broker's scores are scaled to [0, 1] between the lowest and highest it returned
(``d``), and weighed by how good a source the HSR judged the broker for this query (``c``,
its estimate's logarithm scaled to [0, 1] among the brokers asked): ``(d + 0.4 d c) / 1.4``.
Results are deduplicated by URL: the best-scored copy is kept, and the other brokers that
returned the URL are named with it.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from broker.federation.route import Ranked
from broker.search import Result
from broker.snippets import END, START

Outcome = Literal["answered", "late", "failed"]

MAX_RESULTS = 1000  # results one broker's answer may hold
MAX_SNIPPETS = 10
MAX_TEXT = 10_000  # characters of a title, snippet, URL, oid, name
MERGE_WEIGHT = 0.4  # CORI's
_MARK = re.compile(r"(</?mark>)")


@dataclass(frozen=True, slots=True)
class Answer:
    """What came of asking one broker: its results (``answered``), nothing in time
    (``late``) or an error (``failed``, ``error`` says what)."""

    broker: Ranked
    outcome: Outcome
    seconds: float
    total: int = 0
    results: tuple[Result, ...] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Merged:
    """One result of a federated page: the broker's own result, its merged ``score``, the
    broker it came from and the others that returned the same URL."""

    result: Result
    score: float
    broker: Ranked
    also: tuple[Ranked, ...] = ()


@dataclass(frozen=True, slots=True)
class FederatedPage:
    """One page of merged results. ``total``: the sum of the totals the brokers that
    answered reported (a URL two brokers hold counts twice); ``more``: results go on past
    this page."""

    query: str
    total: int
    offset: int
    limit: int
    results: tuple[Merged, ...]
    answers: tuple[Answer, ...]
    more: bool


class MalformedAnswer(ValueError):
    """A broker's answer that is not a search page (refused: nothing of it is used)."""


def html_parts(snippet_html: str) -> list[tuple[str, bool]]:
    """A snippet as the search API writes it (escaped text, ``<mark>`` around matches) as
    (text, marked) parts; any other markup stays text."""
    parts: list[tuple[str, bool]] = []
    marked = False
    for piece in _MARK.split(snippet_html):
        if piece in ("<mark>", "</mark>"):
            marked = piece == "<mark>"
            continue
        if text := html.unescape(piece):
            parts.append((text, marked))
    return parts


def marked_text(parts: Sequence[tuple[str, bool]]) -> str:
    """Parts as the broker's own snippets hold them (marks as control characters)."""
    out = []
    for text, marked in parts:
        plain = text.replace(START, "").replace(END, "")
        out.append(f"{START}{plain}{END}" if marked else plain)
    return "".join(out)


def _text(item: Mapping[str, Any], key: str, *, empty: bool = True) -> str:
    value = item.get(key)
    if not isinstance(value, str) or len(value) > MAX_TEXT or (not empty and not value):
        raise MalformedAnswer(f"{key} must be a string of at most {MAX_TEXT} characters")
    return value


def _number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise MalformedAnswer(f"{key} must be a finite number")
    return float(value)


def _result(item: Any) -> Result:
    if not isinstance(item, Mapping):
        raise MalformedAnswer("a result must be an object")
    snippets = item.get("snippets", [])
    if not isinstance(snippets, list) or len(snippets) > MAX_SNIPPETS:
        raise MalformedAnswer(f"snippets must be a list of at most {MAX_SNIPPETS}")
    update_time = item.get("update_time")
    return Result(
        oid=_text(item, "oid"),
        url=_text(item, "url", empty=False),
        title=_text(item, "title"),
        gatherer=_text(item, "gatherer"),
        template=_text(item, "template"),
        score=_number(item.get("score"), "score"),
        snippets=tuple(_snippet(s) for s in snippets),
        update_time=None if update_time is None else _number(update_time, "update_time"),
    )


def _snippet(item: Any) -> tuple[str, str]:
    if not isinstance(item, Mapping):
        raise MalformedAnswer("a snippet must be an object")
    return _text(item, "attribute"), marked_text(html_parts(_text(item, "html")))


def search_answer(answer: Any) -> tuple[int, tuple[Result, ...]]:
    """The total and the results of a broker's ``/api/search`` JSON; MalformedAnswer when
    it is not one."""
    if not isinstance(answer, Mapping):
        raise MalformedAnswer("the answer must be a JSON object")
    total = answer.get("total")
    results = answer.get("results")
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise MalformedAnswer("total must be a whole number")
    if not isinstance(results, list) or len(results) > MAX_RESULTS:
        raise MalformedAnswer(f"results must be a list of at most {MAX_RESULTS}")
    return total, tuple(_result(item) for item in results)


def route_answer(answer: Any) -> list[Ranked]:
    """The brokers of the HSR's ``/api/hsr/route`` JSON, best first; MalformedAnswer when
    it is not one."""
    brokers = answer.get("brokers") if isinstance(answer, Mapping) else None
    if not isinstance(brokers, list) or len(brokers) > MAX_RESULTS:
        raise MalformedAnswer(f"brokers must be a list of at most {MAX_RESULTS}")
    out = []
    for item in brokers:
        if not isinstance(item, Mapping) or not isinstance(item.get("evidence"), bool):
            raise MalformedAnswer("a broker must be an object with evidence true or false")
        url = _text(item, "url", empty=False)
        if not url.startswith(("http://", "https://")):
            raise MalformedAnswer(f"a broker's URL must be http:// or https://, got {url[:80]!r}")
        documents = item.get("documents")
        if isinstance(documents, bool) or not isinstance(documents, int) or documents < 0:
            raise MalformedAnswer("a broker's documents must be a whole number")
        out.append(
            Ranked(
                url=url,
                name=_text(item, "name"),
                estimate=_number(item.get("estimate"), "estimate"),
                documents=documents,
                evidence=item["evidence"],
                reason=_text(item, "reason"),
            )
        )
    return out


def chosen(ranked: Sequence[Ranked], most: int) -> list[Ranked]:
    """The brokers to ask: up to ``most`` of those whose summaries hold a word of the
    query, or when none does (summaries list only the commonest words), the first ``most``."""
    telling = [b for b in ranked if b.evidence]
    return list((telling or list(ranked))[:most])


def _weights(asked: Sequence[Ranked]) -> dict[str, float]:
    """Each broker's estimate as a weight in [0, 1] among those asked (log-scaled: one
    broker with ten times the matches is not ten times the better source)."""
    logs = {b.url: math.log1p(max(0.0, b.estimate)) for b in asked}
    low, high = min(logs.values(), default=0.0), max(logs.values(), default=0.0)
    if high == low:
        return dict.fromkeys(logs, 1.0)
    return {url: (value - low) / (high - low) for url, value in logs.items()}


def merged_page(query: str, answers: Sequence[Answer], offset: int, limit: int) -> FederatedPage:
    """The page from ``offset`` of the merged results of ``answers`` (each broker having
    been asked for its first ``offset + limit``)."""
    weights = _weights([a.broker for a in answers])
    order = {a.broker.url: n for n, a in enumerate(answers)}
    best: dict[str, Merged] = {}
    others: dict[str, list[Ranked]] = {}
    answered = [a for a in answers if a.outcome == "answered"]
    for answer in answered:
        scores = [r.score for r in answer.results]
        low, high = min(scores, default=0.0), max(scores, default=0.0)
        weight = weights[answer.broker.url]
        for result in answer.results:
            scaled = 1.0 if high == low else (result.score - low) / (high - low)
            score = (scaled + MERGE_WEIGHT * scaled * weight) / (1 + MERGE_WEIGHT)
            held = best.get(result.url)
            if held is None or score > held.score:
                if held is not None:
                    others.setdefault(result.url, []).append(held.broker)
                best[result.url] = Merged(result, score, answer.broker)
            else:
                others.setdefault(result.url, []).append(answer.broker)
    ranked = sorted(best.values(), key=lambda m: (-m.score, order[m.broker.url], m.result.url))
    end = offset + limit
    page = tuple(
        Merged(m.result, m.score, m.broker, tuple(others.get(m.result.url, ())))
        for m in ranked[offset:end]
    )
    return FederatedPage(
        query=query,
        total=sum(a.total for a in answered),
        offset=offset,
        limit=limit,
        results=page,
        answers=tuple(answers),
        more=len(ranked) > end or any(a.total > end for a in answered),
    )
