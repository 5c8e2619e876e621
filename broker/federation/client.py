"""Federated search: a query sent to the brokers the HSR picks for it, in parallel, with one
deadline, and their answers merged (broker/federation/merge.py).

It owns the HTTP session the broker asks other brokers with (the collector owns the one it
pulls with). One federated search::

    GET {hsr}/api/hsr/route?q=QUERY&limit=N      the brokers, ranked, with the reason
    GET {broker}/api/search?q=QUERY&limit=K      each chosen broker, all at once

through ``broker.proxy`` when one is set and ``federation.via_proxy`` (brokers are
cache-aware clients). Routing and the answers share ``federation.deadline``: a broker that has
not answered by then is ``late`` (its request is cut), one that failed (refused the
connection, answered an error or something that is no search page) is ``failed`` with the
reason; neither holds up the others. Only a failed routing fails the search
(FederationError): without the HSR there is no one to ask.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp

from broker.config import BrokerSettings, FederationSettings
from broker.errors import FederationError
from broker.federation.merge import (
    MAX_RESULTS,
    Answer,
    FederatedPage,
    MalformedAnswer,
    chosen,
    merged_page,
    route_answer,
    search_answer,
)
from broker.federation.route import Ranked
from broker.query import describe, parse
from harvest_common.cache_client import request_class

MAX_BODY = 8 * 1024 * 1024  # bytes of one answer (a page of 1,000 results with snippets)
ERROR_EXCERPT = 200
THREAD_FROM = 64 * 1024  # bytes of JSON worth decoding on a worker thread


class _Refused(Exception):
    """An answer that cannot be used: ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class Federation:
    """Federated searches from one broker; an async context manager owning the session."""

    def __init__(
        self, settings: FederationSettings, broker: BrokerSettings, hsr: Callable[[], str]
    ) -> None:
        """``hsr()``: the HSR's URL when a search is routed (the broker's own address is
        known only once it listens)."""
        self._settings = settings
        self._user_agent = broker.user_agent
        self._https_via_proxy = broker.https_via_proxy
        self._proxy = broker.proxy if settings.via_proxy else None
        self._hsr = hsr
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:
        via = f" via {self._proxy}" if self._proxy else ""
        return f"Federation({self._settings.brokers} brokers at most{via})"

    async def __aenter__(self) -> Federation:
        self._session = aiohttp.ClientSession(
            request_class=request_class(self._https_via_proxy),
            headers={"User-Agent": self._user_agent, "Accept": "application/json"},
            # The search's deadline bounds every request (asyncio.timeout_at below).
            timeout=aiohttp.ClientTimeout(total=None),
        )
        return self

    async def __aexit__(self, *_: object) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def search(
        self, text: str, *, limit: int, offset: int = 0, case_sensitive: bool = False
    ) -> FederatedPage:
        """The merged page of ``text`` from the brokers the HSR picks. QuerySyntaxError
        before anything is asked if it does not parse; FederationError if the HSR cannot
        route it."""
        node = parse(text, case_sensitive=case_sensitive)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._settings.deadline
        ranked = await self._route(text, deadline)
        params = {
            "q": text,
            "limit": str(min(offset + limit, MAX_RESULTS)),
            "case": "1" if case_sensitive else "0",
        }
        async with asyncio.TaskGroup() as group:
            asking = [
                group.create_task(self._ask(broker, params, deadline))
                for broker in chosen(ranked, self._settings.brokers)
            ]
        return merged_page(describe(node), [t.result() for t in asking], offset, limit)

    async def _route(self, text: str, deadline: float) -> list[Ranked]:
        url = f"{self._hsr().rstrip('/')}/api/hsr/route"
        params = {"q": text, "limit": str(self._settings.brokers)}
        try:
            async with asyncio.timeout_at(deadline):
                return route_answer(await self._json(url, params))
        except TimeoutError:
            reason = f"{url} did not answer within {self._settings.deadline:g} s"
            raise FederationError(f"cannot route the query: {reason}") from None
        except (_Refused, MalformedAnswer) as error:
            raise FederationError(f"cannot route the query: {url}: {error}") from None

    async def _ask(self, broker: Ranked, params: dict[str, str], deadline: float) -> Answer:
        """One broker's answer; never raises (what went wrong is the answer's outcome)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        url = f"{broker.url.rstrip('/')}/api/search"
        try:
            async with asyncio.timeout_at(deadline):
                total, results = search_answer(await self._json(url, params))
        except TimeoutError:
            reason = f"no answer within {self._settings.deadline:g} s"
            return Answer(broker, "late", loop.time() - started, error=reason)
        except (_Refused, MalformedAnswer) as error:
            return Answer(broker, "failed", loop.time() - started, error=str(error))
        return Answer(broker, "answered", loop.time() - started, total, results)

    async def _json(self, url: str, params: dict[str, str]) -> Any:
        """The JSON ``url`` answers with 200; _Refused otherwise. TimeoutError passes."""
        if self._session is None:
            raise RuntimeError("the federation is used outside `async with`")
        try:
            async with self._session.get(url, params=params, proxy=self._proxy) as response:
                body = await _bounded(response.content, MAX_BODY)
                status = response.status
        except aiohttp.ClientConnectionError as error:
            raise _Refused(f"cannot connect: {type(error).__name__}: {error}") from None
        except aiohttp.ClientError as error:
            raise _Refused(f"{type(error).__name__}: {error}") from None
        if status != 200:
            excerpt = " ".join(body[:ERROR_EXCERPT].decode("utf-8", "replace").split())
            via = " (through the cache)" if self._proxy else ""
            raise _Refused(f"answered {status}{via}: {excerpt}")
        try:
            if len(body) < THREAD_FROM:
                return json.loads(body)
            return await asyncio.to_thread(json.loads, body)
        except ValueError as error:
            raise _Refused(f"the answer is not JSON: {error}") from None


async def _bounded(content: aiohttp.StreamReader, limit: int) -> bytes:
    """The body, or _Refused once it is over ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    async for chunk in content.iter_any():
        size += len(chunk)
        if size > limit:
            raise _Refused(f"the answer is over {limit} bytes")
        parts.append(chunk)
    return b"".join(parts)
