"""Essence's entry point: recognize, select, unnest and summarize one document.

The steps, as in Harvest's Essence:

1. type recognition (gatherer.essence.types);
2. candidate selection: a type on ``options.stoplist`` gives ``Summary(type, selected=False)``
   without summarizing, except that an HTML page is still summarized for its links, so a
   stoplisted page is still enumerated (its attributes are dropped);
3. presentation unnesting (gatherer.essence.unnest): a compressed file or archive is summarized
   through its members, each recognized and summarized in turn; the container's own attributes
   are ``Members`` (the member paths, one a line) and, when limits cut the list,
   ``Unnest-Truncated``. A corrupt one is summarized as ``Binary`` plus ``Unnest-Error``;
4. summarizing by type: the summarizer registered for the type, else the ``Binary`` one, else
   none (no attributes). ``Parts.noindex`` unselects the document but keeps its links.

Errors: a ``SummarizeError`` from a summarizer propagates. Any other exception a summarizer
raises is deliberately not caught either: the worker process that runs this function reports
it to the pool, which records it for the document (gatherer.essence.pool).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gatherer.errors import UnnestError
from gatherer.essence.document import Document, Summary
from gatherer.essence.options import EssenceOptions
from gatherer.essence.summarizers import SUMMARIZERS, Summarizer
from gatherer.essence.types import recognize
from gatherer.essence.unnest import NESTED_TYPES, Unnested, unnest

FALLBACK = "Binary"
# Types summarized for their links even when stoplisted: pages still lead to other pages.
ENUMERATED_TYPES = frozenset({"HTML"})

Attributes = tuple[tuple[str, bytes], ...]


def summarize(
    document: Document,
    options: EssenceOptions,
    summarizers: Mapping[str, Summarizer] | None = None,
) -> Summary:
    """Essence's summary of ``document``; ``summarizers`` defaults to the registered ones."""
    table = SUMMARIZERS if summarizers is None else summarizers
    kind = recognize(document)
    if kind in NESTED_TYPES and kind not in options.stoplist:
        try:
            unnested = unnest(document, options)
        except UnnestError as error:
            summary = _summarize_as(document, kind, FALLBACK, options, table)
            error_attribute = ("Unnest-Error", str(error).encode())
            return replace(summary, attributes=(*summary.attributes, error_attribute))
        return _summarize_nested(kind, unnested, options, table)
    return _summarize_as(document, kind, kind, options, table)


def _summarize_as(
    document: Document,
    kind: str,
    summarizer_kind: str,
    options: EssenceOptions,
    table: Mapping[str, Summarizer],
) -> Summary:
    """``document`` of type ``kind`` summarized by the summarizer for ``summarizer_kind``."""
    if kind in options.stoplist:
        enumerate_links = table.get(kind) if kind in ENUMERATED_TYPES else None
        if enumerate_links is None:
            return Summary(kind, selected=False)
        return Summary(kind, selected=False, links=enumerate_links(document, options).links)
    summarizer = table.get(summarizer_kind) or table.get(FALLBACK)
    if summarizer is None:
        return Summary(kind)
    parts = summarizer(document, options)
    if parts.noindex:
        return Summary(kind, selected=False, links=parts.links)
    return Summary(
        kind,
        attributes=parts.attributes,
        links=parts.links,
        canonical=parts.canonical,
        fingerprint=parts.fingerprint,
    )


def _summarize_nested(
    kind: str, unnested: Unnested, options: EssenceOptions, table: Mapping[str, Summarizer]
) -> Summary:
    # Links inside members are not enumerated: they are relative to where the archive was made.
    embedded = tuple(_member_attributes(member, options, table) for member in unnested.members)
    paths = "\n".join(member.name for member in unnested.members)
    attributes: list[tuple[str, bytes]] = [("Members", _text(paths))]
    if unnested.reason is not None:
        attributes.append(("Unnest-Truncated", unnested.reason.encode()))
    return Summary(kind, attributes=tuple(attributes), embedded=embedded)


def _member_attributes(
    member: Document, options: EssenceOptions, table: Mapping[str, Summarizer]
) -> Attributes:
    """``Member`` and ``Type``, then the member's own attributes if it is selected."""
    # Members are leaves: unnest already expanded what the depth limit allows.
    kind = recognize(member)
    head = (("Member", _text(member.name)), ("Type", kind.encode()))
    if kind in options.stoplist:
        return head  # not even HTML's links: links inside members are not enumerated
    return (*head, *_summarize_as(member, kind, kind, options, table).attributes)


def _text(name: str) -> bytes:
    # Tar member names keep undecodable bytes as surrogates: give the original bytes back.
    return name.encode("utf-8", "surrogateescape")
