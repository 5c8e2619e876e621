"""What a broker offers its replicator (replicator/): a collection's changes with their
versions, the states of chosen objects, the application of another member's states, and the
Merkle leaves and bucket contents that anti-entropy compares. All admin (Bearer token): they
read tombstones and write the registry.

::

    GET  /api/replica/{collection}/changes?after=SEQ[&limit=N][&wait=S]
         -> ChangeList JSON (harvest_common/replication/wire.py); with ``wait``, held up to
            S seconds until there is a change after SEQ
    POST /api/replica/{collection}/wanted   {"changes": [[oid, version], ...]}
         -> {"wanted": [oid, ...]}: those offered at a version newer than the one held
    POST /api/replica/{collection}/entries  {"oids": [...]}
         -> a transfer (application/x-harvest-replica: zstd,
            harvest_common/replication/wire.py) of those held in this collection
    POST /api/replica/{collection}/apply    a transfer
         -> {"upserted": n, "removed": n, "skipped": n, "last_seq": n}
    GET  /api/replica/{collection}/leaves
         -> the 2**bits leaf digests (32 bytes each) of the collection's Merkle tree;
            X-Harvest-Bucket-Bits, X-Harvest-Seq (the last change they include)
    GET  /api/replica/{collection}/buckets?b=N,N,...
         -> {"entries": [[oid, version], ...]} of those buckets

Digests are computed from one read of the collection's versions and kept until the registry
changes (hashing 100,000 entries takes a third of a second, on a worker thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from aiohttp import web

from broker.errors import ReplicaError
from broker.services import Services
from harvest_common.errors import ReplicatorError
from harvest_common.replication import wire
from harvest_common.replication.merkle import BUCKET_BITS_DEFAULT, BucketDigests, bucket_of
from harvest_common.replication.version import Version

TRANSFER_TYPE: Final = "application/x-harvest-replica"
MAX_CHANGES: Final = 10_000  # per change list
MAX_OIDS: Final = 10_000  # per entries request
MAX_WAIT: Final = 60.0
MAX_TRANSFER: Final = 256 * 1024 * 1024  # compressed bytes of one apply
MAX_JSON: Final = 16 * 1024 * 1024
# A snapshot is brought up to date from the changes after it when they are fewer than this,
# and rebuilt from a full read when it is older than REBUILD seconds.
INCREMENTAL: Final = 50_000
REBUILD: Final = 300.0

T = TypeVar("T")

Authorize = Callable[[web.Request], None]


@dataclass(slots=True)
class _Snapshot:
    """A collection's Merkle digests and bucket contents as of change ``seq``, kept up to
    date by the changes after it (hashing only what changed) and rebuilt from a full read
    now and then (which also drops what left the collection without a change of its own:
    a tombstone past its retention, an object another collection took over)."""

    seq: int
    built: float  # monotonic time of the last full read
    digests: BucketDigests = field(default_factory=lambda: BucketDigests(BUCKET_BITS_DEFAULT))
    buckets: dict[int, dict[str, Version]] = field(default_factory=dict)

    def put(self, oid: str, version: Version) -> None:
        held = self.buckets.setdefault(bucket_of(oid, self.digests.bits), {})
        old = held.get(oid)
        self.digests.replace(oid, None if old is None else old.encode(), version.encode())
        held[oid] = version


def _snapshot(seq: int, versions: Sequence[tuple[str, Version]], now: float) -> _Snapshot:
    snapshot = _Snapshot(seq, now)
    for oid, version in versions:
        snapshot.put(oid, version)
    return snapshot


def _update(snapshot: _Snapshot, seq: int, changes: Sequence[tuple[int, str, Version]]) -> None:
    for _, oid, version in changes:
        snapshot.put(oid, version)
    snapshot.seq = seq


def _leaves(snapshot: _Snapshot) -> bytes:
    digests = snapshot.digests
    return b"".join(digests.leaf(bucket) for bucket in range(1 << digests.bits))


class BadReplicaRequest(ReplicaError):
    """A malformed replica request (400)."""


class ReplicaService:
    def __init__(self, services: Services, authorize: Authorize) -> None:
        self._services = services
        self._authorize = authorize
        self._snapshots: dict[str, _Snapshot] = {}
        self._computing: dict[str, asyncio.Lock] = {}

    def _collection(self, request: web.Request) -> str:
        self._authorize(request)
        return request.match_info["collection"]

    async def changes(self, request: web.Request) -> web.Response:
        collection = self._collection(request)
        after = _integer(request.query.get("after", "0"), "after", 0, 2**62)
        limit = _integer(request.query.get("limit", "1000"), "limit", 0, MAX_CHANGES)
        wait = _number(request.query.get("wait", "0"), "wait", 0.0, MAX_WAIT)
        registry = self._services.registry
        deadline = time.monotonic() + wait
        while True:
            signal = self._services.changed.current()  # before reading: no change is missed
            last = await registry.last_seq()
            found = await registry.replica_changes(collection, after, limit)
            remaining = deadline - time.monotonic()
            if found or remaining <= 0 or limit == 0 or self._services.changed.closed:
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await signal.wait()
        # A list cut at its limit accounts for its last change; a whole one for every change
        # up to the last number given (a change made meanwhile may be in it, above that).
        cut = limit > 0 and len(found) == limit
        through = found[-1][0] if cut else max(after, last, found[-1][0] if found else 0)
        changes = tuple(wire.Change(*change) for change in found)
        listed = wire.ChangeList(collection, after, last, changes, through)
        return web.json_response(listed.to_json())

    async def wanted(self, request: web.Request) -> web.Response:
        self._collection(request)  # versions are per object, whatever collection holds it
        body = await _json(request)
        offered = body.get("changes")
        if not isinstance(offered, list) or len(offered) > MAX_CHANGES:
            raise BadReplicaRequest(f"changes: a list of at most {MAX_CHANGES} [oid, version]")
        versions: dict[str, Version] = {}
        for item in offered:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
                raise BadReplicaRequest(f"a change is [oid, version], not {item!r}")
            version = _version(item[1])
            if item[0] not in versions or versions[item[0]] < version:
                versions[item[0]] = version
        held = await self._services.registry.replica_versions(versions)
        wanted = [oid for oid, v in versions.items() if oid not in held or held[oid] < v]
        return web.json_response({"wanted": wanted})

    async def entries(self, request: web.Request) -> web.Response:
        collection = self._collection(request)
        body = await _json(request)
        oids = body.get("oids")
        if not (isinstance(oids, list) and len(oids) <= MAX_OIDS):
            raise BadReplicaRequest(f"oids: a list of at most {MAX_OIDS} strings")
        if not all(isinstance(oid, str) for oid in oids):
            raise BadReplicaRequest("oids: a list of strings")
        # This collection's only: an apply to it refuses a transfer holding another's (an
        # object another collection has taken over), whole.
        found = [
            entry
            for entry in await self._services.registry.replica_entries(oids)
            if entry.collection == collection
        ]
        packed = await asyncio.to_thread(wire.pack, found)
        return web.Response(body=packed, content_type=TRANSFER_TYPE)

    async def apply(self, request: web.Request) -> web.Response:
        collection = self._collection(request)
        data = await _read_limited(request, MAX_TRANSFER)
        try:
            entries = await asyncio.to_thread(wire.unpack, data)
        except ReplicatorError as error:
            raise BadReplicaRequest(f"transfer refused: {error}") from None
        applied = await self._services.registry.apply_replica(collection, entries, now=time.time())
        if applied.upserted or applied.removed:
            # The registry is the truth: its changes are announced now, and the index
            # follows in the background (the next batch need not wait for its commit).
            self._services.changed.notify()
            self._services.catch_up_soon()
        return web.json_response(
            {
                "upserted": len(applied.upserted),
                "removed": len(applied.removed),
                "skipped": applied.skipped,
                "last_seq": applied.last_seq,
            }
        )

    async def _read(self, collection: str, read: Callable[[_Snapshot], T]) -> tuple[int, T]:
        """``read`` of the collection's snapshot, brought up to date first; both on a worker
        thread, under the collection's lock (no read sees one half updated)."""
        lock = self._computing.setdefault(collection, asyncio.Lock())
        async with lock:
            registry = self._services.registry
            seq = await registry.last_seq()
            snapshot = self._snapshots.get(collection)
            now = time.monotonic()
            if snapshot is not None and snapshot.seq != seq and now - snapshot.built < REBUILD:
                changes = await registry.replica_changes(collection, snapshot.seq, INCREMENTAL)
                if len(changes) < INCREMENTAL:
                    await asyncio.to_thread(_update, snapshot, seq, changes)
            if snapshot is None or snapshot.seq != seq:
                versions = await registry.collection_versions(collection)
                snapshot = await asyncio.to_thread(_snapshot, seq, versions, now)
                self._snapshots[collection] = snapshot
            return snapshot.seq, await asyncio.to_thread(read, snapshot)

    async def leaves(self, request: web.Request) -> web.Response:
        seq, body = await self._read(self._collection(request), _leaves)
        headers = {"X-Harvest-Bucket-Bits": str(BUCKET_BITS_DEFAULT), "X-Harvest-Seq": str(seq)}
        return web.Response(body=body, content_type="application/octet-stream", headers=headers)

    async def buckets(self, request: web.Request) -> web.Response:
        collection = self._collection(request)
        top = 1 << BUCKET_BITS_DEFAULT
        try:
            asked = [int(part) for part in request.query.get("b", "").split(",") if part]
        except ValueError:
            raise BadReplicaRequest("b: comma-separated bucket numbers") from None
        if any(not 0 <= b < top for b in asked):
            raise BadReplicaRequest(f"b: bucket numbers are 0..{top - 1}")

        def listed(snapshot: _Snapshot) -> list[list[Any]]:
            return [
                [oid, version.to_json()]
                for b in asked
                for oid, version in snapshot.buckets.get(b, {}).items()
            ]

        _, found = await self._read(collection, listed)
        return web.json_response({"entries": found})


def _version(value: object) -> Version:
    try:
        return Version.from_json(value)
    except ReplicatorError as error:
        raise BadReplicaRequest(str(error)) from None


def _integer(text: str, name: str, lo: int, hi: int) -> int:
    # ASCII digits only ("²" is a digit to isdigit, not to int), and few enough for int().
    if not (text.isascii() and text.isdigit() and len(text) <= 20) or not lo <= int(text) <= hi:
        raise BadReplicaRequest(f"{name}: an integer in {lo}..{hi}, not {text!r}")
    return int(text)


def _number(text: str, name: str, lo: float, hi: float) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not lo <= value <= hi:
        raise BadReplicaRequest(f"{name}: a number in {lo:g}..{hi:g}, not {text!r}")
    return value


async def _read_limited(request: web.Request, limit: int) -> bytes:
    """The body, refused (413) beyond ``limit`` bytes without reading it all."""
    if request.content_length is not None and request.content_length > limit:
        raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=request.content_length)
    parts: list[bytes] = []
    size = 0
    while chunk := await request.content.readany():
        size += len(chunk)
        if size > limit:
            raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=size)
        parts.append(chunk)
    return b"".join(parts)


async def _json(request: web.Request) -> dict[str, Any]:
    data = await _read_limited(request, MAX_JSON)
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as error:  # also too deep, or an integer too long
        raise BadReplicaRequest(f"the body is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise BadReplicaRequest("the body is a JSON object")
    return value


def add_routes(app: web.Application, services: Services, authorize: Authorize) -> None:
    service = ReplicaService(services, authorize)
    base = "/api/replica/{collection}"
    app.router.add_get(f"{base}/changes", service.changes)
    app.router.add_post(f"{base}/wanted", service.wanted)
    app.router.add_post(f"{base}/entries", service.entries)
    app.router.add_post(f"{base}/apply", service.apply)
    app.router.add_get(f"{base}/leaves", service.leaves)
    app.router.add_get(f"{base}/buckets", service.buckets)
