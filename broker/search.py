"""Answers a query: parse it, ask the index, check what the index can only narrow down, and
describe each result from the registry (title, URL, gatherer, snippets).

Regular expressions on whole values and case-sensitive words are beyond the index: it returns
a superset, which is read in chunks and checked object by object (broker.match) until the page
is full; at most MAX_CHECKED candidates are checked per query, for at most CHECK_SECONDS, and
then the total is a lower bound (``Page.exact`` is False). Checking and snippets run on worker
threads (RE2 lets go of the GIL while it matches), so a costly query holds up no other.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from broker.index.interface import Index, NearWords
from broker.match import matches, needs_check
from broker.query.ast import Node
from broker.query.parser import describe, parse
from broker.registry import Registry, Stored
from broker.snippets import snippets
from broker.sync import attributes_text

CHUNK = 256
MAX_CHECKED = 10_000
# Seconds one query may spend checking candidates and marking snippets. Linear time is not
# little time: RE2 takes 117 ms for /(.*){20}y/ over one value of 100,000 characters.
CHECK_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class Result:
    """One object in a result list."""

    oid: str
    url: str
    title: str
    gatherer: str
    template: str
    score: float
    snippets: tuple[tuple[str, str], ...]
    update_time: float | None

    def __repr__(self) -> str:
        return f"Result({self.url!r}, {self.score:.2f})"


@dataclass(frozen=True, slots=True)
class Page:
    """One page of results: ``total`` matches (a lower bound unless ``exact``)."""

    query: str
    total: int
    exact: bool
    offset: int
    limit: int
    results: tuple[Result, ...]


class Searcher:
    """Queries over one registry and its index."""

    def __init__(
        self, registry: Registry, index: Index, *, check_seconds: float = CHECK_SECONDS
    ) -> None:
        self._registry = registry
        self._index = index
        self._check_seconds = check_seconds

    async def search(
        self, text: str, *, limit: int, offset: int = 0, case_sensitive: bool = False
    ) -> Page:
        """The page of results for ``text`` (QuerySyntaxError if it does not parse)."""
        node = parse(text, case_sensitive=case_sensitive)
        deadline = time.monotonic() + self._check_seconds
        if needs_check(node):
            scored, total, exact, near = await self._checked(node, limit, offset, deadline)
        else:
            found = await self._index.search(node, limit=limit, offset=offset)
            stored = await self._registry.get_many([hit.oid for hit in found.hits])
            scored = [(stored[h.oid], h.score) for h in found.hits if h.oid in stored]
            total, exact, near = found.total, True, found.near
        # Snippets run the query's regular expressions too: off the event loop.
        results = await asyncio.to_thread(_results, node, scored, near, deadline)
        return Page(describe(node), total, exact, offset, limit, results)

    async def _checked(
        self, node: Node, limit: int, offset: int, deadline: float
    ) -> tuple[list[tuple[Stored, float]], int, bool, NearWords]:
        """Read candidates in chunks, keep those that really match: the requested page, the
        number of matches seen, whether that number is exact, and the words approximate
        words became."""
        kept: list[tuple[Stored, float]] = []
        matched = 0
        start = 0
        near: NearWords = {}
        while start < MAX_CHECKED:
            found = await self._index.search(node, limit=CHUNK, offset=start)
            near = found.near
            stored = await self._registry.get_many([hit.oid for hit in found.hits])
            candidates = [(stored[h.oid], h.score) for h in found.hits if h.oid in stored]
            # Regular expressions over whole values are CPU work: off the event loop.
            checked, matching = await asyncio.to_thread(_matching, node, candidates, deadline)
            for item, score in matching:
                if offset <= matched < offset + limit:
                    kept.append((item, score))
                matched += 1
            if checked < len(candidates):  # out of time
                return kept, matched, False, near
            start += CHUNK
            if start >= found.total:
                return kept, matched, True, near
        return kept, matched, False, near


def _matching(
    node: Node, candidates: list[tuple[Stored, float]], deadline: float
) -> tuple[int, list[tuple[Stored, float]]]:
    """How many of ``candidates`` were checked before ``deadline`` (monotonic), and those of
    them that match."""
    kept: list[tuple[Stored, float]] = []
    for checked, (stored, score) in enumerate(candidates):
        if time.monotonic() > deadline:
            return checked, kept
        if matches(node, attributes_text(stored.record)):
            kept.append((stored, score))
    return len(candidates), kept


def _results(
    node: Node, scored: Sequence[tuple[Stored, float]], near: NearWords, deadline: float
) -> tuple[Result, ...]:
    """The results, with snippets while time is left before ``deadline`` (monotonic)."""
    return tuple(
        _result(node, stored, score, near, snippets_too=time.monotonic() <= deadline)
        for stored, score in scored
    )


def _result(
    node: Node, stored: Stored, score: float, near: NearWords, *, snippets_too: bool
) -> Result:
    record = stored.record
    return Result(
        oid=stored.oid,
        url=stored.url,
        title=record.text("Title") or stored.url,
        gatherer=stored.gatherer,
        template=record.template,
        score=score,
        snippets=snippets(node, attributes_text(record), near) if snippets_too else (),
        update_time=stored.update_time,
    )
