"""The workers' channel protocol over real socket pairs: a worker's deletion is confirmed only
once every other worker has dropped its copy (or died), and never waits without bound."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from harvest_cache import workers
from harvest_cache.config import Config
from harvest_cache.workers import Channel, Supervisor, _Worker


class End:
    """The far end of a channel, read and written as JSON lines."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def read(self) -> dict[str, Any]:
        line = await asyncio.wait_for(self.reader.readline(), 5)
        assert line, "the channel closed"
        message: dict[str, Any] = json.loads(line)
        return message

    async def nothing_within(self, seconds: float) -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(self.reader.readline(), seconds)

    def write(self, message: dict[str, Any]) -> None:
        self.writer.write(json.dumps(message).encode() + b"\n")


@pytest.fixture
async def worker_channel() -> AsyncIterator[tuple[Channel, End, list[str]]]:
    ours, theirs = socket.socketpair()
    dropped: list[str] = []
    channel = await Channel.open(theirs.detach(), dropped.append)
    reader, writer = await asyncio.open_connection(sock=ours)
    yield channel, End(reader, writer), dropped
    channel.close()
    writer.close()


async def test_a_deletion_returns_once_the_supervisor_confirms_it(
    worker_channel: tuple[Channel, End, list[str]],
) -> None:
    channel, supervisor, _ = worker_channel
    deleting = asyncio.ensure_future(channel.deleted("http://o/a"))
    message = await supervisor.read()
    assert message == {"deleted": "http://o/a", "id": message["id"]}
    supervisor.write({"confirmed": message["id"] + 1})  # another deletion's: not this one
    await asyncio.sleep(0.05)
    assert not deleting.done()
    supervisor.write({"confirmed": message["id"]})
    await asyncio.wait_for(deleting, 5)


async def test_a_drop_asked_to_be_acknowledged_is_acknowledged_after_the_drop(
    worker_channel: tuple[Channel, End, list[str]],
) -> None:
    channel, supervisor, dropped = worker_channel
    supervisor.write({"drop": "http://o/plain"})
    supervisor.write({"drop": "http://o/purged", "ack": 7})
    assert await supervisor.read() == {"dropped": 7}
    assert dropped == ["http://o/plain", "http://o/purged"]
    channel.changed("http://o/new")
    assert await supervisor.read() == {"changed": "http://o/new"}


async def test_an_unconfirmed_deletion_gives_up_after_the_timeout(
    worker_channel: tuple[Channel, End, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    channel, supervisor, _ = worker_channel
    monkeypatch.setattr(workers, "CONFIRM_TIMEOUT", 0.1)
    with caplog.at_level(logging.WARNING, "harvest_cache"):
        await asyncio.wait_for(channel.deleted("http://o/stuck"), 5)
    assert (await supervisor.read())["deleted"] == "http://o/stuck"
    assert "did not confirm dropping http://o/stuck" in caplog.text


async def test_closing_the_channel_releases_a_waiting_deletion(
    worker_channel: tuple[Channel, End, list[str]],
) -> None:
    channel, supervisor, _ = worker_channel
    deleting = asyncio.ensure_future(channel.deleted("http://o/a"))
    await supervisor.read()
    channel.close()
    await asyncio.wait_for(deleting, 1)
    # A closed channel confirms at once: there is nobody to ask.
    await asyncio.wait_for(channel.deleted("http://o/b"), 1)


# -- the supervisor's side ------------------------------------------------------------------------


class Workers:
    """A supervisor's routing with ``count`` workers whose channels the test holds."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor
        self.ends: list[End] = []
        self.listening: list[asyncio.Task[None]] = []

    async def add(self, index: int) -> End:
        ours, theirs = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=ours)
        # (the routing never touches the process: the real one is tested with real workers)
        worker = _Worker(index, None, ours, writer)  # type: ignore[arg-type]
        self.supervisor.workers[index] = worker
        listen = self.supervisor._listen(worker, reader)
        worker.reader_task = asyncio.ensure_future(listen)
        far_reader, far_writer = await asyncio.open_connection(sock=theirs)
        end = End(far_reader, far_writer)
        self.ends.append(end)
        return end

    def kill(self, index: int) -> None:
        self.supervisor._forget(self.supervisor.workers[index])


@pytest.fixture
async def routing() -> AsyncIterator[Workers]:
    found = Workers(Supervisor(Config(), [], 3))
    yield found
    for worker in list(found.supervisor.workers.values()):
        found.supervisor._forget(worker)
    for end in found.ends:
        end.writer.close()


async def test_the_supervisor_confirms_a_deletion_once_every_other_worker_dropped_it(
    routing: Workers,
) -> None:
    deleter, first, second = [await routing.add(i) for i in range(3)]
    deleter.write({"deleted": "http://o/a", "id": 41})
    asked = [await first.read(), await second.read()]
    assert [m["drop"] for m in asked] == ["http://o/a", "http://o/a"]
    assert asked[0]["ack"] == asked[1]["ack"]
    first.write({"dropped": asked[0]["ack"]})
    await deleter.nothing_within(0.1)
    second.write({"dropped": asked[1]["ack"]})
    assert await deleter.read() == {"confirmed": 41}
    assert routing.supervisor.deletions == {}
    # Plain changes go to the others unacknowledged.
    first.write({"changed": "http://o/b"})
    assert await deleter.read() == {"drop": "http://o/b"}
    assert await second.read() == {"drop": "http://o/b"}


async def test_a_worker_that_dies_counts_as_having_dropped_its_copy(routing: Workers) -> None:
    deleter, first, second = [await routing.add(i) for i in range(3)]
    deleter.write({"deleted": "http://o/a", "id": 5})
    ack = (await first.read())["ack"]
    await second.read()
    first.write({"dropped": ack})
    await deleter.nothing_within(0.1)
    routing.kill(2)
    assert await deleter.read() == {"confirmed": 5}


async def test_a_deletion_with_no_other_worker_is_confirmed_at_once(routing: Workers) -> None:
    only = await routing.add(0)
    only.write({"deleted": "http://o/a", "id": 1})
    assert await only.read() == {"confirmed": 1}
    # A deleter that dies before its confirmation leaves nothing waiting.
    other = await routing.add(1)
    only.write({"deleted": "http://o/b", "id": 2})
    await other.read()
    routing.kill(0)
    assert routing.supervisor.deletions == {}
