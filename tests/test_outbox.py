"""The outbox: writes held during a round of the loop's callbacks go out once the round is
over, every holder's, even if one of them fails; and a held request or response keeps its
place among a connection's other writes (checked on real sockets)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from harvest_cache.outbox import Outbox
from harvest_cache.upstream.connection import UpstreamConnection
from tests.support import MakeCache, open_proxy, wait_until


class Recorder:
    def __init__(self, name: str, flushed: list[str], fail: bool = False) -> None:
        self.name = name
        self.flushed = flushed
        self.fail = fail

    def flush(self) -> None:
        self.flushed.append(self.name)
        if self.fail:
            raise RuntimeError("a bug")


async def test_holders_are_flushed_once_the_round_is_over_in_the_order_they_held() -> None:
    flushed: list[str] = []
    outbox = Outbox(asyncio.get_running_loop())
    first, second = Recorder("first", flushed), Recorder("second", flushed)

    def one_round() -> None:
        outbox.hold(first)
        outbox.hold(second)
        assert flushed == []  # (nothing is written during the round)

    asyncio.get_running_loop().call_soon(one_round)
    await asyncio.sleep(0)  # the round
    await asyncio.sleep(0)  # the flush, scheduled by it
    assert flushed == ["first", "second"]
    # A later round flushes again, once.
    outbox.hold(first)
    await asyncio.sleep(0)
    assert flushed == ["first", "second", "first"]


async def test_a_failing_holder_is_logged_and_the_others_still_flushed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flushed: list[str] = []
    outbox = Outbox(asyncio.get_running_loop())
    with caplog.at_level(logging.ERROR, "harvest_cache"):
        outbox.hold(Recorder("broken", flushed, fail=True))
        outbox.hold(Recorder("next", flushed))
        await asyncio.sleep(0)
    assert flushed == ["broken", "next"]
    assert "held failed" in caplog.text


async def test_a_client_connection_writes_what_it_holds_before_anything_else(
    make_cache: MakeCache,
) -> None:
    cache = await make_cache()
    reader, writer = await open_proxy(cache.address[1])
    try:
        await wait_until(lambda: len(cache.connections) == 1)
        conn = next(iter(cache.connections))
        large = b"x" * 20_000  # (kept apart from its head and written gathered)
        conn.hold_response(b"head 1|", b"body 1|")
        conn.write(b"written at once|")
        conn.hold_response(b"head 2|", large)
        conn.hold_response(b"head 3|", b"body 3|")
        conn.close()  # (after what it holds)
        received = await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
    assert received == b"head 1|body 1|written at once|head 2|" + large + b"head 3|body 3|"


async def test_an_upstream_connection_sends_a_held_request_before_what_it_writes_next() -> None:
    loop = asyncio.get_running_loop()
    received: list[bytes] = []
    got_all = loop.create_future()

    class Origin(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            received.append(data)
            if b"".join(received).endswith(b"body") and not got_all.done():
                got_all.set_result(None)

    server = await loop.create_server(Origin, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    outbox = Outbox(loop)
    try:
        _, conn = await loop.create_connection(
            lambda: UpstreamConnection(("127.0.0.1", port, False), "127.0.0.1", outbox=outbox),
            "127.0.0.1",
            port,
        )
        conn.send_now(b"held head|")
        await conn.write(b"then the body")
        await asyncio.wait_for(got_all, 5)
        assert b"".join(received) == b"held head|then the body"
        # A request held when its connection is closed is abandoned with it.
        conn.send_now(b"never sent")
        conn.close()
        await asyncio.sleep(0.05)
        assert b"".join(received) == b"held head|then the body"
    finally:
        server.close()
        await server.wait_closed()
