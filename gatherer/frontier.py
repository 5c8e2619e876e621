"""The crawl frontier: which URL to fetch next, and when, politely.

Like Combine's controller it holds the to-do list (jobs queued per host), the running jobs
and what has been seen; like Scrapy's download ``Slot`` each host has a concurrency limit, a
delay and a queue. It is synchronous state: the caller offers links, asks ``take(now)`` for a
job, fetches, reports ``finish(job, now)``, and sleeps until ``next_ready_at()``. Robots are
checked by the caller before offering (they need I/O); ``set_host_delay`` passes on a robots
Crawl-delay.

Listings: a sitemap or feed lists documents one link step down, like a page's links, and
each entry's job carries the date the listing gave it (``modified``). A sitemap index is
different: the sitemaps it names (``listed``, as are those of a robots.txt ``Sitemap:``
line) stand at its own depth, so an index split into files costs no ``Depth=``; chains of
indexes are bounded by ``MAX_LISTING_CHAIN`` and each root's named sitemaps by
``MAX_LISTED``.

Order: breadth first across hosts. Among the hosts free to be contacted now, the job with the
lowest (depth, admission order) starts first.

Politeness: a host runs at most ``connections_per_host`` jobs at once, and after a job starts
or finishes the next may start only ``delay`` seconds later, where ``delay`` is the largest
Delay= of the roots with jobs on the host, raised by robots' Crawl-delay. FILE jobs contact no
server, so they wait for nobody.

Cost, for H hosts with queued jobs and Q jobs queued on a host: ``offer`` O(log Q + log H),
``take`` and ``finish`` O(log Q + log H), ``next_ready_at`` O(log H); stale heap entries
(left when a host's first job changes) are dropped as they surface, amortized into these.
"""

from __future__ import annotations

import enum
import heapq
import math
from dataclasses import dataclass, field

from gatherer.scope import Admission, Enumeration, Scope
from gatherer.urls import access_method, host_key, normalize

# Scope and Admission live in gatherer.scope; the frontier is where callers meet them.
__all__ = [
    "MAX_LISTED",
    "MAX_LISTING_CHAIN",
    "Admission",
    "Frontier",
    "FrontierStats",
    "Job",
    "Scope",
]

# Sitemap indexes in a row (robots.txt's Sitemap: lines count as one): sitemaps.org allows
# none in an index, some sites nest one more.
MAX_LISTING_CHAIN = 3
# Sitemaps that indexes and robots.txt may name for one root (each counts toward URL= too).
MAX_LISTED = 1000


@dataclass(frozen=True, slots=True)
class Job:
    """One URL to fetch: ``depth`` link steps from root number ``root``; ``seq`` is its
    admission order across the whole crawl. ``modified``: when the sitemap or feed that
    listed it says it last changed (epoch seconds). ``listed``: how many sitemap indexes in a
    row named it (robots.txt counting as one); more than 0 means it must be a sitemap."""

    url: str
    host_key: str
    depth: int
    root: int
    seq: int
    modified: float | None = None
    listed: int = 0

    def __repr__(self) -> str:
        extra = f" modified={self.modified:.0f}" if self.modified is not None else ""
        extra += f" listed={self.listed}" if self.listed else ""
        return f"Job(#{self.seq} {self.url!r} depth={self.depth} root={self.root}{extra})"


@dataclass(frozen=True, slots=True)
class FrontierStats:
    """Counts for progress displays and metrics; ``generated`` holds one count per root."""

    queued: int
    active: int
    done: int
    hosts: int
    generated: tuple[int, ...]


class _Filed(enum.Enum):
    """Which heap holds a host's entry: it starts ``READY`` hosts by their first job, and
    wakes ``WAITING`` hosts when their delay is over. Hosts with nothing queued, or running
    as many jobs as they may, are in ``NONE`` until a link or a finish changes that."""

    NONE = enum.auto()
    READY = enum.auto()
    WAITING = enum.auto()


@dataclass(slots=True)
class _Slot:
    """One host's politeness state and queue (a heap of (depth, seq, job))."""

    key: str
    delay: float = 0.0  # the largest Delay= of the roots with jobs here
    queue: list[tuple[int, int, Job]] = field(default_factory=list, repr=False)
    active: int = 0
    next_allowed: float = -math.inf
    filed: _Filed = _Filed.NONE


class Frontier:
    """To-do and running lists for every root of one gathering run."""

    def __init__(self, *, connections_per_host: int = 1, max_connections: int = 8) -> None:
        if connections_per_host < 1 or max_connections < 1:
            raise ValueError("connections_per_host and max_connections must be at least 1")
        self._per_host = connections_per_host
        self._max_connections = max_connections
        self._roots: list[Enumeration] = []
        self._listed: list[int] = []  # sitemaps named by indexes, per root
        self._seen: set[str] = set()  # every URL admitted by any root, once
        self._slots: dict[str, _Slot] = {}
        self._robots_delay: dict[str, float] = {}
        self._ready: list[tuple[int, int, str]] = []  # (depth, seq, host key) of a first job
        self._waiting: list[tuple[float, str]] = []  # (earliest start, host key)
        self._running: set[Job] = set()
        self._queued = 0
        self._done = 0
        self._seq = 0

    # -- admission ---------------------------------------------------------------------

    def add_root(self, url: str, scope: Scope, *, ip: str | None) -> Admission:
        """Queue a root URL at depth 0; roots are numbered in the order they are added, the
        refused ones included. A root is not filtered, but counts toward its own URL=."""
        url = normalize(url)
        root = Enumeration(url, scope)
        self._roots.append(root)
        self._listed.append(0)
        if access_method(url) is None:
            return Admission.SCHEME
        if url in self._seen:
            return Admission.DUPLICATE
        self._queue(url, len(self._roots) - 1, 0, ip)
        return Admission.ACCEPTED

    def offer(
        self,
        url: str,
        *,
        parent: Job,
        ip: str | None,
        modified: float | None = None,
        listed: bool = False,
    ) -> Admission:
        """Queue a link found in ``parent``'s document if its root's scope allows it.
        ``ip`` is the host's address when known (Host= counts addresses). ``modified``: the
        date a listing gave the link; ``listed``: the link is a sitemap named by the sitemap
        index (or robots.txt) ``parent`` is, at ``parent``'s depth."""
        url = normalize(url)
        depth = parent.depth if listed else parent.depth + 1
        chain = parent.listed + 1 if listed else 0
        if chain > MAX_LISTING_CHAIN:
            return Admission.LISTING_DEPTH
        if listed and self._listed[parent.root] >= MAX_LISTED:
            return Admission.LISTING_MAX
        verdict = self._roots[parent.root].judge(
            url,
            seen=self._seen,
            ip=ip,
            depth=depth,
            from_gopher=access_method(parent.url) == "GOPHER",
        )
        if verdict.accepted:
            self._listed[parent.root] += listed
            self._queue(url, parent.root, depth, ip, modified=modified, listed=chain)
        return verdict

    def needs_address(self, url: str, *, parent: Job, listed: bool = False) -> bool:
        """Would ``offer`` need the host's address to judge this link? Only for a host name
        the root has not touched yet, when every other rule lets the link in: Host= counts
        addresses, so such a name may be an alias of a host already counted. Lets the caller
        skip name lookups for links refused anyway."""
        url = normalize(url)
        root = self._roots[parent.root]
        if root.touched(url):
            return False
        verdict = root.judge(
            url,
            seen=self._seen,
            ip=None,
            depth=parent.depth if listed else parent.depth + 1,
            from_gopher=access_method(parent.url) == "GOPHER",
        )
        return verdict in (Admission.ACCEPTED, Admission.HOST_MAX)

    def admit_redirect(self, url: str, *, job: Job, ip: str | None) -> Admission:
        """Check a redirect target against ``job``'s root scope and mark it seen, without
        queueing it: the fetcher follows it within the same job. It does not count toward
        URL= (it is the same document); "duplicate" means the target was gathered already."""
        url = normalize(url)
        root = self._roots[job.root]
        verdict = root.judge(url, seen=self._seen, ip=ip, depth=None, counted=False)
        if verdict.accepted:
            root.admit(url, ip=ip, counted=False)
            self._seen.add(url)
        return verdict

    def scope(self, job: Job) -> Scope:
        """The scope of the root ``job`` belongs to."""
        return self._roots[job.root].scope

    def exhausted(self, job: Job) -> bool:
        """Has the root ``job`` belongs to generated its ``URL=`` already? Then every link
        offered for it is refused, and a long listing need not be offered to the end."""
        root = self._roots[job.root]
        return root.generated >= root.scope.url_max

    def set_host_delay(self, host_key: str, seconds: float) -> None:
        """A robots.txt Crawl-delay for a host: its delay becomes at least ``seconds``
        (replacing an earlier Crawl-delay; never below the roots' Delay=)."""
        if not seconds >= 0 or math.isinf(seconds):
            raise ValueError(f"a crawl delay must be finite and >= 0, got {seconds!r}")
        self._robots_delay[host_key] = seconds

    # -- scheduling ----------------------------------------------------------------------

    def take(self, now: float) -> Job | None:
        """The job to start at ``now`` (monotonic seconds, never decreasing between calls),
        or None when every queued job must wait for time or for a ``finish``."""
        if len(self._running) >= self._max_connections:
            return None
        while self._waiting and self._waiting[0][0] <= now:
            _, key = heapq.heappop(self._waiting)
            self._file(self._slots[key], now)
        while self._ready:
            _, seq, key = heapq.heappop(self._ready)
            slot = self._slots[key]
            if slot.filed is _Filed.READY and slot.queue[0][1] == seq:
                return self._start(slot, now)
        return None

    def next_ready_at(self) -> float | None:
        """When ``take`` will next have a job: a time at or before the latest ``now`` means
        at once (it may be -inf). None when nothing is queued or every host with queued jobs
        waits only for a ``finish`` (its own connections, or the global limit, are in use)."""
        if not self._queued or len(self._running) >= self._max_connections:
            return None
        while self._ready:
            _, seq, key = self._ready[0]
            slot = self._slots[key]
            if slot.filed is _Filed.READY and slot.queue[0][1] == seq:
                return slot.next_allowed
            heapq.heappop(self._ready)  # stale: the host's first job changed
        while self._waiting:
            at, key = self._waiting[0]
            slot = self._slots[key]
            if slot.next_allowed <= at:
                return at
            heapq.heapreplace(self._waiting, (slot.next_allowed, key))  # a finish moved it
        return None

    def finish(self, job: Job, now: float) -> None:
        """``job`` is over (fetched or failed): free its connection; its host may be
        contacted again ``delay`` seconds after ``now``."""
        if job not in self._running:
            raise ValueError(f"{job!r} is not running")
        self._running.remove(job)
        self._done += 1
        slot = self._slots[job.host_key]
        slot.active -= 1
        slot.next_allowed = max(slot.next_allowed, now + self._delay(slot))
        if slot.filed is _Filed.NONE or (slot.filed is _Filed.READY and slot.next_allowed > now):
            self._file(slot, now)

    # -- reporting -----------------------------------------------------------------------

    def stats(self) -> FrontierStats:
        """A snapshot of the counts; ``hosts`` counts every host key a job was queued for."""
        return FrontierStats(
            queued=self._queued,
            active=len(self._running),
            done=self._done,
            hosts=len(self._slots),
            generated=tuple(root.generated for root in self._roots),
        )

    @property
    def is_idle(self) -> bool:
        """Nothing queued and nothing running: the crawl is over unless links are offered."""
        return not self._queued and not self._running

    def __repr__(self) -> str:
        return (
            f"<Frontier queued={self._queued} active={len(self._running)} done={self._done} "
            f"hosts={len(self._slots)} roots={len(self._roots)}>"
        )

    # -- internals -----------------------------------------------------------------------

    def _queue(
        self,
        url: str,
        root_index: int,
        depth: int,
        ip: str | None,
        *,
        modified: float | None = None,
        listed: int = 0,
    ) -> None:
        root = self._roots[root_index]
        root.admit(url, ip=ip)
        self._seen.add(url)
        self._seq += 1
        job = Job(url, host_key(url), depth, root_index, self._seq, modified, listed)
        slot = self._slots.get(job.host_key)
        if slot is None:
            slot = self._slots[job.host_key] = _Slot(job.host_key)
        if access_method(url) != "FILE":
            slot.delay = max(slot.delay, root.scope.delay)
        heapq.heappush(slot.queue, (depth, job.seq, job))
        self._queued += 1
        if slot.filed is _Filed.NONE and slot.active < self._per_host:
            # Filed by time: the next take moves it to READY if its delay is over.
            slot.filed = _Filed.WAITING
            heapq.heappush(self._waiting, (slot.next_allowed, slot.key))
        elif slot.filed is _Filed.READY and slot.queue[0][2] is job:
            heapq.heappush(self._ready, (depth, job.seq, slot.key))  # a new first job

    def _start(self, slot: _Slot, now: float) -> Job:
        _, _, job = heapq.heappop(slot.queue)
        self._queued -= 1
        slot.active += 1
        self._running.add(job)
        # Starts are spaced by the delay too, so parallel connections do not arrive at once.
        slot.next_allowed = now + self._delay(slot)
        self._file(slot, now)
        return job

    def _file(self, slot: _Slot, now: float) -> None:
        """Put a host in the heap its state calls for (its old entry is gone or stale)."""
        if not slot.queue or slot.active >= self._per_host:
            slot.filed = _Filed.NONE
        elif slot.next_allowed <= now:
            slot.filed = _Filed.READY
            depth, seq, _ = slot.queue[0]
            heapq.heappush(self._ready, (depth, seq, slot.key))
        else:
            slot.filed = _Filed.WAITING
            heapq.heappush(self._waiting, (slot.next_allowed, slot.key))

    def _delay(self, slot: _Slot) -> float:
        return max(slot.delay, self._robots_delay.get(slot.key, 0.0))
