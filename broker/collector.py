"""The pull driver: fetches one collection's SOIF stream and stages it into the registry.

It owns the broker's only ``aiohttp.ClientSession``. One pull::

    GET {source}/records[?since=CURSOR]                 kind = "gatherer"
    GET {source}/bulk[?since=CURSOR][&query=QUERY]      kind = "broker"

    -> 200, Content-Encoding: zstd | gzip | (none)
       X-Harvest-Until: the next cursor      X-Harvest-Complete: true | false
       body: a SOIF stream (bare @FILE objects, @UPDATE / @REFRESH / @DELETE wrappers)

``since`` is sent when the collection is incremental, the registry holds a cursor for it and
the pull is not ``full``. The body is decompressed and decoded step by step by the SOIF
transport (harvest_common.soif.transport: at most ``STEP`` bytes of output at a time, so a
small compressed body cannot balloon in memory) and handed to the registry's staged pull in
batches of ``BATCH`` items; the cursor and completeness from the headers go to its commit.
Every failure before the commit (connection, timeout, status, headers, compression, SOIF, a
body cut short, storage) raises ``CollectError`` and aborts the staged pull: nothing of it is
applied and the cursor stays where it was.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

import aiohttp

from broker.config import BrokerSettings, CollectionConfig
from broker.errors import CollectError, StorageError
from broker.registry import Applied, Registry
from harvest_common.cache_client import request_class
from harvest_common.errors import MalformedStream, SoifError
from harvest_common.soif import Item
from harvest_common.soif.transport import ACCEPT_ENCODING, BodyDecoder, content_coding

BATCH = 500
# How much of an error response's body is quoted in the CollectError.
ERROR_EXCERPT = 200

UNTIL = "X-Harvest-Until"
COMPLETE = "X-Harvest-Complete"

# A gatherer's cursor is its update time in epoch seconds (what its ?since accepts); another
# broker's is opaque to us, so only its shape is checked: one short run of visible ASCII.
_EPOCH = re.compile(r"[0-9]{1,15}(?:\.[0-9]{1,9})?")
_TOKEN = re.compile(r"[!-~]{1,256}")


@dataclass(frozen=True, slots=True)
class PullResult:
    """One successful pull: what came over the wire and what the registry applied."""

    collection: str
    items: int  # SOIF items decoded and staged
    bytes: int  # body bytes as received (compressed)
    applied: Applied
    complete: bool  # the source said the stream held every object
    cursor: str | None  # where the next incremental pull starts
    seconds: float
    since: str | None = None  # the cursor this pull started from (None: everything)

    def __repr__(self) -> str:
        return (
            f"PullResult({self.collection!r}, {self.items} items, {self.bytes} bytes, "
            f"{len(self.applied.upserted)} upserted, {len(self.applied.removed)} removed, "
            f"{self.applied.refreshed} refreshed, {self.seconds:.3f} s)"
        )


class Puller(Protocol):
    """What the scheduler needs of a collector."""

    async def pull(
        self, collection: CollectionConfig, *, now: float, full: bool = False
    ) -> PullResult: ...


def _cursor(headers: Mapping[str, str], kind: str) -> str:
    value = headers.get(UNTIL)
    if value is None:
        raise MalformedStream(f"no {UNTIL} header")
    value = value.strip()
    shape = _EPOCH if kind == "gatherer" else _TOKEN
    if not shape.fullmatch(value):
        raise MalformedStream(f"malformed {UNTIL}: {value[:80]!r}")
    return value


def _complete(headers: Mapping[str, str]) -> bool:
    value = headers.get(COMPLETE)
    if value is None:
        raise MalformedStream(f"no {COMPLETE} header")
    flag = value.strip().lower()
    if flag not in ("true", "false"):
        raise MalformedStream(f"{COMPLETE} must be true or false, got {value[:80]!r}")
    return flag == "true"


@dataclass(frozen=True, slots=True)
class _Transfer:
    items: int
    bytes: int
    cursor: str
    complete: bool


class Collector:
    """Pulls collections into the registry; an async context manager owning the HTTP session.

    Pulls of one collection are serialised (each reads the cursor the previous one left);
    pulls of different collections may run concurrently.
    """

    def __init__(self, settings: BrokerSettings, registry: Registry) -> None:
        self._settings = settings
        self._registry = registry
        self._session: aiohttp.ClientSession | None = None
        self._locks: dict[str, asyncio.Lock] = {}
        self._stack = AsyncExitStack()

    def __repr__(self) -> str:
        state = "open" if self._session is not None else "closed"
        return f"Collector({self._settings.user_agent!r}, {state})"

    async def __aenter__(self) -> Collector:
        self._session = await self._stack.enter_async_context(
            aiohttp.ClientSession(
                request_class=request_class(self._settings.https_via_proxy),
                auto_decompress=False,  # decompressed here, step by step
                headers={
                    "User-Agent": self._settings.user_agent,
                    "Accept-Encoding": ACCEPT_ENCODING,
                },
                # One deadline for the whole pull (asyncio.timeout in pull), not aiohttp's.
                timeout=aiohttp.ClientTimeout(total=None),
            )
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._session = None
        await self._stack.aclose()

    async def pull(
        self, collection: CollectionConfig, *, now: float, full: bool = False
    ) -> PullResult:
        """Pull ``collection`` (only the changes since its cursor unless ``full`` or the
        collection is not incremental) and apply it; ``now`` (epoch seconds) dates the
        objects' lifetimes. Raises CollectError, having applied nothing, on any failure."""
        name = collection.name
        loop = asyncio.get_running_loop()
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            started = loop.time()
            try:
                async with self._registry.begin(name) as staged:
                    # The deadline covers the transfer, not the commit: a commit cancelled
                    # midway might still land, and the caller would not learn what it applied.
                    async with asyncio.timeout(self._settings.pull_timeout):
                        since = None
                        if collection.incremental and not full:
                            since = await self._registry.cursor(name)
                        transfer = await self._transfer(collection, since, staged.add)
                    ttl = collection.ttl or self._settings.default_ttl
                    applied = await staged.commit(
                        cursor=transfer.cursor,
                        complete=transfer.complete,
                        now=now,
                        default_ttl=ttl,
                    )
            except CollectError:
                raise
            except TimeoutError as error:  # before ClientError: ServerTimeoutError is both
                reason = f"no complete answer within {self._settings.pull_timeout:g} s"
                raise CollectError(name, "timeout", reason) from error
            except aiohttp.ClientPayloadError as error:
                reason = f"the body ended early or its framing is broken: {error}"
                raise CollectError(name, "protocol", reason) from error
            except aiohttp.ClientConnectionError as error:
                raise CollectError(name, "connect", f"{type(error).__name__}: {error}") from error
            except aiohttp.ClientError as error:
                raise CollectError(name, "protocol", f"{type(error).__name__}: {error}") from error
            except (MalformedStream, SoifError) as error:
                raise CollectError(name, "protocol", str(error)) from error
            except StorageError as error:
                raise CollectError(name, "storage", str(error)) from error
        return PullResult(
            collection=name,
            items=transfer.items,
            bytes=transfer.bytes,
            applied=applied,
            complete=transfer.complete,
            cursor=transfer.cursor,
            seconds=loop.time() - started,
            since=since,
        )

    def _request(
        self, collection: CollectionConfig, since: str | None
    ) -> tuple[str, dict[str, str]]:
        params: dict[str, str] = {}
        if since is not None:
            params["since"] = since
        if collection.kind == "broker":
            if collection.query is not None:
                params["query"] = collection.query
            return f"{collection.source}/bulk", params
        return f"{collection.source}/records", params

    async def _transfer(
        self,
        collection: CollectionConfig,
        since: str | None,
        add: Callable[[list[Item]], Awaitable[None]],
    ) -> _Transfer:
        if self._session is None:
            raise RuntimeError("the collector is used outside `async with`")
        proxy = None
        if collection.via_proxy:
            proxy = self._settings.proxy
            if proxy is None:
                reason = "the collection is pulled via_proxy, but broker.proxy is not set"
                raise CollectError(collection.name, "connect", reason)
        url, params = self._request(collection, since)
        # no-cache: a stored answer for the same ?since could be stale, and would then skip
        # changes for good; a cache on the way must ask the source every time.
        headers = {"Cache-Control": "no-cache"}
        async with self._session.get(url, params=params, headers=headers, proxy=proxy) as response:
            if response.status != 200:
                text = ""
                if "Content-Encoding" not in response.headers:  # else not worth quoting
                    excerpt = await response.content.read(ERROR_EXCERPT)
                    text = " ".join(excerpt.decode("utf-8", "replace").split())
                reason = f"{url} answered {response.status} {response.reason or ''}".rstrip()
                raise CollectError(
                    collection.name, "status", f"{reason}: {text}" if text else reason
                )
            cursor = _cursor(response.headers, collection.kind)
            complete = _complete(response.headers)
            body = BodyDecoder(content_coding(response.headers))
            loop = asyncio.get_running_loop()
            batch: list[Item] = []
            items = wire = 0
            async for chunk in response.content.iter_any():
                wire += len(chunk)
                body.push(chunk)
                while body.pending:
                    batch += await loop.run_in_executor(None, body.step)
                    while len(batch) >= BATCH:
                        await add(batch[:BATCH])
                        items += BATCH
                        del batch[:BATCH]
            await loop.run_in_executor(None, body.finish)
            if batch:
                await add(batch)
                items += len(batch)
        return _Transfer(items=items, bytes=wire, cursor=cursor, complete=complete)
