"""Facets: what the objects matching a query are, by gatherer (``Gatherer-Name``), by type
(``Type``) and by date (``Update-Time``), each value with how many of them it holds and the
query term that narrows the query to it.

**Which date.** ``Update-Time``: every record carries it (the gatherer writes it when it
summarises a document, gatherer/records.py), and the index holds it as a number, so a date
bucket is one range count on a fast field. ``Date-Published`` and ``Date-Modified`` are only
on the HTML and PDF documents that declare them, as text the index cannot compare: buckets of
them would leave most objects out and cost a check of every candidate.

**How counted.** A value's count is the index's total for the query ANDed with the value's
term (no hits fetched): the very query that following the value runs, so the count is what
the narrowed page says. Which values are counted: the ``TOP`` commonest among the ``SAMPLE``
best matches (their records, read from the registry), unless those are all the matches the
``TOP`` the collection holds most too (a uniform sample of ``CATALOGUE`` objects, read again
after the registry changes: the best matches rank some values low, as a common word's
matches in Text files come after the HTML pages that hold it in more fields), and a value
chosen already; of these the ``TOP`` with most
matches are listed. The date has four fixed buckets. A facet's counts are of the query
narrowed by the *other* facets' choices, so that the alternatives to its own choice stay
offered, each with its count.

Tantivy could count every value in one pass over fast fields, but that needs fields of the
index's own; counting through ``Index.search`` needs nothing beyond the interface. Measured
on 20,000 generated records (bench/broker_facets.py, bench/README.md "Broker facets").

**Bounds.** ``SAMPLE`` records read per scope, ``CATALOGUE`` per registry change, at most
2 x ``TOP`` values per facet counted, all within ``SECONDS``: counts not made by then are left
out and ``Facets.complete`` says so. Queries the index can only narrow down (regular
expressions, case-sensitive words: broker/match.py) are counted by the index alone, so their
counts are estimates (``Facets.exact`` is False).

The choices, terms, scopes and rankings are pure functions; ``FacetCounter`` asks the index
and the registry.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from broker.index.interface import Index
from broker.match import needs_check
from broker.query.ast import And, Compare, Node, Phrase, Word
from broker.query.parser import describe, parse
from broker.registry import Registry
from harvest_common.soif import Record

SAMPLE: Final = 100  # best matches whose records say which values to count
CATALOGUE: Final = 1_000  # objects sampled for the values the collection holds most
TOP: Final = 8  # values shown per facet, besides a chosen one
SECONDS: Final = 1.0  # for sampling and counting, per query
WORKERS: Final = 2  # counts asked of the index at a time (its search threads)
MAX_VALUE_CHARS: Final = 100  # longer values are not offered (a query has 1,000 at most)

DAY: Final = 86_400.0
UPDATE_TIME: Final = "Update-Time"

FacetName = Literal["gatherer", "type", "date"]


@dataclass(frozen=True, slots=True)
class Bucket:
    """A date bucket: objects updated within ``seconds`` before now (``op`` ``>=``), or
    longer ago (``<``)."""

    key: str
    label: str
    op: Literal[">=", "<"]
    seconds: float


BUCKETS: Final = (
    Bucket("week", "Past week", ">=", 7 * DAY),
    Bucket("month", "Past month", ">=", 30 * DAY),
    Bucket("year", "Past year", ">=", 365 * DAY),
    Bucket("older", "Older", "<", 365 * DAY),
)
_BUCKETS: Final = {bucket.key: bucket for bucket in BUCKETS}


@dataclass(frozen=True, slots=True)
class FacetKind:
    """One facet: its name (the page's form field), title and the attribute it groups by."""

    name: FacetName
    title: str
    attribute: str


FACETS: Final = (
    FacetKind("gatherer", "Gatherer", "Gatherer-Name"),
    FacetKind("type", "Type", "Type"),
    FacetKind("date", "Updated", UPDATE_TIME),
)
NAMES: Final = tuple(kind.name for kind in FACETS)


@dataclass(frozen=True, slots=True)
class Value:
    """One value of a facet: ``value`` as records hold it (a bucket's key for dates),
    ``label`` as shown, ``term`` the query text that narrows to it, ``count`` the matches
    it holds, ``chosen`` whether the query is narrowed to it now."""

    value: str
    label: str
    term: str
    count: int
    chosen: bool = False


@dataclass(frozen=True, slots=True)
class Facet:
    """A facet's values, most matches first; ``more``: values with fewer matches were left
    out."""

    kind: FacetKind
    values: tuple[Value, ...]
    more: bool = False

    def __repr__(self) -> str:
        counts = ", ".join(f"{v.value}={v.count}" for v in self.values)
        return f"Facet({self.kind.name}: {counts}{', ...' if self.more else ''})"


@dataclass(frozen=True, slots=True)
class Facets:
    """Every facet of one query. ``exact``: counts are the index's exact totals (else
    estimates, for queries checked object by object); ``complete``: no count was left out
    for lack of time."""

    facets: tuple[Facet, ...]
    exact: bool
    complete: bool


# -- pure: choices, terms and scopes -----------------------------------------------------


def offered(value: str) -> str | None:
    """``value`` as a facet offers it (whitespace runs made one space), or None when no term
    can narrow to it: empty, without a letter or digit, or too long."""
    value = " ".join(value.split())
    if not value or len(value) > MAX_VALUE_CHARS or not any(ch.isalnum() for ch in value):
        return None
    return value


def choices(given: Mapping[str, str]) -> dict[FacetName, str]:
    """The facet choices among ``given`` (form fields: facet name → value), each as offered;
    unknown facets, date buckets and values no term narrows to are left out."""
    kept: dict[FacetName, str] = {}
    for name in NAMES:
        value = given.get(name, "")
        clean = (value if value in _BUCKETS else None) if name == "date" else offered(value)
        if clean is not None:
            kept[name] = clean
    return kept


def term(facet: FacetName, value: str, now: float) -> str:
    """The query term that narrows a query to ``value`` of ``facet`` (as ``choices`` keeps
    it; a date bucket's key, its bound from ``now``, epoch seconds)."""
    if facet == "date":
        bucket = _BUCKETS[value]
        return describe(Compare(UPDATE_TIME, bucket.op, float(int(now - bucket.seconds))))
    attribute = "Gatherer-Name" if facet == "gatherer" else "Type"
    words = tuple(value.split())
    if len(words) == 1:  # canonical: a word unquoted unless it must be
        return describe(Word(words[0], attribute))
    return describe(Phrase(words, attribute))


def label(facet: FacetName, value: str) -> str:
    """How a chosen value is shown."""
    return _BUCKETS[value].label if facet == "date" else value


def chosen_terms(
    chosen: Mapping[FacetName, str], now: float, *, but: FacetName | None = None
) -> list[str]:
    """The terms of ``chosen`` (as ``choices`` keeps them), in facet order, but ``but``'s."""
    return [term(name, chosen[name], now) for name in NAMES if name in chosen and name != but]


def with_terms(query: str, terms: Sequence[str]) -> str:
    """``query`` ANDed with ``terms``; the query is parenthesized only when terms follow (so
    that ``a OR b`` stays one operand): alone it is kept as typed, and error positions point
    into it."""
    query = query.strip()
    if not terms:
        return query
    return " AND ".join([f"({query})", *terms] if query else terms)


def commonest(values: Iterable[str], top: int) -> tuple[list[str], bool]:
    """The ``top`` commonest of ``values`` (ties alphabetically), and whether there were
    others."""
    counts = Counter(values)
    ranked = sorted(counts, key=lambda v: (-counts[v], v))
    return ranked[:top], len(ranked) > top


def ranked(values: Iterable[Value], kind: FacetKind, top: int) -> tuple[tuple[Value, ...], bool]:
    """Values as a facet lists them: dates in bucket order, others the ``top`` with most
    matches (ties alphabetically) and a chosen one; values with no match are left out
    unless chosen. Also whether values with matches were cut."""
    kept = [v for v in values if v.count or v.chosen]
    if kind.name == "date":
        order = {bucket.key: n for n, bucket in enumerate(BUCKETS)}
        return tuple(sorted(kept, key=lambda v: order[v.value])), False
    kept.sort(key=lambda v: (-v.count, v.label.casefold(), v.label))
    listed = kept[:top] + [v for v in kept[top:] if v.chosen]
    return tuple(listed), len(listed) < len(kept)


def candidates(*groups: Iterable[str]) -> list[str]:
    """The values of ``groups``, each once, in order."""
    return list(dict.fromkeys(value for group in groups for value in group))


# -- the driver ---------------------------------------------------------------------------

# Gatherer-Name and Type of a record, as offered (None: not offered).
Row = tuple[str | None, str | None]
_COLUMN: Final = {"gatherer": 0, "type": 1}


def _row(record: Record) -> Row:
    return (offered(record.text("Gatherer-Name") or ""), offered(record.text("Type") or ""))


def _values(rows: Iterable[Row], facet: str) -> Iterator[str]:
    column = _COLUMN[facet]
    return (value for row in rows if (value := row[column]) is not None)


@dataclass(frozen=True, slots=True)
class _Job:
    kind: FacetKind
    value: str
    node: Node


@dataclass(frozen=True, slots=True)
class Bounds:
    """What counting one query's facets may cost (the module's docstring says why)."""

    sample: int = SAMPLE
    catalogue: int = CATALOGUE
    top: int = TOP
    seconds: float = SECONDS


class FacetCounter:
    """Counts facets with an index and the registry it indexes. ``changed()`` returns a value
    that is replaced when the registry changes (the broker's ChangeSignal.current): the
    values the collection holds most are read again then. Objects of collection
    ``excluding`` (the HSR's registrations) are left out of those."""

    def __init__(
        self,
        registry: Registry,
        index: Index,
        *,
        changed: Callable[[], object],
        excluding: str = "",
        bounds: Bounds = Bounds(),
    ) -> None:
        self._registry = registry
        self._index = index
        self._changed = changed
        self._excluding = excluding
        self._bounds = bounds
        self._catalogue: tuple[object, dict[str, list[str]]] | None = None
        self._reading = asyncio.Lock()

    async def count(
        self,
        query: str,
        *,
        chosen: Mapping[FacetName, str],
        case_sensitive: bool = False,
        now: float,
    ) -> Facets:
        """The facets of ``query`` (the text before any choice) narrowed by ``chosen`` (as
        ``choices`` keeps them), dates bucketed from ``now`` (epoch seconds).
        QuerySyntaxError if the query does not parse."""
        deadline = time.monotonic() + self._bounds.seconds
        base = parse(query, case_sensitive=case_sensitive) if query.strip() else None
        common = await self._commonest()
        samples: dict[tuple[str, ...], tuple[list[Row], bool]] = {}
        jobs: list[_Job] = []
        sampled_more: dict[FacetName, bool] = {}
        for kind in FACETS:
            others = tuple(chosen_terms(chosen, now, but=kind.name))
            scope = _scope(base, others, case_sensitive)
            own = [chosen[kind.name]] if kind.name in chosen else []
            if kind.name == "date":
                values = [bucket.key for bucket in BUCKETS]
                sampled_more[kind.name] = False
            else:
                found: list[str] = []
                whole = False  # the sample holds every match: no other value matches
                if scope is not None and time.monotonic() <= deadline:
                    if others not in samples:
                        samples[others] = await self._sampled(scope)
                    rows, whole = samples[others]
                    found, more = commonest(_values(rows, kind.name), self._bounds.top)
                    sampled_more[kind.name] = more
                values = candidates(found, [] if whole else common[kind.name], own)
            for value in values:
                node = parse(term(kind.name, value, now), case_sensitive=case_sensitive)
                jobs.append(_Job(kind, value, _narrowed(scope, node)))
        counts = await self._counts(jobs, deadline)
        facets = []
        for kind in FACETS:
            counted = [
                Value(
                    job.value,
                    label(kind.name, job.value),
                    term(kind.name, job.value, now),
                    counts[n],
                    job.value == chosen.get(kind.name),
                )
                for n, job in enumerate(jobs)
                if job.kind == kind and n in counts
            ]
            listed, cut = ranked(counted, kind, self._bounds.top)
            facets.append(Facet(kind, listed, cut or sampled_more.get(kind.name, False)))
        exact = not any(needs_check(job.node) for job in jobs)
        return Facets(tuple(facets), exact=exact, complete=len(counts) == len(jobs))

    async def _sampled(self, scope: Node) -> tuple[list[Row], bool]:
        """The values of the best matches of ``scope``, and whether those are all of them."""
        found = await self._index.search(scope, limit=self._bounds.sample)
        stored = await self._registry.get_many(hit.oid for hit in found.hits)
        return [_row(item.record) for item in stored.values()], found.total <= len(found.hits)

    async def _commonest(self) -> dict[str, list[str]]:
        """The ``top`` values of each facet that the collection holds most, from a uniform
        sample of its objects, read again after the registry changed: the best matches of
        a query rank some values low (a word's matches in Text files after the HTML pages
        that hold it in more fields), so these are counted too."""
        token = self._changed()
        async with self._reading:
            if self._catalogue is None or self._catalogue[0] is not token:
                total = await self._registry.count()
                size = self._bounds.catalogue
                share = size / total if total else 1.0
                sample = await self._registry.sample(share, limit=size, excluding=self._excluding)
                rows = [_row(record) for _, record in sample]
                self._catalogue = (
                    token,
                    {name: commonest(_values(rows, name), self._bounds.top)[0] for name in _COLUMN},
                )
            return self._catalogue[1]

    async def _counts(self, jobs: Sequence[_Job], deadline: float) -> dict[int, int]:
        """The index's total for each job's query (by position), those begun before
        ``deadline``: ``WORKERS`` at a time, so that a count cut short leaves no work behind
        in the index's threads."""
        counts: dict[int, int] = {}
        pending: Iterator[tuple[int, _Job]] = iter(enumerate(jobs))

        async def worker() -> None:
            for n, job in pending:
                if time.monotonic() > deadline:
                    return
                counts[n] = (await self._index.search(job.node, limit=0)).total

        async with asyncio.TaskGroup() as group:
            for _ in range(WORKERS):
                group.create_task(worker())
        return counts


def _scope(base: Node | None, terms: Sequence[str], case_sensitive: bool) -> Node | None:
    """The query a facet counts within: ``base`` narrowed by the other facets' terms."""
    nodes = [parse(t, case_sensitive=case_sensitive) for t in terms]
    items = ([base] if base is not None else []) + nodes
    if not items:
        return None
    return items[0] if len(items) == 1 else And(tuple(items))


def _narrowed(scope: Node | None, node: Node) -> Node:
    return node if scope is None else And((scope, node))
