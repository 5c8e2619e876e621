"""Which objects read from the disk tier are promoted into the memory tier.

While the memory tier has room for an object, it is promoted at once: that evicts nothing.
Once the tier is full, a promotion evicts what the tier holds, and pays only if the object is
asked for again before it is evicted in turn. As TinyLFU's doorkeeper does, an object is then
promoted on its second read among the tier's last reads from disk about as many as it holds
objects (two generations of key hashes, each up to that many): a popular object reaches
memory on its second read, while the rest of a working set larger than the tier is read from
disk without churning the tier (with uniform requests over four tiers' worth of objects,
three to four disk reads in five are not promoted, where each would have evicted an object as
likely to be asked for as itself). Pure: no I/O, no clock.
"""

from __future__ import annotations

# A generation holds at least this many keys' hashes (a nearly empty tier's count says little).
MIN_GENERATION = 1024


class Admission:
    """The promotion decision for one memory tier (``held``: objects it holds now)."""

    def __init__(self) -> None:
        self._recent: set[int] = set()
        self._older: set[int] = set()

    def admits(self, key: str, fits: bool, held: int) -> bool:
        """Whether to promote ``key``, just read from disk: ``fits`` if the memory tier has
        room for it without evicting, ``held`` the number of objects it holds."""
        if fits:
            return True
        h = hash(key)
        if h in self._recent or h in self._older:
            return True
        if len(self._recent) >= max(MIN_GENERATION, held):
            self._older = self._recent
            self._recent = set()
        self._recent.add(h)
        return False

    def __len__(self) -> int:
        """Keys remembered (both generations; a key read twice may be in each)."""
        return len(self._recent) + len(self._older)
