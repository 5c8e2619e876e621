"""Builds the SOIF records of one gathered document from what was fetched and summarized.

Pure: the caller passes the identity of the gatherer, the clock and the TTLs. Every record
carries Harvest's common attributes (URL, Type, MD5, File-Size, Update-Time,
Last-Modification-Time, Time-to-Live, Refresh-Rate, Gatherer-*); the summarizer's attributes
follow, then the unnested members, as ``Embed<n>-`` attributes or as records of their own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote

from gatherer.essence.document import Summary
from gatherer.fetch.result import Fetched
from harvest_common.soif import Record

TEMPLATE = "FILE"
# Attributes the record builder owns; a summarizer's attribute of the same name is dropped.
COMMON = frozenset(
    name.lower()
    for name in (
        "Type",
        "File-Size",
        "MD5",
        "Update-Time",
        "Last-Modification-Time",
        "Time-to-Live",
        "Refresh-Rate",
        "Gatherer-Name",
        "Gatherer-Host",
        "Gatherer-Port",
        "Gatherer-Version",
    )
)


@dataclass(frozen=True, slots=True)
class Identity:
    """Who gathered a record: written into every record so brokers can tell gatherers apart."""

    name: str
    host: str
    port: int
    version: str


@dataclass(frozen=True, slots=True)
class Lifetimes:
    """How long a record lives (``time_to_live``) and when it is re-gathered, in seconds."""

    time_to_live: float
    refresh_rate: float


def update_time_text(when: float) -> str:
    """Update-Time as written in records: epoch seconds with microseconds, so that a broker
    resuming "since the last Update-Time" is exact even for changes within one second."""
    return f"{when:.6f}"


def build(
    fetched: Fetched,
    summary: Summary,
    *,
    md5: str,
    identity: Identity,
    lifetimes: Lifetimes,
    now: float,
    members_as_records: bool = False,
) -> list[Record]:
    """The records for one document: its own first, then one per member if so configured."""
    references = _references(summary, fetched)
    common = _common(summary.type, len(fetched.content), md5, fetched, identity, lifetimes, now)
    own = [*common, *_summarized(summary.attributes)]
    if references and not any(name.lower() == "url-references" for name, _ in own):
        own.append(("URL-References", "\n".join(references).encode()))
    records = []
    if members_as_records:
        for member in summary.embedded:
            url = member_url(fetched.url, _member_name(member))
            attributes = [*common, *_summarized(member)]
            records.append(Record(TEMPLATE, url, _with_type(attributes, member)))
    else:
        for number, member in enumerate(summary.embedded, 1):
            own.extend((f"Embed{number}-{name}", value) for name, value in member)
    return [Record(TEMPLATE, fetched.url, tuple(own)), *records]


def member_url(url: str, member: str) -> str:
    """The URL of the record the archive member named ``member`` becomes (Members-As-Records):
    the archive's URL with the member's path as its fragment."""
    return f"{url}#{quote(member, safe='/')}"


def member_urls(record: Record) -> tuple[str, ...]:
    """The URLs the members of an archive's record become as records of their own, by its
    ``Members`` attribute (one member path a line); none for other records."""
    members = record.text("Members")
    if not members:
        return ()
    return tuple(member_url(record.url, name) for name in members.split("\n") if name)


def _common(
    kind: str,
    size: int,
    md5: str,
    fetched: Fetched,
    identity: Identity,
    lifetimes: Lifetimes,
    now: float,
) -> list[tuple[str, bytes]]:
    pairs = [
        ("Type", kind),
        ("File-Size", str(size)),
        ("MD5", md5),
        ("Update-Time", update_time_text(now)),
    ]
    if fetched.modified is not None:
        pairs.append(("Last-Modification-Time", str(int(fetched.modified))))
    pairs += [
        ("Time-to-Live", str(int(lifetimes.time_to_live))),
        ("Refresh-Rate", str(int(lifetimes.refresh_rate))),
        ("Gatherer-Name", identity.name),
        ("Gatherer-Host", identity.host),
        ("Gatherer-Port", str(identity.port)),
        ("Gatherer-Version", identity.version),
    ]
    return [(name, value.encode()) for name, value in pairs]


def _summarized(attributes: Iterable[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    return [(name, value) for name, value in attributes if name.lower() not in COMMON]


def _references(summary: Summary, fetched: Fetched) -> tuple[str, ...]:
    # Directory listings and Gopher menus give their links from the fetch, HTML from Essence.
    return tuple(dict.fromkeys((*fetched.links, *summary.links)))


def _member_name(member: tuple[tuple[str, bytes], ...]) -> str:
    for name, value in member:
        if name == "Member":
            return value.decode("utf-8", "replace")
    return ""


def _with_type(
    attributes: list[tuple[str, bytes]], member: tuple[tuple[str, bytes], ...]
) -> tuple[tuple[str, bytes], ...]:
    kind = dict(member).get("Type")
    if kind is None:
        return tuple(attributes)
    return tuple((name, kind if name == "Type" else value) for name, value in attributes)


def references(record: Record) -> tuple[str, ...]:
    """The links a stored record remembers, to re-enumerate a page that was not refetched."""
    value = record.text("URL-References")
    return tuple(line for line in value.splitlines() if line) if value else ()
