"""What the registry's tests share: records and wrappers as gatherers send them, a pull
in one call, and the registry's tables read past it."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

from broker.oid import oid
from broker.registry import Applied, Change, Registry, Stored
from harvest_common.replication.version import Version
from harvest_common.soif import Item, Record

NOW = 1_000_000.0
DEFAULT_TTL = 500.0
G = "G@g.example:8500"
H = "H@h.example:8500"
STAMP_G = (("Gatherer-Name", b"G"), ("Gatherer-Host", b"g.example"), ("Gatherer-Port", b"8500"))
STAMP_H = (("Gatherer-Name", b"H"), ("Gatherer-Host", b"h.example"), ("Gatherer-Port", b"8500"))


def rec(
    url: str,
    title: str = "T",
    *,
    stamp: tuple[tuple[str, bytes], ...] = STAMP_G,
    ttl: str | None = None,
    update_time: str | None = None,
) -> Record:
    attributes = [("Title", title.encode()), *stamp]
    if ttl is not None:
        attributes.append(("Time-to-Live", ttl.encode()))
    if update_time is not None:
        attributes.append(("Update-Time", update_time.encode()))
    return Record("FILE", url, tuple(attributes))


def wrapper(
    url: str, *, stamp: tuple[tuple[str, bytes], ...] = (), ttl: str | None = None
) -> Record:
    """A @REFRESH or @DELETE object as a gatherer sends it: URL, Update-Time, maybe more."""
    attributes = [("Update-Time", b"123.000000"), *stamp]
    if ttl is not None:
        attributes.append(("Time-to-Live", ttl.encode()))
    return Record("FILE", url, tuple(attributes))


def gid(url: str, gatherer: str = G) -> str:
    return oid(gatherer, url)


async def pull(
    registry: Registry,
    collection: str,
    items: Sequence[Item],
    *,
    cursor: str | None = "c1",
    complete: bool = False,
    now: float = NOW,
    default_ttl: float = DEFAULT_TTL,
) -> Applied:
    async with registry.begin(collection) as staged:
        await staged.add(items)
        return await staged.commit(
            cursor=cursor, complete=complete, now=now, default_ttl=default_ttl
        )


async def stored(registry: Registry, key: str) -> Stored:
    found = await registry.get(key)
    assert found is not None
    return found


async def everything(registry: Registry) -> list[Change]:
    return await registry.changes_since(0, limit=1_000_000)


def summary(changes: list[Change]) -> list[tuple[str, str]]:
    return [(change.kind, change.url) for change in changes]


def table_counts(path: Path) -> dict[str, int]:
    """Rows per table, read past the registry (the tests may block); checks that every
    record has exactly one owner: an object, a staged upsert or the garbage."""
    with closing(sqlite3.connect(path)) as conn:
        tables = ("objects", "records", "staging", "garbage", "tombstones", "collections")
        counts = {
            table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in tables
        }
        owners = conn.execute(
            "SELECT record FROM objects UNION ALL SELECT record FROM garbage"
            " UNION ALL SELECT record FROM staging WHERE record IS NOT NULL"
        ).fetchall()
        records = conn.execute("SELECT id FROM records").fetchall()
    assert sorted(owners) == sorted(records)
    return counts


async def state_of(registry: Registry) -> tuple[object, ...]:
    return (
        await registry.oids(),
        await registry.collections(),
        await registry.last_seq(),
        await everything(registry),
    )


async def version_of(registry: Registry, key: str) -> Version:
    held = await registry.replica_versions([key])
    assert key in held, f"{key} is neither held nor buried"
    return held[key]
