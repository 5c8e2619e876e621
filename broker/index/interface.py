"""What the broker needs of a full-text index, and the values that cross it.

The collector, registry and query API use only this interface, so that a collection that
outgrows one machine can be served by a distributed engine (OpenSearch) later without touching
them. Every method may run in a thread: implementations must not block the event loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from broker.query.ast import Node


@dataclass(frozen=True, slots=True)
class IndexedObject:
    """One summary object as the index sees it.

    ``oid``: the registry's object id (stable, unique: URL + generating gatherer).
    ``attributes``: each SOIF attribute's value as text (UTF-8 decoded, errors replaced), in
    record order, attribute names as in the record, and the URL as the attribute ``URL``
    (broker/sync.py).
    ``update_time`` and ``file_size``: for numeric comparisons and sorting (None if absent).
    """

    oid: str
    url: str
    attributes: tuple[tuple[str, str], ...]
    update_time: float | None = None
    file_size: int | None = None

    def __repr__(self) -> str:
        return f"IndexedObject({self.oid!r}, {self.url!r}, {len(self.attributes)} attributes)"


@dataclass(frozen=True, slots=True)
class Hit:
    """One matching object: its score (higher is better) and, per matching attribute, a
    snippet of plain text with the matched words wrapped in ``\\x02`` ... ``\\x03`` markers
    (the caller turns them into ``<mark>`` or terminal bold after escaping the text)."""

    oid: str
    score: float
    snippets: tuple[tuple[str, str], ...] = ()


# An approximate word's token and errors, and the words it became in the index.
NearWords = Mapping[tuple[str, int], frozenset[str]]


@dataclass(frozen=True, slots=True)
class Results:
    """``total`` matching objects; ``hits`` the requested page of them, best first.
    ``near``: the words each approximate word became, where the engine chose among the words
    within its errors (its snippets mark no others)."""

    total: int
    hits: tuple[Hit, ...]
    near: NearWords = field(default_factory=dict)


class Index(Protocol):
    """A full-text index of summary objects, keyed by ``oid``."""

    @property
    def unfilled(self) -> bool:
        """Whether the index has yet to be filled from the registry: it was created empty when
        opened (there was none, or one the engine could not use), or by an earlier open and
        ``filled`` was not called since (filling it was cut short)."""

    async def filled(self) -> None:
        """Record (durably) that the caller has filled the index from the registry."""

    async def add(self, objects: Sequence[IndexedObject]) -> None:
        """Add objects, replacing any with the same oid (visible after ``commit``)."""

    async def remove(self, oids: Sequence[str]) -> None:
        """Remove objects by oid (unknown oids are ignored; visible after ``commit``)."""

    async def commit(self) -> None:
        """Make the changes so far durable and searchable."""

    async def search(self, query: Node, *, limit: int, offset: int = 0) -> Results:
        """The objects matching ``query``, best first, ``limit`` of them from ``offset``."""

    async def oids(self) -> set[str]:
        """Every oid in the index (for garbage collection against the registry)."""

    async def count(self) -> int:
        """How many objects the index holds."""

    async def clear(self) -> None:
        """Remove every object, those added since the last commit too (visible after
        ``commit``: until then searches see the objects of the last commit, so a rebuild
        replaces the index at once)."""

    async def rollback(self) -> None:
        """Drop every change made since the last commit."""

    async def close(self) -> None:
        """Release the engine's resources."""
