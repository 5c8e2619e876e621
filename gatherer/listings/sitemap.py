"""XML sitemaps and sitemap indexes (sitemaps.org protocol 0.9), read with the standard
library's expat in chunks as they are gunzipped: bytes in, entries out.

Defused: a DOCTYPE (so any entity declaration, the stuff of entity-expansion bombs and
external entities) ends reading, as sitemaps never need one; the input is held to 50 MB
uncompressed and 50,000 entries, and reading stops at either limit with the entries so far.
A ``<loc>`` counts only in the root element's namespace (an image's ``<image:loc>`` is not a
page); ``<lastmod>`` gives the entry's date. Locations are kept as written (the frontier
normalizes what it is offered), each once. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from xml.parsers import expat

from gatherer.errors import ListingError
from gatherer.listings.model import (
    MAX_ENTRIES,
    MAX_URL_LENGTH,
    Entry,
    Listing,
    ListingKind,
    absolute,
    w3c_date,
)

_SEPARATOR = " "  # expat names a namespaced element "namespace local"
_ENTRY_ELEMENTS = {"urlset": "url", "sitemapindex": "sitemap"}
_FIELDS = frozenset({"loc", "lastmod"})


class _Stop(Exception):
    """Raised from a handler to end reading: expat passes it out of ``Parse``."""

    def __init__(self, problem: ListingError) -> None:
        self.problem = problem


class _Reader:
    """The expat handlers' state: where in the document we are and what was read."""

    def __init__(self, base: str, now: float) -> None:
        self.base = base
        self.now = now
        self.kind: ListingKind | None = None
        self.namespace = ""
        self.entry_element = ""
        self.entries: dict[str, Entry] = {}  # by URL: each once, the first date kept
        self.depth = 0  # elements open
        self.in_entry = False
        self.field: str | None = None  # "loc" or "lastmod" while inside one (in an entry)
        self.text: list[str] = []
        self.text_length = 0
        self.loc: str | None = None
        self.lastmod: str | None = None

    def start(self, name: str, _attributes: object) -> None:
        self.depth += 1
        namespace, _, local = name.rpartition(_SEPARATOR)
        if self.depth == 1:
            sitemaps_namespace = not namespace or "/sitemap" in namespace
            if local not in _ENTRY_ELEMENTS or not sitemaps_namespace:
                raise _Stop(ListingError("not_listing", f"root element {local!r} is no sitemap"))
            self.kind = ListingKind.SITEMAP if local == "urlset" else ListingKind.SITEMAP_INDEX
            self.namespace = namespace
            self.entry_element = _ENTRY_ELEMENTS[local]
        elif namespace != self.namespace:
            return
        elif self.depth == 2 and local == self.entry_element:
            self.in_entry = True
            self.loc = self.lastmod = None
        elif self.depth == 3 and self.in_entry and local in _FIELDS:
            self.field = local
            self.text, self.text_length = [], 0

    def characters(self, data: str) -> None:
        if self.field is not None and self.text_length <= MAX_URL_LENGTH:
            self.text.append(data)
            self.text_length += len(data)

    def end(self, _name: str) -> None:
        self.depth -= 1
        if self.field is not None and self.depth == 2:
            value = "".join(self.text) if self.text_length <= MAX_URL_LENGTH else None
            if self.field == "loc":
                self.loc = value
            else:
                self.lastmod = value
            self.field = None
        elif self.in_entry and self.depth == 1:
            self.in_entry = False
            self._add()

    def _add(self) -> None:
        url = absolute(self.base, self.loc) if self.loc else None
        if url is None or url in self.entries:
            return
        if len(self.entries) == MAX_ENTRIES:
            raise _Stop(ListingError("too_many", f"more than {MAX_ENTRIES} entries"))
        modified = w3c_date(self.lastmod, self.now) if self.lastmod else None
        self.entries[url] = Entry(url, modified)


def _refuse(what: str) -> Callable[..., None]:
    def handler(*_args: object) -> None:
        raise _Stop(ListingError("malformed", f"a sitemap may not have {what}"))

    return handler


def parse_sitemap(chunks: Iterable[bytes], *, url: str, now: float) -> Listing:
    """The sitemap or sitemap index in ``chunks`` (its bytes, in order, gunzipped), fetched
    from ``url`` (relative locations are resolved against it, though the protocol has none).

    Raises ListingError when nothing can be read: ``malformed`` (not XML, or a DOCTYPE),
    ``not_listing`` (another root element). A document that breaks after its root element
    gives the entries before the break, with the break as ``problem``; so do the limits
    (``too_many``, and ``too_large`` or ``compression`` raised by ``chunks``).
    """
    reader = _Reader(url, now)
    parser = expat.ParserCreate(namespace_separator=_SEPARATOR)
    parser.StartElementHandler = reader.start
    parser.EndElementHandler = reader.end
    parser.CharacterDataHandler = reader.characters
    parser.StartDoctypeDeclHandler = _refuse("a DOCTYPE")
    parser.EntityDeclHandler = _refuse("entity declarations")
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.buffer_text = True  # one CharacterData call per text run, not per line
    problem: ListingError | None = None
    try:
        for chunk in chunks:
            parser.Parse(chunk, False)
        parser.Parse(b"", True)
    except _Stop as stop:
        problem = stop.problem
    except expat.ExpatError as error:
        problem = ListingError("malformed", f"not well-formed XML: {error}")
    except ListingError as error:  # from chunks: the size limit, a corrupt gzip stream
        problem = error
    if reader.kind is None:
        raise problem or ListingError("malformed", "no root element")
    return Listing(reader.kind, tuple(reader.entries.values()), problem)
