"""A scripted DNS server on 127.0.0.1 (UDP, ephemeral port) for the tests that give a cache
or a resolver names to look up: it answers from a zone and counts every question."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import cast

import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset

# name -> record type -> (ttl, addresses)
Zone = dict[str, dict[str, tuple[int, list[str]]]]


@dataclass
class ScriptedDNS(asyncio.DatagramProtocol):
    """Answers from ``zone``; NXDOMAIN for other names, SERVFAIL or silence where scripted."""

    zone: Zone
    silent: set[str] = field(default_factory=set)
    servfail: set[str] = field(default_factory=set)
    delay: float = 0.05
    queries: Counter[tuple[str, str]] = field(default_factory=Counter)
    transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        query = dns.message.from_wire(data)
        question = query.question[0]
        name = question.name.to_text(omit_final_dot=True).lower()
        rdtype = dns.rdatatype.to_text(question.rdtype)
        self.queries[name, rdtype] += 1
        if name in self.silent:
            return
        response = dns.message.make_response(query)
        if name in self.servfail:
            response.set_rcode(dns.rcode.SERVFAIL)
        elif name not in self.zone:
            response.set_rcode(dns.rcode.NXDOMAIN)
        elif rdtype in self.zone[name]:
            ttl, addresses = self.zone[name][rdtype]
            response.answer.append(
                dns.rrset.from_text_list(question.name, ttl, "IN", rdtype, addresses)
            )
        wire = response.to_wire()
        asyncio.get_running_loop().call_later(self.delay, self._send, wire, addr)

    def _send(self, wire: bytes, addr: tuple[str, int]) -> None:
        assert self.transport is not None
        self.transport.sendto(wire, addr)

    @property
    def port(self) -> int:
        assert self.transport is not None
        port: int = self.transport.get_extra_info("sockname")[1]
        return port

    def count(self, name: str) -> int:
        return sum(n for (qname, _), n in self.queries.items() if qname == name)


@asynccontextmanager
async def scripted_dns(zone: Zone, **script: object) -> AsyncIterator[ScriptedDNS]:
    """A ScriptedDNS for ``zone`` listening on 127.0.0.1; ``script``: its other fields."""
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(
        lambda: ScriptedDNS(zone, **script),  # type: ignore[arg-type]
        local_addr=("127.0.0.1", 0),
    )
    try:
        yield protocol
    finally:
        transport.close()
