"""Writes held to the end of the event loop's round of callbacks, then made together.

A write to a peer that sleeps waiting for it wakes that peer: for a client or an origin on
the same machine, a cross-core interrupt, and much of what a small write costs. Under load
one round of the loop answers many requests; written as each is answered, a peer is woken
for each and falls asleep in between. Held to the end of the round, the writes go out
together and each peer is woken once for them all. Measured in alternating runs: planned
revalidations 4-9% faster, misses 2.5%, and the load generator's CPU 35% -> 25%. Hits are
written at once: they are answered in the client's own read callback, and holding them
cost 4%. With a single request in flight the round ends at once, so nothing waits.

What is held: responses made from an origin's answer, and request heads sent from a
client's callback. A connection writes what it holds before anything else it writes, and
before it closes, so bytes keep their order.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

log = logging.getLogger("harvest_cache")


class Holder(Protocol):
    """A connection holding writes in an outbox."""

    def flush(self) -> None:
        """Write what is held now."""


class Outbox:
    """The connections holding writes until the end of this round of the loop."""

    __slots__ = ("_held", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._held: list[Holder] = []

    def hold(self, holder: Holder) -> None:
        """``holder`` has begun to hold writes: flush it once this round's callbacks ran."""
        if not self._held:
            self._loop.call_soon(self._flush)
        self._held.append(holder)

    def _flush(self) -> None:
        held, self._held = self._held, []
        for holder in held:
            try:
                holder.flush()
            except Exception:  # (a bug in one must not keep the others' bytes back)
                log.exception("writing what %r held failed", holder)
