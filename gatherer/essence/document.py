"""What Essence takes in and gives back: plain, picklable values.

A ``Document`` crosses into a summarizer worker process and a ``Summary`` comes back, so
both hold only bytes, strings, numbers and tuples.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Document:
    """One fetched object, as Essence sees it.

    ``url`` is the final URL (after redirects); ``name`` is the last path segment (or the
    member name inside an archive), used for name-based type recognition.
    ``content_type`` is the server's media type without parameters (``None`` when unknown,
    e.g. FILE and FTP); ``charset`` is its charset parameter if given.
    """

    url: str
    content: bytes
    content_type: str | None = None
    charset: str | None = None
    name: str = ""

    def __repr__(self) -> str:
        return f"Document({self.url!r}, {len(self.content)} bytes, {self.content_type!r})"


@dataclass(frozen=True, slots=True)
class Parts:
    """What one type's summarizer extracts: attributes in order, and links to enumerate.

    Attribute names are SOIF names (``Title``, ``Keywords``, ``Partial-Text``...); a name
    appears at most once (summarizers join repeated values with newlines). ``links`` are
    absolute URLs, resolved against the document's base, without fragments, in document order,
    without duplicates.
    """

    attributes: tuple[tuple[str, bytes], ...] = ()
    links: tuple[str, ...] = ()
    noindex: bool = False  # the document asked not to be indexed (HTML robots meta)
    canonical: str | None = None  # the URL the document names as its own (absolute)
    fingerprint: int | None = None  # of its text, for near-duplicates (essence.fingerprint)


@dataclass(frozen=True, slots=True)
class Summary:
    """Essence's result for one document.

    ``type`` is the Essence type name (``HTML``, ``Text``, ``README``, ``C``, ``Python``,
    ``PDF``, ``ManPage``, ``Tar``, ``Zip``, ``GNUCompressed``, ``Binary``, ``Image``...).
    ``selected`` is False when the stoplist rejected the type: then ``attributes`` is empty but
    ``links`` may still be given (a stoplisted HTML page can still be enumerated); likewise
    when a page's robots meta says ``noindex``.
    ``embedded`` holds one tuple of attributes per unnested member, in member order, each
    starting with ``("Member", name)`` and ``("Type", type)``; the record builder renders
    them as ``Embed<n>-<Name>`` attributes or as records of their own.
    ``canonical`` and ``fingerprint`` are the summarizer's (``Parts``), for the caller's
    duplicate checks.
    """

    type: str
    selected: bool = True
    attributes: tuple[tuple[str, bytes], ...] = ()
    links: tuple[str, ...] = ()
    embedded: tuple[tuple[tuple[str, bytes], ...], ...] = field(default=())
    canonical: str | None = None
    fingerprint: int | None = None
