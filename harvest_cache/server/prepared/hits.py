"""The hit fast path: fresh memory-tier objects answered straight from the parser callback.

Plain GETs (no Cache-Control, conditionals, Range, credentials or Via) for an object already
served once from the memory tier (on the fast path or the general one), or read from the disk
tier on the fast path and promoted, are answered from a response head prepared at that time,
with only Age and Cache-Status written per request. An entry stays valid while the memory tier
still holds that very object (an identity check), so replacement, revalidation, invalidation
and eviction all retire it without any hook; its freshness deadline is fixed when it is made
(a response's remaining time to live falls one second per second).

An object read from the disk tier and left there gets an entry too, without its body: it stays
valid while the disk tier holds that very entry (its place, never reused) with no newer head,
and is used while the page cache holds the body, which the kernel then sends from the segment
unread (bench/README.md, disk hits).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import NamedTuple

from harvest_cache.http.cache_status import string_item
from harvest_cache.http.forwarding import forwarded_head, via_entry
from harvest_cache.server.accesslog import line_rest, line_tail, time_field
from harvest_cache.server.pages import BodyPages, PageCopy
from harvest_cache.store.interface import DiskHit, MemoryView, StoredObject

# One entry for each this many bytes of the memory tier at most: an entry costs about 1.8 KiB
# besides the body it shares with the tier (an eighth of the tier for 16 KiB objects), and a
# tier of smaller objects has its most requested ones prepared, the rest answered as they come.
BYTES_PER_ENTRY = 16 << 10
MIN_ENTRIES = 4096
# Entries for objects left on disk hold no body: about 1.3 KiB each (tracemalloc over 20,000,
# their heads included), a twelfth of a 16 KiB body. One for each 4 KiB of the memory tier,
# as many as four times the 16 KiB objects it holds (at a third of its bytes), and never more
# than MAX_DISK_ENTRIES (about 42 MiB).
BYTES_PER_DISK_ENTRY = 4 << 10
MAX_DISK_ENTRIES = 32768
_MAX_LINES = 16  # access-log lines kept per entry
# How a head ends: for a connection that closes, an HTTP/1.0 one kept alive, and others.
_CLOSE = b"Connection: close\r\n\r\n"
_KEEP_ALIVE = b"Connection: keep-alive\r\n\r\n"
_END = b"\r\n"
# Stored fields a prepared head leaves out: it has its own Content-Length, and Age per hit.
_NOT_PREPARED = frozenset({"age", "content-length", "connection"})


@dataclass(slots=True)
class HotEntry:
    key: str
    obj: StoredObject
    prefix: bytes  # status line and stored fields with Via, without Age and our Cache-Status
    expires_at: float  # wall clock: fresh until then
    received_at: float  # wall clock at which the response's age was zero
    body: bytes
    get_tail: bytes  # the access-log line's fields after the size, for GET
    content_type: str | None
    key_param: bytes  # Cache-Status's key parameter after its ttl, or nothing
    # Access-log lines after their time, by client, size and HEAD-ness: a hit's line changes
    # only there (its size with the digits of Age and ttl).
    log_rests: dict[tuple[bytes, int, bool], bytes] = field(default_factory=dict)
    # The last head made: Age, ttl, the ending, and the head (it changes once a second).
    last_head: tuple[int, int, bytes, bytes] = (-1, 0, b"", b"")
    pages: PageCopy | None = None  # the body in a memory file, for sendfile
    head_tail: bytes = b""  # as ``get_tail``, for HEAD (made on the first)


class DiskEntry(NamedTuple):
    """A prepared hit for an object answered from the disk tier and left there, its body
    sent from its segment: the head's parts as a HotEntry has them, and the DiskHit (its view
    dropped: the buffer it shows is reused) to ask the tier whether the entry is still the
    key's, unchanged and cached."""

    key: str
    hit: DiskHit
    prefix: bytes
    expires_at: float
    received_at: float
    get_tail: bytes
    key_param: bytes


_NO_VIEW = memoryview(b"")


class HotIndex:
    """Raw request targets of recent memory hits, with their prepared heads.

    At most ``max_entries`` entries (by default one for each ``BYTES_PER_ENTRY`` of
    ``max_bytes``, at least ``MIN_ENTRIES``) whose bodies add up to at most ``max_bytes``,
    the oldest made forgotten first: an entry holds its object's body, and one whose object
    the memory tier has since dropped (found out when it is looked up, or by ``sweep``)
    would otherwise keep the body alive beyond the tier's bound.

    Besides, as many entries for objects answered from the disk tier and left there
    (``keep_disk``): no body, and no second read of the entry, its decoding, or its head's
    evaluation when the object is asked for again."""

    def __init__(
        self,
        memory: MemoryView,
        name: str,
        status_keys: bool = False,
        pages: BodyPages | None = None,
        max_bytes: int = 64 << 20,
        max_entries: int | None = None,
    ) -> None:
        self._memory = memory
        self._pages = pages
        self._name = name
        self._status_keys = status_keys  # Cache-Status names the key
        # (ordered: the oldest is taken out in constant time; a dict would scan the slots
        # its removals left at the front, every time, when full of disk hits' entries)
        self._entries: OrderedDict[bytes, HotEntry] = OrderedDict()
        self.max_bytes = max_bytes
        if max_entries is None:
            max_entries = max(MIN_ENTRIES, max_bytes // BYTES_PER_ENTRY)
        self.max_entries = max_entries
        self.bytes = 0  # of the entries' bodies
        self._disk: OrderedDict[bytes, DiskEntry] = OrderedDict()
        self.max_disk_entries = min(
            MAX_DISK_ENTRIES, max(MIN_ENTRIES, max_bytes // BYTES_PER_DISK_ENTRY)
        )
        self._status_hit = f"Cache-Status: {name}; hit; ttl=".encode("latin-1")
        self._via = via_entry("1.1", name)

    def add(
        self,
        target: bytes,
        key: str,
        obj: StoredObject,
        age: float,
        ttl: float,
        now: float,
        *,
        copy_pages: bool = True,
    ) -> HotEntry | None:
        """Prepare ``obj``'s hits for requests for ``target``; the entry (None: it cannot
        be, a body on disk or too big, or stale within a second). ``copy_pages``: the body
        may go into a memory file for sendfile (not for an entry likely used once)."""
        entry = self.prepare(key, obj, age, ttl, now)
        if entry is None:
            return None
        self._forget(target)
        size = len(entry.body)
        if size > self.max_bytes:
            return None
        entries = self._entries
        while len(entries) >= self.max_entries or self.bytes + size > self.max_bytes:
            # Forget the oldest; entries are cheap to remake on the next memory hit.
            self.bytes -= len(entries.popitem(last=False)[1].body)
        self.bytes += size
        if self._pages is not None and copy_pages:
            entry.pages = self._pages.copy(entry.body)
        entries[target] = entry
        return entry

    def prepare(
        self,
        key: str,
        obj: StoredObject,
        age: float,
        ttl: float,
        now: float,
        sent: int | None = None,
    ) -> HotEntry | None:
        """An entry for ``obj``'s hits, not kept (``add`` keeps one): for an object answered
        once, from the disk tier, and left there (``sent``: the length of its body, sent
        from disk; ``obj`` then has none). None as ``add`` says."""
        if not isinstance(obj.body, bytes) or ttl < 1:
            return None
        head = obj.head
        # (Cache-Status stays: ours follows the members of caches nearer the origin.)
        length = (("Content-Length", str(len(obj.body) if sent is None else sent)),)
        prefix = forwarded_head(
            head.status, head.reason, head.headers, self._via, length, _NOT_PREPARED
        )[:-2]
        types = [value for name, value in head.headers if name.lower() == "content-type"]
        content_type = ", ".join(types) if types else None
        key_param = b""
        if self._status_keys and key.isascii() and key.isprintable():
            key_param = f"; key={string_item(key)}".encode()  # as cache_status() has it
        return HotEntry(
            key,
            obj,
            prefix,
            now + ttl,
            now - age,
            obj.body,
            line_tail("GET", key, content_type=content_type),
            content_type,
            key_param,
        )

    def lookup(self, target: bytes, now: float) -> HotEntry | None:
        entry = self._entries.get(target)
        if entry is None:
            return None
        if now >= entry.expires_at or self._memory.get(entry.key) is not entry.obj:
            self._forget(target)
            return None
        return entry

    def _forget(self, target: bytes) -> None:
        entry = self._entries.pop(target, None)
        if entry is not None:
            self.bytes -= len(entry.body)

    def head(self, entry: HotEntry, now: float, close: bool, http10: bool) -> bytes:
        """The response head for one hit (the body is ``entry.body``)."""
        tail = _CLOSE if close else _KEEP_ALIVE if http10 else _END
        age, ttl = int(now - entry.received_at), int(entry.expires_at - now)
        last_age, last_ttl, last_tail, head = entry.last_head
        if age != last_age or ttl != last_ttl or tail is not last_tail:
            head = self._head(entry.prefix, age, ttl, entry.key_param, tail)
            entry.last_head = (age, ttl, tail, head)
        return head

    def _head(self, prefix: bytes, age: int, ttl: int, key_param: bytes, tail: bytes) -> bytes:
        return b"%bAge: %d\r\n%b%d%b\r\n%b" % (prefix, age, self._status_hit, ttl, key_param, tail)

    # -- objects left on disk ------------------------------------------------------------------

    def keep_disk(self, target: bytes, entry: HotEntry, hit: DiskHit) -> None:
        """Keep ``entry`` (made by ``prepare`` for ``hit``, just answered) for the next
        requests for ``target``, while the disk tier has the object unchanged."""
        disk = self._disk
        disk.pop(target, None)
        while len(disk) >= self.max_disk_entries:
            disk.popitem(last=False)
        disk[target] = DiskEntry(
            entry.key,
            hit._replace(view=_NO_VIEW),
            entry.prefix,
            entry.expires_at,
            entry.received_at,
            entry.get_tail,
            entry.key_param,
        )

    def lookup_disk(self, target: bytes, now: float) -> DiskEntry | None:
        """The entry kept for ``target``, if still fresh (the disk tier is asked whether it
        is still the key's object)."""
        entry = self._disk.get(target)
        if entry is not None and now >= entry.expires_at:
            del self._disk[target]
            return None
        return entry

    def forget_disk(self, target: bytes) -> None:
        self._disk.pop(target, None)

    @property
    def disk_entries(self) -> int:
        return len(self._disk)

    def disk_head(self, entry: DiskEntry, now: float, close: bool, http10: bool) -> bytes:
        """The response head for one hit on ``entry``."""
        tail = _CLOSE if close else _KEEP_ALIVE if http10 else _END
        age, ttl = int(now - entry.received_at), int(entry.expires_at - now)
        return self._head(entry.prefix, age, ttl, entry.key_param, tail)

    def disk_log_line(self, entry: DiskEntry, now: float, client: bytes, size: int) -> bytes:
        """The access-log line of one hit on ``entry``, ``size`` bytes sent."""
        rest = line_rest(0, client, b"TCP_HIT", entry.hit.head.status, size, False)
        return time_field(now) + rest + entry.get_tail

    def log_line(
        self,
        entry: HotEntry,
        now: float,
        client: bytes,
        size: int,
        head_only: bool,
        result: bytes = b"TCP_MEM_HIT",
    ) -> bytes:
        """The access-log line of one hit, ``size`` bytes sent (kept for the next ones of
        its client and size, unless ``result`` says it was read from disk)."""
        key = (client, size, head_only)
        rest = entry.log_rests.get(key) if result == b"TCP_MEM_HIT" else None
        if rest is None:
            status = entry.obj.head.status
            rest = line_rest(0, client, result, status, size, False)
            if head_only:
                if not entry.head_tail:
                    entry.head_tail = line_tail("HEAD", entry.key, content_type=entry.content_type)
                rest += entry.head_tail
            else:
                rest += entry.get_tail
            if result == b"TCP_MEM_HIT":
                if len(entry.log_rests) >= _MAX_LINES:
                    entry.log_rests.clear()
                entry.log_rests[key] = rest
        return time_field(now) + rest

    def sweep(self) -> int:
        """Forget the entries whose objects the memory tier no longer holds (found out
        otherwise only when each is looked up: during a miss storm none is, and they kept as
        many bodies again as the tier holds alive); how many. The memory tier's order is not
        touched."""
        peek = self._memory.peek
        stale = [t for t, e in self._entries.items() if peek(e.key) is not e.obj]
        for target in stale:
            self._forget(target)
        return len(stale)

    def clear(self) -> None:
        """Forget every entry (and so free their page copies)."""
        self._entries.clear()
        self._disk.clear()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)
