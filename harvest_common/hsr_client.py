"""Registering at the Harvest Server Registry (HSR), as every Harvest server does: a server
record, posting it, and keeping it renewed while the server runs, from the ``[hsr]`` settings.

The HSR is a broker holding one SOIF record per gatherer, broker, cache and replicator
(broker/hsr.py is its side): template ``GATHERER``, ``BROKER``, ``CACHE`` or ``REPLICATOR``,
the URL where the server answers (its identity: registering the same URL again renews it), and
the attributes Name, Host, Port (required), Description, Administrator, Software-Version and
Time-to-Live, and any a kind of server adds (a gatherer: what it gathers). ``server_record``
builds one, ``register`` posts it (``POST /api/hsr/register``), ``registering`` renews it
every ``renew`` seconds while a block runs, and ``registered`` does that for a running server
from its settings. Attributes that change while the server runs (a broker's content summary)
are ``LiveAttributes``: the record is made again from them at each renewal, and a change
renews at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from harvest_common.config import number, optional_url, setting
from harvest_common.errors import HsrClientError
from harvest_common.soif import Record, encode
from harvest_common.soif.transport import SOIF_TYPE
from harvest_common.tasks import running

log = logging.getLogger(__name__)

TYPES = ("gatherer", "broker", "cache", "replicator")
DAY = 86_400.0
# After a failed renewal a server tries again this soon (or at its renew period if sooner).
RETRY = 60.0


@dataclass(frozen=True, slots=True)
class HsrSettings:
    url: str | None = setting(
        None,
        "The Harvest Server Registry (a broker) to register this server at; none: do not.",
        optional_url,
    )
    description: str = setting(
        "", "What this server holds or serves, for the registry's record.", str
    )
    administrator: str = setting("", "Who runs it (an address), for the registry's record.", str)
    renew: float = setting(
        DAY,
        "Seconds between renewals of the registration (before its TTL runs out).",
        number(60, 1e8),
    )


class LiveAttributes(Protocol):
    """Attributes of a server's record that change while it runs."""

    def current(self) -> tuple[int, Sequence[tuple[str, str]]]:
        """The attributes now, with their version (a number that grows with each change)."""

    async def changed(self, version: int) -> None:
        """Return once the attributes are newer than ``version``."""


def seconds_text(value: float) -> str:
    """Seconds as a record holds them: whole, or with three decimals."""
    return str(int(value)) if value == int(value) else f"{value:.3f}"


def server_record(
    kind: str,
    *,
    name: str,
    host: str,
    port: int,
    url: str | None = None,
    description: str = "",
    administrator: str = "",
    version: str = "",
    ttl: float | None = None,
    attributes: Sequence[tuple[str, str]] = (),
) -> Record:
    """A server record of ``kind`` (gatherer, broker, cache, replicator), as a server
    registering itself builds it; ``url`` defaults to ``http://host:port/``; ``attributes``
    are further (name, value) pairs, after the common ones."""
    if kind not in TYPES:
        raise ValueError(f"server type must be one of {', '.join(TYPES)}, got {kind!r}")
    where = f"[{host}]" if ":" in host and not host.startswith("[") else host
    common: list[tuple[str, bytes]] = [
        ("Name", name.encode()),
        ("Host", host.encode()),
        ("Port", str(port).encode()),
    ]
    for attribute, value in (
        ("Description", description),
        ("Administrator", administrator),
        ("Software-Version", version),
    ):
        if value:
            common.append((attribute, value.encode()))
    common += [(attribute, value.encode()) for attribute, value in attributes]
    if ttl is not None:
        common.append(("Time-to-Live", seconds_text(ttl).encode()))
    return Record(kind.upper(), url or f"http://{where}:{port}/", tuple(common))


async def register(hsr_url: str, record: Record, session: aiohttp.ClientSession) -> dict[str, Any]:
    """Register (or renew) ``record`` at the HSR at ``hsr_url`` (a broker's base URL);
    returns its answer (oid, url, type, expires, renewed). Raises HsrClientError."""
    url = hsr_url.rstrip("/") + "/api/hsr/register"
    try:
        async with session.post(
            url, data=encode(record), headers={"Content-Type": SOIF_TYPE}
        ) as response:
            if response.status in (200, 201):
                answer: dict[str, Any] = await response.json()
                return answer
            text = (await response.content.read(500)).decode("utf-8", "replace")
            try:
                reason = str(json.loads(text).get("error", text))
            except (ValueError, AttributeError):
                reason = " ".join(text.split())
            kind = "refused" if 400 <= response.status < 500 else "unavailable"
            raise HsrClientError(kind, f"{url} answered {response.status}: {reason}")
    except aiohttp.ClientError as error:
        raise HsrClientError("unavailable", f"{url}: {type(error).__name__}: {error}") from error
    except TimeoutError as error:
        raise HsrClientError("unavailable", f"{url}: no answer in time") from error


@contextlib.asynccontextmanager
async def registering(
    hsr_url: str,
    make_record: Callable[[], Record],
    renew: float,
    *,
    retry: float = RETRY,
    request_seconds: float = 30.0,
    wake: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[None]:
    """Keep a server registered at ``hsr_url`` while the block runs: register at once, then
    every ``renew`` seconds (after a failure, again in ``min(retry, renew)``), or as soon as
    ``wake()``, awaited after each registration, returns (the record changed)."""

    async def loop() -> None:
        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=request_seconds)
        ) as session:
            while True:
                try:
                    answer = await register(hsr_url, make_record(), session)
                except HsrClientError as error:
                    log.warning("HSR registration at %s failed: %s", hsr_url, error)
                    delay = min(retry, renew)
                else:
                    log.info("registered at the HSR %s until %s", hsr_url, answer.get("expires"))
                    delay = renew
                if wake is None:
                    await asyncio.sleep(delay)
                    continue
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await wake()

    async with running(loop(), "hsr registration"):
        yield


# Addresses a server may listen on that name no host: its registration names its FQDN.
WILDCARDS = ("", "0.0.0.0", "::")


@contextlib.asynccontextmanager
async def registered(
    settings: HsrSettings,
    kind: str,
    name: str,
    address: tuple[str, int],
    version: str,
    *,
    attributes: Sequence[tuple[str, str]] = (),
    live: LiveAttributes | None = None,
) -> AsyncIterator[None]:
    """Keep a running server of ``kind`` registered at the HSR its ``[hsr]`` settings name
    while the block runs (nothing when they name none). ``address`` is where it listens;
    ``attributes`` are added to its record (see ``server_record``), then ``live`` ones,
    whose change renews the registration at once."""
    if settings.url is None:
        yield
        return
    host, port = address
    if host in WILDCARDS:
        host = await asyncio.to_thread(socket.getfqdn)
    sent = 0  # the version of the live attributes last put in a record

    def make_record() -> Record:
        nonlocal sent
        more: Sequence[tuple[str, str]] = ()
        if live is not None:
            sent, more = live.current()
        return server_record(
            kind,
            name=name,
            host=host,
            port=port,
            description=settings.description,
            administrator=settings.administrator,
            version=version,
            attributes=(*attributes, *more),
            # Two renewal periods: one renewal may fail without the registration lapsing.
            ttl=2 * settings.renew,
        )

    async def wake() -> None:
        assert live is not None
        await live.changed(sent)

    async with registering(
        settings.url, make_record, settings.renew, wake=None if live is None else wake
    ):
        yield
