"""The memory hot tier: an LRU of small objects and Vary markers, bounded in bytes.

It is plain in-process data touched only from the event loop, so a lookup is one dict probe
and a relink (``OrderedDict.move_to_end``, O(1) in C): no locks, no I/O, no allocation.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from harvest_cache.http.stored import StoredHead
from harvest_cache.store.entry import VaryMarker
from harvest_cache.store.interface import Found, StoredObject

# What an entry costs beyond the characters of its strings and its body, measured with
# tracemalloc on CPython 3.11: the object and head, their tuple, the string and bytes
# objects, the OrderedDict slot and link, the size's slot and int; and each field line's
# tuple and two strings (charged in full even when shared: see ``fields``). Counting it
# keeps a tier of tiny objects within its bytes; without it, 1 KiB objects took twice the
# tier's size.
ENTRY_OVERHEAD = 600
FIELD_OVERHEAD = 160


def entry_size(found: Found) -> int:
    """Bytes charged to the tier for ``found``: its body plus an estimate of its head."""
    if isinstance(found, VaryMarker):
        return ENTRY_OVERHEAD + len(found.url) + sum(len(n) for n in found.names)
    body = found.body
    assert isinstance(body, bytes), "the memory tier holds bodies as bytes"
    return head_size(found.head) + len(body)


def head_size(head: StoredHead) -> int:
    # (a plain loop: half the time of summing lengths over a chain, on every miss and refresh)
    fields = 0
    for name, value in head.headers:
        fields += len(name) + len(value)
    lines = FIELD_OVERHEAD * len(head.headers)
    return ENTRY_OVERHEAD + len(head.url) + len(head.reason) + len(head.vary_key) + fields + lines


class MemoryTier:
    """Least-recently-used entries are evicted to keep ``size`` within ``capacity`` bytes.

    Objects whose body exceeds ``max_object`` bytes bypass the tier; a capacity of 0 turns
    the tier off (nothing is admitted). ``evictions`` and ``bypasses`` are read by metrics.
    """

    def __init__(self, capacity: int, max_object: int) -> None:
        self.capacity = capacity
        self.max_object = max_object if capacity > 0 else -1
        self.size = 0
        self.evictions = 0
        self.bypasses = 0
        # Objects, and their sizes apart: a (found, size) pair per entry would be one more
        # object for the garbage collector to walk (a full tier holds hundreds of thousands),
        # while a dict of strings and ints is not walked at all.
        self._entries: OrderedDict[str, Found] = OrderedDict()
        self._sizes: dict[str, int] = {}
        # What a key holds, without making it the most recently used: the dict's own look-up,
        # with no Python frame (ICP asks it of every query).
        self.peek: Callable[[str], Found | None] = self._entries.get

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return (
            f"<MemoryTier {len(self._entries)} entries, {self.size}/{self.capacity} bytes,"
            f" {self.evictions} evicted>"
        )

    def admits(self, body_length: int) -> bool:
        """Whether a body of this length belongs in the tier (before counting its head)."""
        return body_length <= self.max_object

    def has_room(self, size: int) -> bool:
        """Whether an entry of ``size`` bytes (``entry_size``) fits without evicting any."""
        return self.size + size <= self.capacity

    def get(self, key: str) -> Found | None:
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
        return found

    def put(self, key: str, found: Found) -> bool:
        """Store ``found`` under ``key``; if it does not fit, drop whatever the key held."""
        self.delete(key)
        size = entry_size(found)
        too_big = isinstance(found, StoredObject) and not self.admits(found.head.body_length)
        if too_big or size > self.capacity:
            self.bypasses += 1
            return False
        self._entries[key] = found
        self._sizes[key] = size
        self.size += size
        self._evict()
        return True

    def _evict(self) -> None:
        while self.size > self.capacity:
            key, _ = self._entries.popitem(last=False)
            self.size -= self._sizes.pop(key)
            self.evictions += 1

    def heads(self) -> list[StoredHead]:
        """The heads of the objects held (not Vary markers)."""
        return [f.head for f in self._entries.values() if isinstance(f, StoredObject)]

    def bypass(self, key: str) -> None:
        """A new version of ``key`` is too big for the tier: drop the old one and count it."""
        self.bypasses += 1
        self.delete(key)

    def replace_head(self, key: str, head: StoredHead) -> None:
        """Give a held object a new head (same body); markers and absent keys are left alone."""
        old = self._entries.get(key)
        if not isinstance(old, StoredObject):
            return
        old_size = self._sizes[key]
        # The body is unchanged, so its length is kept whatever the new head says.
        if head.body_length != old.head.body_length:
            head = head.with_body_length(old.head.body_length)
        assert isinstance(old.body, bytes)
        size = head_size(head) + len(old.body)
        if size > self.capacity:
            self.bypass(key)
            return
        # In place: revalidated objects are refreshed often, and this runs on every one.
        self._entries[key] = StoredObject(head, old.body, old.tier)
        self._entries.move_to_end(key)
        self._sizes[key] = size
        self.size += size - old_size
        if size > old_size:
            self._evict()

    def delete(self, key: str) -> None:
        if self._entries.pop(key, None) is not None:
            self.size -= self._sizes.pop(key)
