"""Waiting for the signal that stops a Harvest server (SIGTERM or SIGINT).

The first signal ends the wait, so the server closes cleanly; the handlers are then removed,
so a second signal takes its default action: a way out should stopping hang."""

from __future__ import annotations

import asyncio
import signal

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


async def stop_signal() -> None:
    """Return when SIGTERM or SIGINT arrives (call it on the main thread's loop)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def restore() -> None:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)

    def stopping() -> None:
        restore()
        stop.set()

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stopping)
    try:
        await stop.wait()
    finally:
        restore()
