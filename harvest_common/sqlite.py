"""The SQLite plumbing the gatherer database and the broker registry share: a connection in
autocommit mode (transactions are explicit), WAL, and a schema created or checked by version.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Protocol, TypeVar

T = TypeVar("T")


class Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=Closable)


# Waits out another process's write lock (a CLI reading the file while a server writes)
# instead of failing at once.
BUSY_TIMEOUT_MS = 5_000


def connect(path: Path, *, pragmas: Sequence[str] = ()) -> sqlite3.Connection:
    """Open ``path`` for a writer: WAL (readers keep a snapshot while it writes) with
    synchronous NORMAL (crash-safe in WAL mode: a power cut may lose only the last commits),
    then ``pragmas``. Raises sqlite3.Error."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        for pragma in pragmas:
            conn.execute(f"PRAGMA {pragma}")
    except BaseException:
        conn.close()
        raise
    return conn


def migrate(
    conn: sqlite3.Connection,
    statements: Sequence[str],
    version: int,
    unreadable: Callable[[int], Exception],
    upgrades: Mapping[int, Sequence[str]] | None = None,
) -> None:
    """Create the schema (``statements``, then ``user_version = version``) in a new file, or
    bring an older file up to ``version`` (``upgrades[n]`` takes version n to n + 1); raise
    ``unreadable(found)`` for a file this code cannot read. One transaction."""
    steps = upgrades or {}
    conn.execute("BEGIN IMMEDIATE")
    try:
        (found,) = conn.execute("PRAGMA user_version").fetchone()
        if found == 0:
            for statement in statements:
                conn.execute(statement)
        elif found > version or any(n not in steps for n in range(found, version)):
            raise unreadable(found)
        else:
            for n in range(found, version):
                for statement in steps[n]:
                    conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {version}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


async def awaited(future: Future[T], context: str, mapped: Callable[[str], Exception]) -> T:
    """Await work running on a connection's thread; SQLite's errors become ``mapped``."""
    try:
        return await asyncio.wrap_future(future)
    except sqlite3.Error as error:
        raise mapped(f"{context}: {error}") from error


async def finish(
    executor: ThreadPoolExecutor,
    close: Callable[[], None],
    context: str,
    mapped: Callable[[str], Exception],
) -> None:
    """Run ``close`` as the thread's last job and let the thread end. Submitted before any
    await, so the connection is closed after the work already queued even if the caller is
    cancelled."""
    closing = executor.submit(close)
    executor.shutdown(wait=False)
    await awaited(closing, context, mapped)


def close_made(opening: Future[C]) -> None:
    """Close what an opening that was given up on made, if it made anything."""
    if not opening.cancelled() and opening.exception() is None:
        opening.result().close()
