"""Partial content in the store: the I/O for harvest_cache.http.partial's indexes and parts.

An index is a stored object under ``index_key(key)``: the head of the representation its
parts are of (status 206; the fields of the latest part, without Content-Range and
Content-Length; the times of the exchange that brought or last validated it) and the encoded
index as its body. Each part is an object under ``part_key(key, token)``, its body the part's
bytes. Changes to one key's index are made one at a time. A part the store has evicted makes
its index unusable: the index and its remaining parts are dropped, and the request goes on as
if nothing were held.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Literal, NamedTuple

from harvest_cache.http.headers import Headers
from harvest_cache.http.partial import (
    BadIndex,
    PartialIndex,
    Piece,
    Received,
    add,
    decode_index,
    encode_index,
    index_key,
    part_key,
)
from harvest_cache.http.policy import StoreDecision
from harvest_cache.http.stored import StoredHead
from harvest_cache.http.validation import freshen
from harvest_cache.server.fetch import head_to_store
from harvest_cache.store.interface import (
    FileBody,
    ObjectStore,
    ObjectWriter,
    StoredObject,
)
from harvest_cache.store.tiered import file_chunks

log = logging.getLogger(__name__)

_PARTIAL_REASON = "Partial Content"


@dataclass(frozen=True, slots=True)
class HeldParts:
    """An index found in the store: its head and what it names; ``tier`` where it was."""

    head: StoredHead
    index: PartialIndex
    tier: Literal["memory", "disk"]


class ReadParts(NamedTuple):
    """The bytes of some parts, in order; ``disk``: whether any came from the disk tier."""

    bodies: list[bytes | FileBody]
    disk: bool


class PartWriter(NamedTuple):
    """A part on its way into the store."""

    part: Received
    token: str
    writer: ObjectWriter


class PartsAsked(NamedTuple):
    """A range request sent upstream for ``key``, its 206 to be kept as a part;
    ``validate``: the index it also validates (sent with its entity tag), if any."""

    key: str
    validate: HeldParts | None


class PartialStore:
    """Indexes and parts of partial content in an ObjectStore, with counters for metrics."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}
        self.parts_stored = 0
        self.completed = 0  # indexes whose parts were put together into a whole object
        self.lost = 0  # indexes dropped because a part they named was gone

    async def find(self, key: str) -> HeldParts | None:
        """The index held for ``key``; None if there is none (a damaged one is dropped)."""
        found = await self._store.get(index_key(key))
        if not isinstance(found, StoredObject):
            return None
        body = found.body
        if not isinstance(body, bytes):  # (indexes are small; this is not one)
            body.file.close()
            await self._store.delete(index_key(key))
            return None
        try:
            index = decode_index(body)
        except BadIndex as e:
            log.warning("dropping the partial content held for %s: %s", key, e)
            await self._store.delete(index_key(key))
            return None
        return HeldParts(found.head, index, found.tier)

    async def read(self, key: str, pieces: Iterable[Piece]) -> ReadParts | None:
        """The bytes of ``pieces``, in order (files the caller closes); None if a part is
        gone (counted in ``lost``: the caller drops the index)."""
        out: list[bytes | FileBody] = []
        disk = False
        for piece in pieces:
            found = await self._store.get(part_key(key, piece.token))
            if not isinstance(found, StoredObject) or found.head.body_length < (
                piece.offset + piece.size
            ):
                close_bodies(out)
                if isinstance(found, StoredObject):
                    close_bodies([found.body])
                self.lost += 1
                return None
            body = found.body
            disk = disk or found.tier == "disk"
            if isinstance(body, bytes):
                out.append(body[piece.offset : piece.offset + piece.size])
            else:
                out.append(FileBody(body.file, body.offset + piece.offset, piece.size))
        return ReadParts(out, disk)

    def open_part(self, key: str, part: Received) -> PartWriter | None:
        """A writer for ``part`` of ``key``'s representation; None if the store cannot take
        a body that size."""
        token = uuid.uuid4().hex
        writer = self._store.open_writer(part_key(key, token), part.last - part.first + 1)
        return None if writer is None else PartWriter(part, token, writer)

    async def keep(
        self,
        key: str,
        url: str,
        pending: PartWriter,
        headers: Headers,
        decision: StoreDecision,
        times: tuple[float, float],
    ) -> bool:
        """Commit a part whose bytes are all written, and add it to ``key``'s index (the
        index's head from this response's ``headers``); whether the parts now cover the
        whole representation, to be put together (``assemble``)."""
        part = pending.part
        fields = headers.copy()
        fields.remove("Content-Range", "Content-Length")
        size = part.last - part.first + 1
        head = head_to_store(url, 206, _PARTIAL_REASON, fields, decision, times, "", size)
        await pending.writer.commit(head)
        async with self._lock(key):
            held = await self.find(key)
            added = add(held.index if held is not None else None, part, pending.token)
            if added is None:
                await self._store.delete(part_key(key, pending.token))
                return False
            self.parts_stored += 1
            blob = encode_index(added.index)
            if not await self._put(index_key(key), head.with_body_length(len(blob)), [blob]):
                await self._delete_parts(key, added.index.tokens)
                return False
            await self._delete_parts(key, added.dropped)
            return added.index.complete

    async def assemble(self, key: str) -> None:
        """Put ``key``'s representation together from parts that cover it, stored whole as
        a 200, and drop the index and parts (a task of its own: it reads and writes the
        whole representation, which a client's answer need not wait for)."""
        async with self._lock(key):
            held = await self.find(key)
            if held is None or not held.index.complete:
                return
            if held.index.length <= self._store.max_object:
                await self._assemble(key, held.head, held.index)

    async def freshen(
        self, key: str, held: HeldParts, not_modified: Headers, times: tuple[float, float]
    ) -> HeldParts:
        """The index's head updated by a 304 that validated it (RFC 9111 4.3.4)."""
        head = freshen(held.head, not_modified, *times)
        await self._store.update_head(index_key(key), head)
        return HeldParts(head, held.index, held.tier)

    async def drop(self, key: str) -> bool:
        """Delete ``key``'s index and its parts (an unsafe method changed the resource, a
        PURGE, or a part of it is gone); whether there was an index."""
        async with self._lock(key):
            held = await self.find(key)
            if held is not None:
                await self._drop(key, held.index)
            return held is not None

    # -- under the key's lock ------------------------------------------------------------

    async def _assemble(self, key: str, head: StoredHead, index: PartialIndex) -> None:
        """Store the whole representation as a 200 under ``key`` from ``index``'s parts,
        then drop the index and parts."""
        pieces = index.pieces(0, index.length - 1)
        assert pieces is not None, "only a complete index is assembled"
        got = await self.read(key, pieces)
        if got is None:
            await self._drop(key, index)
            return
        bodies = got.bodies
        fields = Headers(head.headers)
        fields.add("Content-Length", str(index.length))
        whole = StoredHead(
            head.url,
            200,
            "OK",
            tuple(fields),
            head.request_time,
            head.response_time,
            index.length,
            head.vary_key,
        )
        try:
            stored = await self._put(key, whole, bodies)
        finally:
            close_bodies(bodies)
        if stored:
            self.completed += 1
            await self._drop(key, index)

    async def _drop(self, key: str, index: PartialIndex) -> None:
        await self._store.delete(index_key(key))
        await self._delete_parts(key, index.tokens)

    async def _put(self, key: str, head: StoredHead, bodies: list[bytes | FileBody]) -> bool:
        """Store an object whose body is ``bodies`` in order; whether it was stored."""
        writer = self._store.open_writer(key, head.body_length)
        if writer is None:
            return False
        try:
            for body in bodies:
                if isinstance(body, bytes):
                    await writer.write(body)
                    continue
                async for chunk in file_chunks(body):
                    await writer.write(chunk)
        except OSError as e:
            log.warning("cannot put together %s from its parts: %s", key, e)
            await writer.abort()
            return False
        except BaseException:
            await writer.abort()
            raise
        await writer.commit(head)
        return True

    async def _delete_parts(self, key: str, tokens: Iterable[str]) -> None:
        for token in tokens:
            await self._store.delete(part_key(key, token))

    @asynccontextmanager
    async def _lock(self, key: str) -> AsyncIterator[None]:
        """``key``'s lock, kept only while someone holds or waits for it."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._users[key] = self._users.get(key, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._users[key] -= 1
            if not self._users[key]:
                del self._users[key], self._locks[key]


def close_bodies(bodies: Iterable[bytes | FileBody]) -> None:
    """Close the files of bodies read from disk."""
    for body in bodies:
        if isinstance(body, FileBody):
            with suppress(OSError):
                body.file.close()
