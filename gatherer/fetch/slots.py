"""Connection slots for the fetchers that connect by themselves (FTP, Gopher): at most
``per_host`` connections to one host and ``total`` in all. (HTTP's are its connector's.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class ConnectionSlots:
    """``async with slots.hold(host):`` waits for a free slot and keeps it for the block."""

    def __init__(self, *, per_host: int, total: int) -> None:
        self._per_host = per_host
        self._total = asyncio.Semaphore(total)
        # host -> (its semaphore, how many tasks hold or await it); dropped at zero so that
        # a long crawl over many hosts does not keep one semaphore per host ever seen.
        self._hosts: dict[str, tuple[asyncio.Semaphore, int]] = {}

    @asynccontextmanager
    async def hold(self, host: str) -> AsyncIterator[None]:
        held = self._hosts.get(host)
        semaphore, users = held if held is not None else (asyncio.Semaphore(self._per_host), 0)
        self._hosts[host] = (semaphore, users + 1)
        try:
            async with semaphore, self._total:
                yield
        finally:
            semaphore, users = self._hosts[host]
            if users == 1:
                del self._hosts[host]
            else:
                self._hosts[host] = (semaphore, users - 1)
