"""Serving an aiohttp application on an address, for the Harvest servers built on aiohttp (the
broker, the replicator): set up, listen, and clean up (requests in progress finish) when the
block ends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web


@asynccontextmanager
async def listening(app: web.Application, host: str, port: int) -> AsyncIterator[tuple[str, int]]:
    """Serve ``app`` on ``host:port`` (0: a free port) for the block; yields the address
    bound. Signals are left to the caller."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound_host, bound_port = runner.addresses[0][:2]
        yield str(bound_host), int(bound_port)
    finally:
        await runner.cleanup()
