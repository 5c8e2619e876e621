"""The search page's form as submitted, the query it asks, and the links the page makes from
it: other pages of the results, and the same search narrowed to a facet's value or no longer
narrowed. Pure: form fields in, values and URLs out.

Form fields: ``q`` (the query), ``title``, ``author``, ``keywords`` (each, when filled, ANDed
to the query as ``Title: (...)``), ``gatherer``, ``type``, ``date`` (facet choices, ANDed as
their terms: broker/facets.py), ``case`` (1: case-sensitive), ``n`` (results per page),
``start`` (offset of the page), ``federated`` (1: ask the brokers the HSR picks). A number
that is absent, no number or out of range falls back to its default or bound: a page made of
links should not answer a hand-edited URL with an error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from urllib.parse import urlencode

from broker import facets
from broker.facets import FacetName
from broker.federation.merge import MAX_RESULTS

# The attribute filters of the form: (field name, SOIF attribute).
FILTERS = (("title", "Title"), ("author", "Author"), ("keywords", "Keywords"))
PAGE_SIZES = (10, 20, 50, 100)
DEFAULT_PAGE_SIZE = 10
MAX_START = 10_000  # deeper pages cost the index more than anyone reads
AROUND = 2  # page links on each side of the current one


def combined_query(query: str, filters: Sequence[tuple[str, str]]) -> str:
    """The query the form asks before facet choices: ``query`` ANDed with ``Attribute:
    (value)`` for each filled filter."""
    terms = [f"{attribute}: ({value.strip()})" for attribute, value in filters if value.strip()]
    return facets.with_terms(query, terms)


def _number(params: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    text = params.get(name, "")
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        return default
    return max(lo, min(hi, int(text)))


def _checked(params: Mapping[str, str], name: str) -> bool:
    return params.get(name, "") in ("1", "on", "true")


@dataclass(frozen=True, slots=True)
class Form:
    """The form as submitted."""

    q: str
    filters: tuple[tuple[str, str, str], ...]  # (field, attribute, value)
    case: bool
    n: int
    start: int
    federated: bool = False
    chosen: tuple[tuple[FacetName, str], ...] = ()  # (facet, value), in facet order

    @classmethod
    def read(cls, params: Mapping[str, str], max_results: int) -> Form:
        n = _number(params, "n", min(DEFAULT_PAGE_SIZE, max_results), 1, max_results)
        federated = _checked(params, "federated")
        # A federated page is merged from the brokers' first results: it ends sooner.
        last_start = max(0, MAX_RESULTS - n) if federated else MAX_START
        return cls(
            q=params.get("q", ""),
            filters=tuple(
                (field, attribute, params.get(field, "")) for field, attribute in FILTERS
            ),
            case=_checked(params, "case"),
            n=n,
            start=_number(params, "start", 0, 0, last_start),
            federated=federated,
            chosen=tuple(facets.choices(params).items()),
        )

    @property
    def base_query(self) -> str:
        """The query before the facet choices."""
        return combined_query(self.q, [(attribute, value) for _, attribute, value in self.filters])

    def advanced(self, max_results: int) -> bool:
        """Whether an option beyond the query box is set (the page then shows them open)."""
        return (
            self.case
            or self.federated
            or self.n != min(DEFAULT_PAGE_SIZE, max_results)
            or any(value.strip() for _, _, value in self.filters)
        )

    def query(self, now: float) -> str:
        """The query the form asks (date choices bounded from ``now``, epoch seconds)."""
        return facets.with_terms(self.base_query, facets.chosen_terms(dict(self.chosen), now))

    def link(self, start: int = 0) -> str:
        """The URL of the same search at offset ``start``."""
        params: list[tuple[str, str]] = [("q", self.q)]
        params += [(field, value) for field, _, value in self.filters if value]
        params += list(self.chosen)
        if self.case:
            params.append(("case", "1"))
        if self.federated:
            params.append(("federated", "1"))
        params.append(("n", str(self.n)))
        if start:
            params.append(("start", str(start)))
        return "?" + urlencode(params)

    def choosing(self, facet: FacetName, value: str | None) -> str:
        """The URL of the search narrowed to ``value`` of ``facet`` instead of its choice
        (None: not narrowed by it), from the first page."""
        kept = {name: chosen for name, chosen in self.chosen if name != facet}
        if value is not None:
            kept[facet] = value
        chosen = tuple((name, kept[name]) for name in facets.NAMES if name in kept)
        return replace(self, chosen=chosen).link()


@dataclass(frozen=True, slots=True)
class PageLink:
    """A link to a page of results (``number`` from 1); None ``href``: the current page."""

    number: int
    href: str | None


def page_links(form: Form, offset: int, total: int) -> list[PageLink | None]:
    """Links to the first and last pages of ``total`` results and to those near the page at
    ``offset``; None stands for pages left out between them. No page starts past
    MAX_START."""
    size = form.n
    current = offset // size + 1
    last = max(current, min(math.ceil(total / size), MAX_START // size + 1))
    numbers = sorted({1, last, *range(max(1, current - AROUND), current + AROUND + 1)})
    links: list[PageLink | None] = []
    previous = 0
    for number in numbers:
        if number > last:
            break
        if number - previous > 1:
            links.append(None)
        links.append(
            PageLink(number, None if number == current else form.link((number - 1) * size))
        )
        previous = number
    return links
