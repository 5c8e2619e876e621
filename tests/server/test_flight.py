"""A flight's head published lazily: made once, and only when a reader asks for it."""

from __future__ import annotations

import asyncio

import pytest

from harvest_cache.errors import UpstreamReset
from harvest_cache.http.headers import Headers
from harvest_cache.server.flight import Flight, FlightHead


class Maker:
    """Makes a FlightHead and counts the calls."""

    def __init__(self, status: int = 200) -> None:
        self.calls = 0
        self.status = status

    def __call__(self) -> FlightHead:
        self.calls += 1
        return FlightHead(self.status, "OK", Headers([("X-N", str(self.calls))]), True, "peer")


async def test_lazy_head_is_made_only_when_a_reader_asks() -> None:
    flight = Flight("k", 1024)
    make = Maker()
    flight.publish_head_lazily(make)
    flight.publish_nowait(b"body")
    flight.finish()
    assert make.calls == 0
    head = await flight.head
    assert (head.status, head.headers.get("X-N")) == (200, "1")
    assert await flight.head is head
    assert make.calls == 1


async def test_reader_waiting_before_the_head_gets_the_lazy_one() -> None:
    flight = Flight("k", 1024)
    reader = flight.join()
    assert reader is not None
    waiting = asyncio.ensure_future(flight.head)
    await asyncio.sleep(0)
    assert not waiting.done()
    make = Maker(203)
    flight.publish_head_lazily(make)
    async with asyncio.timeout(1):
        head = await waiting
    assert head.status == 203
    assert make.calls == 1


async def test_a_later_head_or_failure_does_not_replace_the_lazy_one() -> None:
    flight = Flight("k", 1024)
    make = Maker()
    flight.publish_head_lazily(make)
    flight.publish_head(FlightHead(500, "no", Headers(), False, "peer"))
    flight.publish_head_lazily(Maker(404))
    reader = flight.join()
    assert reader is not None
    flight.publish_nowait(b"part")
    flight.fail(UpstreamReset("cut"))
    head = await flight.head
    assert head.status == 200
    assert await reader.read() == b"part"
    with pytest.raises(UpstreamReset):
        await reader.read()


async def test_failure_before_any_head_is_what_readers_get() -> None:
    flight = Flight("k", 1024)
    flight.fail(UpstreamReset("refused"))
    flight.publish_head_lazily(Maker())
    with pytest.raises(UpstreamReset):
        await flight.head
