"""The cache's HTCP socket (RFC 2756, UDP): answers other caches' TST and CLR, sends our TSTs
(for the peers marked ``htcp``) and CLRs, and hands the answers to our TSTs on.

Access goes by the sender's address, as Squid's ``htcp_access`` and ``htcp_clr_access``: a
TST from outside ``htcp.allow`` or a CLR from outside ``htcp.clr_allow`` is answered "not
allowed" (RESPONSE 5, MO 1). Lookups and purges may read the disk tier: each runs as a task
of its own (owned by the cache's task set); a datagram that cannot be read is counted and
dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import cast

from harvest_cache.hierarchy import htcp
from harvest_cache.hierarchy.htcp import Detail, Message, Op, Specifier
from harvest_cache.stats import HtcpStats
from harvest_common.tasks import TaskSet

log = logging.getLogger("harvest_cache")

Address = tuple[str, int]
# (hit, what to tell of the object) for a TST; the CLR RESPONSE code for a CLR.
Test = Callable[[Specifier], Awaitable[tuple[bool, Detail]]]
Clear = Callable[[Specifier], Awaitable[int]]
Replies = Callable[[Message, Address], bool]


@dataclass(slots=True)
class HtcpCounts:
    received: int = 0
    malformed: int = 0
    denied: int = 0
    tst_answered: int = 0
    tst_hits: int = 0
    clr_received: int = 0
    clr_purged: int = 0
    queries_sent: int = 0
    clr_sent: int = 0
    replies: int = 0
    unexpected_replies: int = 0


class HtcpEndpoint(asyncio.DatagramProtocol):
    """Open with ``await HtcpEndpoint.open(...)``; ``close`` at the end."""

    def __init__(
        self,
        test: Test,
        clear: Clear,
        may_test: Callable[[str], bool],
        may_clear: Callable[[str], bool],
        tasks: TaskSet,
    ) -> None:
        self._test = test
        self._clear = clear
        self._may_test = may_test
        self._may_clear = may_clear
        self._tasks = tasks
        self.replies: Replies | None = None  # where answers to our TSTs go (the neighbours)
        self.transport: asyncio.DatagramTransport | None = None
        self.counts = HtcpCounts()
        self._numbers = 0

    @classmethod
    async def open(
        cls, host: str, port: int, test: Test, clear: Clear,
        may_test: Callable[[str], bool], may_clear: Callable[[str], bool], tasks: TaskSet,
    ) -> HtcpEndpoint:  # fmt: skip
        loop = asyncio.get_running_loop()
        endpoint = cls(test, clear, may_test, may_clear, tasks)
        await loop.create_datagram_endpoint(lambda: endpoint, local_addr=(host, port))
        return endpoint

    @property
    def address(self) -> Address:
        assert self.transport is not None
        return cast(Address, self.transport.get_extra_info("sockname")[:2])

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | object, int]) -> None:
        source = (str(addr[0]), int(addr[1]))
        self.counts.received += 1
        try:
            message = htcp.decode(data)
        except htcp.MalformedHtcp as e:
            self.counts.malformed += 1
            log.debug("HTCP from %s dropped: %s", source[0], e)
            return
        if message.response:
            taken = self.replies is not None and self.replies(message, source)
            if taken:
                self.counts.replies += 1
            else:
                self.counts.unexpected_replies += 1
            return
        if message.op is Op.TST and message.specifier is not None:
            if not self._may_test(source[0]):
                self._deny(message, source)
            elif message.desired:
                self._tasks.spawn(self._answer_test(message, source), "htcp TST")
        elif message.op is Op.CLR and message.specifier is not None:
            if not self._may_clear(source[0]):
                self._deny(message, source)
            else:
                self.counts.clr_received += 1
                self._tasks.spawn(self._answer_clear(message, source), "htcp CLR")
        elif message.op is not Op.NOP and message.desired:
            self._send(htcp.error_answer(message, 2), source)  # (not implemented: MON, SET)

    def _deny(self, message: Message, source: Address) -> None:
        self.counts.denied += 1
        if message.desired:
            self._send(htcp.error_answer(message, 5), source)

    async def _answer_test(self, message: Message, source: Address) -> None:
        assert message.specifier is not None
        hit, detail = await self._test(message.specifier)
        self.counts.tst_answered += 1
        self.counts.tst_hits += hit
        self._send(htcp.tst_answer(message.trans_id, hit, detail), source)

    async def _answer_clear(self, message: Message, source: Address) -> None:
        assert message.specifier is not None
        code = await self._clear(message.specifier)
        self.counts.clr_purged += code == 0
        if message.desired:
            self._send(htcp.clr_answer(message.trans_id, code), source)

    def stats(self) -> HtcpStats:
        return HtcpStats(**asdict(self.counts))

    def query(self, trans_id: int, specifier: Specifier, to: Address) -> None:
        """Send a TST for ``specifier`` to a peer."""
        self.counts.queries_sent += 1
        self._send(htcp.tst(trans_id, specifier), to)

    def clear(self, specifier: Specifier, to: Address) -> None:
        """Tell a peer to forget ``specifier``'s object (no answer asked)."""
        self._numbers = (self._numbers + 1) & 0xFFFFFFFF
        self.counts.clr_sent += 1
        self._send(htcp.clr(self._numbers, specifier, desired=False), to)

    def _send(self, message: Message, to: Address) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        try:
            self.transport.sendto(htcp.encode(message), to)
        except htcp.MalformedHtcp as e:  # (a specifier too long for a datagram)
            log.debug("HTCP to %s not sent: %s", to[0], e)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
