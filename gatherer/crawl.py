"""The crawl controller (Combine's "Cabin"): hands frontier jobs to parallel fetchers, sends what
they bring to the summarizer pool and the database, and feeds the links found back.

The frontier decides what may run when; this driver only awaits. Per job: robots.txt, then a
record still fresh is re-enumerated from its stored links without a fetch; otherwise a
conditional fetch (through the configured cache), an unchanged result (304, same file time or
same MD5) refreshes the record, a changed one is summarized and stored, and 404/410 deletes it.
A document that is another's copy (it names another canonical URL that the enumeration takes,
or its text is a near-duplicate of a stored one's) is not stored (gatherer.duplicates).

Sitemaps and feeds (``gatherer.listings``) are enumerated instead of summarized: read in a
thread, stored as read (not as records), their entries offered with the dates they give. A
record dated by a listing after its last check is fetched though not due; a sitemap dated by
its index before its last check is enumerated as stored, unfetched. A root with
``Sitemaps=yes`` also enumerates its server's robots.txt ``Sitemap:`` lines.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from posixpath import basename
from urllib.parse import unquote, urlsplit

from gatherer.archive import WarcArchive
from gatherer.database import GathererDatabase, Stored, StoredListing
from gatherer.duplicates import NearDuplicates, canonical_target
from gatherer.errors import FetchError, ListingError, SummarizeError
from gatherer.essence.document import Document, Summary
from gatherer.essence.options import EssenceOptions
from gatherer.essence.pool import SummarizerPool
from gatherer.fetch.dispatch import Fetchers
from gatherer.fetch.result import Fetched, Validators
from gatherer.frontier import Admission, Frontier, Job, Scope
from gatherer.listings import Entry, Listing, ListingKind, decode, encode, read_listing, recognize
from gatherer.metrics import RunStats
from gatherer.records import Identity, Lifetimes, build, member_urls, references
from gatherer.robots import Robots, RobotsCache, decide, robots_url
from gatherer.urls import access_method, host_key, host_port, join
from harvest_common.dns import Resolver
from harvest_common.errors import DNSFailure

log = logging.getLogger(__name__)

# Statuses that say a document is gone: its record is deleted (and emitted as @DELETE).
GONE = frozenset({404, 410})
# A robots.txt Crawl-delay above this is read as this: a day-long delay would stall the run.
MAX_CRAWL_DELAY = 60.0
# Links offered between turns of the event loop: a sitemap's 50,000 take half a second.
OFFER_BATCH = 1000


@dataclass(frozen=True, slots=True)
class Root:
    """One enumeration start: a URL and the limits it is gathered under."""

    url: str
    scope: Scope


@dataclass(frozen=True, slots=True)
class Settings:
    """What the controller needs from the configuration."""

    identity: Identity
    lifetimes: Lifetimes
    essence: EssenceOptions
    user_agent: str
    connections_per_host: int
    max_connections: int
    # Every stored record is fetched again (conditionally), whether due or not.
    refresh_all: bool = False


class Crawl:
    """One gathering run over ``roots``; ``await crawl.run()`` returns when nothing is left."""

    def __init__(
        self,
        settings: Settings,
        *,
        db: GathererDatabase,
        fetchers: Fetchers,
        pool: SummarizerPool,
        resolver: Resolver,
        archive: WarcArchive | None = None,
        stats: RunStats | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._db = db
        self._fetchers = fetchers
        self._pool = pool
        self._resolver = resolver
        self._archive = archive
        self.stats = stats if stats is not None else RunStats()
        self._clock = clock
        self._monotonic = monotonic
        self._frontier = Frontier(
            connections_per_host=settings.connections_per_host,
            max_connections=settings.max_connections,
        )
        self._robots = RobotsCache()
        self._duplicates = NearDuplicates()
        self._robots_inflight: dict[str, asyncio.Future[Robots]] = {}
        self._addresses: dict[str, str | None] = {}
        self._wake = asyncio.Event()
        self._running = 0  # jobs not yet done (the run ends when none are left)
        self._in_hand = 0  # of those, the ones still holding their document
        # Documents held in memory between fetch and store are bounded: fetching stops
        # while the summarizers are behind.
        self._in_hand_limit = 2 * settings.max_connections + 2

    def __repr__(self) -> str:
        return f"<Crawl {self._frontier!r} running={self._running}>"

    async def run(self, roots: Sequence[Root], *, recheck: Sequence[str] = ()) -> RunStats:
        """Gather from ``roots``; then fetch each URL of ``recheck`` the crawl did not reach
        (known records due for refresh), so that removed documents are found and deleted."""
        self.stats.started = self._monotonic()
        self._duplicates = NearDuplicates(await self._db.fingerprints())
        for root in roots:
            await self._add_root(root)
        await self._drive()
        leaf = Scope(
            url_max=1,
            host_max=1,
            depth=1,
            access=frozenset({"HTTP", "FTP", "GOPHER", "FILE"}),
            delay=max((root.scope.delay for root in roots), default=0.0),
            url_filter=None,
            host_filter=None,
            listings=False,
        )
        for url in recheck:
            await self._add_root(Root(url, leaf), count=False)
        await self._drive()
        self._refresh_stats()
        return self.stats

    async def _add_root(self, root: Root, *, count: bool = True) -> None:
        admission = self._frontier.add_root(root.url, root.scope, ip=await self._ip(root.url))
        if count:
            self.stats.admissions[f"root_{admission.reason}"] += 1

    async def _drive(self) -> None:
        async with asyncio.TaskGroup() as tasks:
            while True:
                self._wake.clear()
                now = self._monotonic()
                while self._in_hand < self._in_hand_limit:
                    job = self._frontier.take(now)
                    if job is None:
                        break
                    self._running += 1
                    self._in_hand += 1
                    tasks.create_task(self._job(job))
                self._refresh_stats()
                if self._running == 0:
                    if self._frontier.is_idle:
                        return
                    ready_at = self._frontier.next_ready_at()
                    if ready_at is None:  # queued work no slot will ever take: a frontier bug
                        raise RuntimeError(f"crawl stalled: {self._frontier!r}")
                elif self._in_hand >= self._in_hand_limit:
                    ready_at = None  # only a finishing job can make room: wait for one
                else:
                    ready_at = self._frontier.next_ready_at()
                delay = None if ready_at is None else max(0.0, ready_at - self._monotonic())
                try:
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
                except TimeoutError:
                    pass

    def _refresh_stats(self) -> None:
        snapshot = self._frontier.stats()
        self.stats.queued = snapshot.queued
        self.stats.active = snapshot.active
        self.stats.hosts = snapshot.hosts
        self.stats.elapsed = self._monotonic() - self.stats.started

    async def _job(self, job: Job) -> None:
        holding = True
        try:
            try:
                outcome = await self._fetch(job)
            finally:
                # Politeness counts from the end of the contact; summarizing is not a contact.
                self._frontier.finish(job, self._monotonic())
            found = await self._settle(outcome, job)
            # The document is stored: another may be fetched while names are looked up.
            holding = False
            self._in_hand -= 1
            self._wake.set()
            await self._offer(found, job)
            if job.depth == 0 and not job.listed and self._frontier.scope(job).sitemaps:
                await self._offer_robots_sitemaps(job)
        finally:
            self._in_hand -= holding
            self._running -= 1
            self._wake.set()

    async def _offer(self, found: Sequence[str] | Listing, job: Job) -> None:
        """Offer a document's links, or a listing's entries, in order; those on host names
        whose addresses Host= needs follow once the names are looked up (all at once), so a
        slow resolver holds up only them. Long lists let the event loop turn between batches
        and stop once the root's URL= is used up."""
        if isinstance(found, Listing):
            entries, listed = found.entries, found.kind.lists_listings
        else:
            entries, listed = tuple(map(Entry, found)), False
        waiting = []
        for count, entry in enumerate(entries):
            if count and not count % OFFER_BATCH:
                if self._frontier.exhausted(job):
                    # URL= is used up: the rest would be refused one by one.
                    self.stats.admissions["url_max"] += len(entries) - count
                    break
                await asyncio.sleep(0)
            host = _host(entry.url)
            if (
                host
                and host not in self._addresses
                and self._frontier.needs_address(entry.url, parent=job, listed=listed)
            ):
                waiting.append(entry)
            else:
                self._admit(entry, job, listed)
        if waiting:
            hosts = {_host(entry.url) for entry in waiting}
            await asyncio.gather(*(self._resolve(host) for host in hosts))
            for entry in waiting:
                self._admit(entry, job, listed)

    def _admit(self, entry: Entry, job: Job, listed: bool) -> None:
        admission = self._frontier.offer(
            entry.url,
            parent=job,
            ip=self._addresses.get(_host(entry.url)),
            modified=entry.modified,
            listed=listed,
        )
        self.stats.admissions[admission.reason] += 1

    async def _offer_robots_sitemaps(self, root: Job) -> None:
        """The sitemaps named by the root's server's robots.txt, offered as if the root were
        a sitemap index naming them (so they stand at its depth)."""
        if access_method(root.url) != "HTTP":
            return
        robots = await self._robots_for(root.url)
        base = robots_url(root.url)
        named = (join(base, sitemap) for sitemap in robots.sitemaps)
        entries = tuple(Entry(url) for url in named if url is not None)
        if entries:
            await self._offer(Listing(ListingKind.SITEMAP_INDEX, entries), root)

    async def _fetch(self, job: Job) -> Fetched | Stored | Listing | None:
        """The fetched document, or the stored record to re-enumerate, or the listing to
        enumerate as stored, or None (nothing)."""
        stored = await self._db.get(job.url)
        known = None
        refresh_all = self._settings.refresh_all
        if stored is None and self._frontier.scope(job).listings:
            known = await self._known_listing(job.url)
            if (
                known is not None
                and job.modified is not None
                and not refresh_all
                and not _changed(job.modified, known[0].checked)
            ):
                # Its index dates it before its last check: the entries are as stored.
                self.stats.fresh += 1
                self.stats.listings += 1
                return known[1]
        elif stored is not None and not refresh_all and stored.refresh_at > self._clock():
            if not _changed(job.modified, stored.update_time):
                # Not due: its links come from the record, and the server is not contacted.
                self.stats.fresh += 1
                return stored
            self.stats.listed_changed += 1  # a listing says it changed since its last check
        if access_method(job.url) == "HTTP":
            robots = await self._robots_for(job.url)
            if not robots.allowed(job.url):
                self.stats.robots_denied += 1
                return None
        validators = None
        if stored is not None:
            validators = Validators(stored.etag, stored.last_modified, stored.md5)
        elif known is not None:
            validators = Validators(known[0].etag, known[0].last_modified, known[0].md5)
        try:
            fetched = await self._fetchers.fetch(
                job.url, validators=validators, permit=lambda url: self._permit(url, job)
            )
        except FetchError as error:
            await self._fetch_failed(job.url, stored, error)
            return None
        if fetched.not_modified:
            self.stats.not_modified += 1
            if known is not None:
                self.stats.listings += 1
                await self._db.touch_listing(
                    job.url, now=self._clock(), time_to_live=self._settings.lifetimes.time_to_live
                )
                return known[1]
            if stored is not None:
                await self._refresh(stored)
            return stored
        self.stats.fetched += 1
        self.stats.bytes += len(fetched.content)
        if self._archive is not None:
            await self._archive.record(fetched)
        return fetched

    async def _known_listing(self, url: str) -> tuple[StoredListing, Listing] | None:
        """The sitemap or feed at ``url`` as last read, or None (never read, or its stored
        form unreadable: then it is read again)."""
        known = await self._db.get_listing(url)
        if known is None:
            return None
        try:
            return known, await asyncio.to_thread(decode, known.entries)
        except ValueError as error:
            log.warning("%s: the stored listing is unreadable, reading it again: %s", url, error)
            return None

    async def _settle(
        self, outcome: Fetched | Stored | Listing | None, job: Job
    ) -> tuple[str, ...] | Listing:
        """Summarize and store a fetched document, or read a listing; the links to offer."""
        if outcome is None:
            return ()
        if isinstance(outcome, Listing):
            return outcome
        if not isinstance(outcome, Fetched):
            return references(outcome.record)
        fetched = outcome
        md5 = await asyncio.to_thread(_md5, fetched.content)
        if self._frontier.scope(job).listings:
            kind = recognize(fetched.content, fetched.content_type)
            if kind is not None:
                return await self._read_listing(job, fetched, kind, md5)
            if job.listed:
                served = fetched.content_type or "no type"
                error = ListingError("not_listing", f"named as a sitemap, but not one ({served})")
                self._listing_failed(fetched.url, error)
                return ()
        stored = await self._db.get(fetched.url)
        if stored is not None and stored.md5 == md5:
            self.stats.unchanged += 1
            # The validators changed though the content did not (a touched file, a new
            # ETag): keep the new ones, or every later run downloads it again.
            await self._refresh(stored, validators=(fetched.etag, fetched.last_modified))
            return references(stored.record)
        try:
            summary = await self._summarize(fetched)
        except SummarizeError as error:
            self.stats.summarize_errors[_failure_kind(error.reason)] += 1
            self.stats.failures.append((fetched.url, f"summarizing: {error.reason}"))
            log.warning("%s: summarizing failed: %s", fetched.url, error.reason)
            await self._db.fail(fetched.url, error.reason, now=self._clock())
            return fetched.links
        self.stats.summarized += 1
        original = await self._original(fetched.url, summary, job)
        if original is None:
            await self._store(fetched, summary, md5, stored)
        else:
            self.stats.duplicates += 1
            log.info("%s: not stored: a copy of %s", fetched.url, original)
            if stored is not None:  # it was stored before it became a copy
                await self._delete(self._records_of(stored), self._clock())
        return (*fetched.links, *summary.links)

    async def _original(self, url: str, summary: Summary, job: Job) -> str | None:
        """The URL ``summary``'s document is gathered under instead of ``url``, if it is a
        copy: the canonical URL it names, when the enumeration takes it (now, or it did
        already), or a stored near-duplicate. Claims the fingerprint for ``url`` otherwise, in
        the same step as the search, so that of two copies summarized at once one is kept."""
        if not summary.selected:
            self._duplicates.remove(url)
            return None
        canonical = canonical_target(url, summary.canonical)
        ip = await self._ip(canonical) if canonical is not None else None
        # Nothing is awaited from here on.
        if canonical is not None:
            admission = self._frontier.offer(canonical, parent=job, ip=ip)
            self.stats.admissions[admission.reason] += 1
            if admission in (Admission.ACCEPTED, Admission.DUPLICATE):
                self._duplicates.remove(url)
                return canonical
        if summary.fingerprint is not None:
            near = self._duplicates.find(url, summary.fingerprint)
            if near is not None:
                self._duplicates.remove(url)
                return near
        self._duplicates.put(url, summary.fingerprint)
        return None

    async def _summarize(self, fetched: Fetched) -> Summary:
        """The summarizer pool's summary of ``fetched``; the time it took is counted."""
        sent = self._monotonic()
        try:
            return await self._pool.run(_document(fetched), self._settings.essence)
        finally:
            self.stats.summarize_seconds += self._monotonic() - sent

    async def _read_listing(
        self, job: Job, fetched: Fetched, kind: ListingKind, md5: str
    ) -> Listing | tuple[str, ...]:
        """Read a fetched sitemap or feed (in a thread: a large one takes a CPU-bound moment)
        and store it under the URL asked for; a record made of it earlier is deleted."""
        now = self._clock()
        try:
            listing = await asyncio.to_thread(
                read_listing,
                kind,
                fetched.content,
                url=fetched.url,
                now=now,
                content_type=fetched.content_type,
            )
        except ListingError as error:
            self._listing_failed(fetched.url, error)
            return ()
        if listing.problem is not None:
            self._listing_failed(fetched.url, listing.problem)  # (the entries before it count)
        self.stats.listings += 1
        blob = await asyncio.to_thread(encode, listing)
        known = StoredListing(blob, md5, fetched.etag, fetched.last_modified, now)
        time_to_live = self._settings.lifetimes.time_to_live
        await self._db.put_listing(job.url, known, time_to_live=time_to_live)
        stored = await self._db.get(fetched.url)
        if stored is not None:
            await self._delete(self._records_of(stored), now)
        return listing

    def _listing_failed(self, url: str, error: ListingError) -> None:
        self.stats.listing_errors[error.kind] += 1
        self.stats.failures.append((url, f"listing: {error.kind}: {error.reason}"))
        log.warning("%s: listing: %s: %s", url, error.kind, error.reason)

    async def _store(
        self, fetched: Fetched, summary: Summary, md5: str, stored: Stored | None
    ) -> None:
        now = self._clock()
        if not summary.selected:
            # Stoplisted or noindex: a record made earlier must not linger in the index.
            if stored is not None:
                await self._delete(self._records_of(stored), now)
            return
        lifetimes = self._settings.lifetimes
        records = build(
            fetched,
            summary,
            md5=md5,
            identity=self._settings.identity,
            lifetimes=lifetimes,
            now=now,
            members_as_records=self._settings.essence.members_as_records,
        )
        for record in records:
            await self._db.put(
                record,
                md5=md5,
                etag=fetched.etag,
                last_modified=fetched.last_modified,
                now=now,
                time_to_live=lifetimes.time_to_live,
                refresh_rate=lifetimes.refresh_rate,
                fingerprint=summary.fingerprint if record.url == fetched.url else None,
            )
            self.stats.stored += 1
        if stored is not None:
            # Members no longer in the archive leave the index with the old version.
            made = {record.url for record in records}
            await self._delete((url for url in self._records_of(stored) if url not in made), now)

    def _records_of(self, stored: Stored) -> tuple[str, ...]:
        """The URLs of a stored document's records: its own, and its members' when they are
        records of their own (they are refreshed and deleted with it, never fetched alone)."""
        if not self._settings.essence.members_as_records:
            return (stored.record.url,)
        return (stored.record.url, *member_urls(stored.record))

    async def _refresh(
        self, stored: Stored, *, validators: tuple[str | None, str | None] | None = None
    ) -> None:
        lifetimes = self._settings.lifetimes
        now = self._clock()
        for url in self._records_of(stored):
            await self._db.refresh(
                url,
                now=now,
                time_to_live=lifetimes.time_to_live,
                refresh_rate=lifetimes.refresh_rate,
                validators=validators,
            )

    async def _delete(self, urls: Iterable[str], now: float) -> None:
        for url in urls:
            self._duplicates.remove(url)
            if await self._db.delete(url, now=now):
                self.stats.deleted += 1

    async def _fetch_failed(self, url: str, stored: Stored | None, error: FetchError) -> None:
        self.stats.fetch_errors[error.kind] += 1
        self.stats.failures.append((url, f"fetching: {error.kind}: {error.reason}"))
        log.info("%s: fetch failed: %s: %s", url, error.kind, error.reason)
        if stored is None:
            return
        now = self._clock()
        if error.kind == "status" and error.status in GONE:
            await self._delete(self._records_of(stored), now)
        else:
            await self._db.fail(url, f"{error.kind}: {error.reason}", now=now)

    def _permit(self, url: str, job: Job) -> bool:
        """May a redirect of ``job`` go to ``url``? In scope, not yet gathered, and allowed by
        robots.txt where its rules are known (an unknown host's are checked on its own job)."""
        ip = self._addresses.get(_host(url))
        if not self._frontier.admit_redirect(url, job=job, ip=ip).accepted:
            return False
        robots = self._robots.get(host_key(url), self._monotonic())
        return robots is None or robots.allowed(url)

    async def _robots_for(self, url: str) -> Robots:
        key = host_key(url)
        cached = self._robots.get(key, self._monotonic())
        if cached is not None:
            return cached
        pending = self._robots_inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Robots] = asyncio.get_running_loop().create_future()
        self._robots_inflight[key] = future
        try:
            status, body = await self._fetchers.get_robots(url)
            robots = decide(status, body, self._settings.user_agent)
            failed = status is None or status >= 500
            self._robots.put(key, robots, self._monotonic(), error=failed)
            if robots.crawl_delay is not None:
                delay = min(robots.crawl_delay, MAX_CRAWL_DELAY)
                self._frontier.set_host_delay(key, delay)
            future.set_result(robots)
            return robots
        finally:
            if not future.done():
                future.cancel()
            del self._robots_inflight[key]

    async def _ip(self, url: str) -> str | None:
        """The address ``Host=`` counts a URL's host by; None (count by name) if unresolvable."""
        host = _host(url)
        if host and host not in self._addresses:
            await self._resolve(host)
        return self._addresses.get(host)

    async def _resolve(self, host: str) -> None:
        try:
            addresses = await self._resolver.resolve(host)
        except DNSFailure:
            addresses = []
        self._addresses[host] = addresses[0] if addresses else None


def _host(url: str) -> str:
    """The URL's host name; empty for FILE URLs and URLs the gatherer cannot fetch."""
    if access_method(url) == "FILE":
        return ""
    try:
        return host_port(url)[0]
    except FetchError:
        return ""


def _changed(modified: float | None, checked: float) -> bool:
    """Does a listing date a document after its last check (at ``checked``)?"""
    return modified is not None and modified > checked


def _failure_kind(reason: str) -> str:
    """The bounded label of a summarizer failure: "timeout after 10.0 s" counts as timeout."""
    return reason.replace(":", " ").split(" ", 1)[0]


def _md5(content: bytes) -> str:
    return hashlib.md5(content, usedforsecurity=False).hexdigest()


def _document(fetched: Fetched) -> Document:
    return Document(
        url=fetched.url,
        content=fetched.content,
        content_type=fetched.content_type,
        charset=fetched.charset,
        name=unquote(basename(urlsplit(fetched.url).path.rstrip("/"))),
    )
