"""The gatherer database: every record gathered, when it last changed, and what was deleted.

One SQLite file in WAL mode. All writes, and the small reads, run on one thread owned by
the database (a single-thread executor holding the only writing connection); each export
reads a :class:`Snapshot` on a connection and thread of its own, so a long export never
holds up the gatherer (WAL readers don't block the writer; the WAL file just can't be
checkpointed past an open snapshot until it ends). At most ``max_exports`` snapshots are
open at once; further exports wait for one to end.

Every change a broker should learn of gets an update time from one clock: unique and
strictly increasing across records, manual records and tombstones (``max(now, last + 1 µs)``,
kept in whole microseconds). A record's SOIF carries it as ``Update-Time``, written as a
decimal with six places (``1764503554.123456``) rather than Harvest's whole seconds, so a
broker resuming "after the last Update-Time I received" neither misses nor repeats a change.
The database also owns the ``Time-to-Live`` and ``Refresh-Rate`` attributes (whole seconds).

Deleted and expired records leave a tombstone for incremental exports; tombstones older than
``tombstone_retention`` are dropped, and an incremental export from before the newest dropped
one is served complete instead (see :attr:`Snapshot.complete`).

Gathering runs report themselves here too (:meth:`GathererDatabase.start_run`,
:meth:`~GathererDatabase.report_run`): the run and the export service are separate
processes, and the service's ``/metrics`` reads what the runs reported
(:meth:`~GathererDatabase.gather_report`).
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from gatherer.errors import DatabaseError
from gatherer.schema import connect
from harvest_common import sqlite
from harvest_common.errors import SoifError
from harvest_common.soif import Record, decode, encode

UPDATE_TIME = "Update-Time"
TIME_TO_LIVE = "Time-to-Live"
REFRESH_RATE = "Refresh-Rate"

DAY = 86_400.0
_UNSIGNED = (1 << 64) - 1
_US = 1_000_000
# Runs whose rows are kept (with the last complete one, however old); the counts of older
# runs are added into run 0's, so that the totals never fall.
RUNS_KEPT = 100

P = ParamSpec("P")
T = TypeVar("T")


def to_us(seconds: float) -> int:
    """Epoch seconds as the database's whole microseconds (to the nearest)."""
    return round(seconds * _US)


def after_us(since: float) -> int:
    """The microsecond an export resumes after, for ``since`` in epoch seconds.

    A time this database wrote comes back as itself (within float error: a quarter of a
    microsecond); anything else rounds down, so a change after ``since`` is never missed.
    """
    return math.floor(since * _US + 0.25)


def time_text(us: int) -> str:
    """An update time as written in ``Update-Time`` and the export headers."""
    whole, fraction = divmod(us, _US)
    return f"{whole}.{fraction:06d}"


def seconds_text(seconds: float) -> str:
    """A duration as written in ``Time-to-Live`` and ``Refresh-Rate``: whole seconds."""
    return str(round(seconds))


def load_record(url: str, blob: bytes) -> Record:
    """The record stored as ``blob``; DatabaseError if it is not one encoded SOIF object."""
    try:
        items = decode(blob)
    except SoifError as error:
        raise DatabaseError(f"stored record for {url} is not SOIF: {error}") from error
    if len(items) != 1 or not isinstance(items[0], Record):
        raise DatabaseError(f"stored record for {url} is not one SOIF object")
    return items[0]


async def _result(future: Future[T], context: str) -> T:
    return await sqlite.awaited(future, context, DatabaseError)


def _stamped(record: Record, us: int) -> Record:
    return record.replace(UPDATE_TIME, time_text(us))


@dataclass(frozen=True, slots=True)
class Stored:
    """A generated record as stored, with what the gatherer needs to revisit it.

    Times are epoch seconds; ``content_time`` is when the content last changed,
    ``update_time`` when anything exported about it last changed (content, refresh or a
    manual record's change).
    """

    record: Record
    md5: str | None
    etag: str | None
    last_modified: str | None  # the HTTP-date as the server sent it
    content_time: float
    update_time: float
    time_to_live: float
    expires: float
    refresh_at: float
    failures: int  # failed gathers since the last success
    failed_at: float | None  # when the last one failed
    last_error: str | None  # why

    def __repr__(self) -> str:
        failing = f", {self.failures} failures ({self.last_error})" if self.failures else ""
        return (
            f"Stored({self.record.url!r}, updated {self.update_time:.6f}, "
            f"refresh at {self.refresh_at:.0f}, expires {self.expires:.0f}{failing})"
        )


@dataclass(frozen=True, slots=True)
class StoredListing:
    """A sitemap or feed as last read: its entries in ``gatherer.listings``' stored form,
    the validators and MD5 of that fetch, and when it was last checked (epoch seconds)."""

    entries: bytes
    md5: str | None
    etag: str | None
    last_modified: str | None
    checked: float

    def __repr__(self) -> str:
        return f"StoredListing({len(self.entries)} bytes, checked {self.checked:.0f})"


@dataclass(frozen=True, slots=True)
class DatabaseStats:
    """Counts for status pages; ``last_update`` is the newest update time assigned."""

    records: int
    manual: int
    tombstones: int
    failing: int  # records whose last fetch failed
    last_update: float


# A run's counts: (counter, kind) -> value, by RunStats' field names; kind is "" for plain
# counters, the error's kind for counters by kind.
Counts = Mapping[tuple[str, str], float]


@dataclass(frozen=True, slots=True)
class RunReport:
    """What a gathering run reports of itself, every few seconds and at its end.

    ``at``: epoch seconds; ``seconds``: since it started; ``counts``: all of its counts so
    far; ``queued``, ``active``, ``hosts``: its frontier now; ``outcome``: None while it runs,
    at its end ``complete``, ``stopped`` (by a signal) or ``failed``.
    """

    at: float
    seconds: float
    counts: Counts
    queued: int = 0
    active: int = 0
    hosts: int = 0
    outcome: str | None = None


@dataclass(frozen=True, slots=True)
class Run:
    """A gathering run as it last reported (epoch seconds). ``ended`` and ``outcome`` are
    None while it runs, and stay so if it was killed."""

    started: float
    reported: float
    ended: float | None
    outcome: str | None
    seconds: float
    queued: int
    active: int
    hosts: int


@dataclass(frozen=True, slots=True)
class GatherReport:
    """What the export service's /metrics shows: the database's counts, when it was made,
    every run's counts summed, the latest run and the latest complete one."""

    database: DatabaseStats
    created: float
    totals: dict[tuple[str, str], float]
    latest: Run | None
    last_complete: Run | None


_RUN = "SELECT started, reported, ended, outcome, seconds, queued, active, hosts FROM runs"
# The runs no longer kept: before the RUNS_KEPT newest, except the last complete one.
_OLD_RUNS = "run > 0 AND run < :cutoff AND run IS NOT :complete"


class ChangeKind(Enum):
    RECORD = "record"  # send the whole (merged) record
    REFRESH = "refresh"  # unchanged content, re-gathered: send url, Update-Time, Time-to-Live
    DELETE = "delete"  # gone: send url, Update-Time


@dataclass(frozen=True, slots=True)
class Change:
    """One exported change, read in update-time order from a snapshot.

    For RECORD, ``soif`` is the stored generated record (already stamped) or None for a
    manual record alone; ``manual`` is the manual record to merge over it, if any.
    """

    kind: ChangeKind
    url: str
    update_time: str  # as time_text writes it
    soif: bytes | None = None
    manual: bytes | None = None
    time_to_live: float | None = None

    def __repr__(self) -> str:
        return f"Change({self.kind.value} {self.url!r} at {self.update_time})"


# One query in update-time order: SQLite merges the three indexed, ordered scans
# ("MERGE (UNION ALL)"), so nothing is sorted or materialised however large the export.
_CHANGES = """
SELECT 0, r.url, r.update_us, r.content_us, r.soif, m.soif, r.time_to_live
  FROM records r LEFT JOIN manual m ON m.url = r.url
 WHERE r.update_us > :after
UNION ALL
SELECT 1, m.url, m.update_us, m.update_us, NULL, m.soif, NULL
  FROM manual m
 WHERE m.update_us > :after AND m.url NOT IN (SELECT url FROM records)
UNION ALL
SELECT 2, t.url, t.deleted_us, t.deleted_us, NULL, NULL, NULL
  FROM tombstones t
 WHERE t.deleted_us > :after AND :tombstones
ORDER BY 3
"""
_GENERATED, _TOMBSTONE = 0, 2  # _CHANGES' first column (1: a manual record alone)
_READ_FAILED = "export read failed"


class _Reader:
    """A snapshot's connection and cursor; every method runs on the snapshot's thread."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._conn: sqlite3.Connection | None = None
        self._rows: sqlite3.Cursor | None = None
        self._since = -1

    def open(self, since_us: int | None) -> tuple[int, bool]:
        """Start the read transaction and the change query; return (until_us, complete)."""
        conn = self._conn = connect(self._path, readonly=True)
        conn.execute("BEGIN")  # deferred: the snapshot is taken by the first read below
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        # Tombstones up to the horizon are gone: a client from before it would miss deletes.
        complete = since_us is None or since_us < meta["horizon"]
        self._since = -1 if complete or since_us is None else since_us
        self._rows = conn.execute(_CHANGES, {"after": self._since, "tombstones": not complete})
        return meta["clock"], complete

    def read(self, size: int) -> list[Change]:
        assert self._rows is not None
        return [self._change(row) for row in self._rows.fetchmany(size)]

    def _change(self, row: tuple[Any, ...]) -> Change:
        source, url, update_us, content_us, soif, manual, time_to_live = row
        stamp = time_text(update_us)
        if source == _TOMBSTONE:
            return Change(ChangeKind.DELETE, url, stamp)
        if source == _GENERATED and content_us <= self._since:
            return Change(ChangeKind.REFRESH, url, stamp, time_to_live=time_to_live)
        return Change(ChangeKind.RECORD, url, stamp, soif=soif, manual=manual)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()  # ends the read transaction
            self._conn = None


class Snapshot:
    """One consistent view of the database for one export, read in batches.

    ``until`` is the newest update time in the view (0.0 for an empty database): a client
    that resumes from it misses nothing, even when the export held no changes. ``complete``
    is True when the view holds every current record as a whole record and no deletions
    (no ``since``, or a ``since`` older than the tombstones kept): the client should replace
    what it holds from this gatherer rather than apply a delta.
    """

    def __init__(
        self, executor: ThreadPoolExecutor, reader: _Reader, until: float, complete: bool
    ) -> None:
        self._executor = executor
        self._reader = reader
        self.until = until
        self.complete = complete

    def __repr__(self) -> str:
        kind = "complete" if self.complete else "incremental"
        return f"Snapshot({kind}, until {self.until:.6f})"

    @classmethod
    async def open(cls, path: Path, since: float | None) -> Snapshot:
        executor = ThreadPoolExecutor(1, thread_name_prefix="gatherer-export")
        reader = _Reader(path)
        opening = executor.submit(reader.open, None if since is None else after_us(since))
        try:
            until_us, complete = await _result(opening, _READ_FAILED)
        except BaseException:
            await sqlite.finish(executor, reader.close, _READ_FAILED, DatabaseError)
            raise
        return cls(executor, reader, until_us / _US, complete)

    async def read(self, size: int, render: Callable[[list[Change]], T]) -> T | None:
        """The next ``size`` changes (at most) passed through ``render`` on the snapshot's
        thread, or None at the end. Calls run one after another, in the order made."""
        return await _result(self._executor.submit(self._render_next, size, render), _READ_FAILED)

    def _render_next(self, size: int, render: Callable[[list[Change]], T]) -> T | None:
        changes = self._reader.read(size)
        return render(changes) if changes else None

    async def close(self) -> None:
        await sqlite.finish(self._executor, self._reader.close, _READ_FAILED, DatabaseError)


class _Writer:
    """The writing connection; every method runs on the database thread."""

    def __init__(self, conn: sqlite3.Connection, tombstone_retention: float) -> None:
        self._conn = conn
        self._retention = tombstone_retention

    @contextmanager
    def _transaction(self, begin: str = "BEGIN IMMEDIATE") -> Iterator[sqlite3.Connection]:
        """A write transaction; ``BEGIN`` for a consistent read that leaves writers be."""
        self._conn.execute(begin)
        try:
            yield self._conn
        except BaseException:
            if self._conn.in_transaction:  # SQLite may have rolled back already (e.g. disk full)
                self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def _tick(self, now: float | None) -> int:
        """The next update time (inside a write transaction, so no two can take the same);
        with no ``now``, the one after the last."""
        row = self._conn.execute(
            "UPDATE meta SET value = max(value + 1, ?) WHERE key = 'clock' RETURNING value",
            (0 if now is None else to_us(now),),
        ).fetchone()
        return int(row[0])

    def put(
        self,
        record: Record,
        md5: str | None,
        etag: str | None,
        last_modified: str | None,
        now: float,
        time_to_live: float,
        refresh_rate: float,
        fingerprint: int | None,
    ) -> int:
        with self._transaction() as conn:
            us = self._tick(now)
            soif = encode(_timed(record, us, time_to_live, refresh_rate))
            conn.execute(
                "INSERT OR REPLACE INTO records (url, soif, md5, etag, last_modified,"
                " content_us, update_us, time_to_live, expires, refresh_at, fingerprint)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.url,
                    soif,
                    md5,
                    etag,
                    last_modified,
                    us,
                    us,
                    time_to_live,
                    now + time_to_live,
                    now + refresh_rate,
                    None if fingerprint is None else _signed(fingerprint),
                ),
            )
            conn.execute("DELETE FROM tombstones WHERE url = ?", (record.url,))
        return us

    def refresh(
        self,
        url: str,
        now: float,
        time_to_live: float,
        refresh_rate: float,
        validators: tuple[str | None, str | None] | None,
    ) -> int | None:
        with self._transaction() as conn:
            row = conn.execute("SELECT soif FROM records WHERE url = ?", (url,)).fetchone()
            if row is None:
                return None
            us = self._tick(now)
            soif = encode(_timed(load_record(url, row[0]), us, time_to_live, refresh_rate))
            conn.execute(
                "UPDATE records SET soif = ?, update_us = ?, time_to_live = ?, expires = ?,"
                " refresh_at = ?, failures = 0, failed_at = NULL, last_error = NULL WHERE url = ?",
                (soif, us, time_to_live, now + time_to_live, now + refresh_rate, url),
            )
            if validators is not None:
                conn.execute(
                    "UPDATE records SET etag = ?, last_modified = ? WHERE url = ?",
                    (*validators, url),
                )
        return us

    def fail(self, url: str, reason: str, now: float, retry_at: float | None) -> int | None:
        with self._transaction() as conn:
            row = conn.execute(
                "UPDATE records SET failures = failures + 1, failed_at = ?, last_error = ?,"
                " refresh_at = coalesce(?, refresh_at) WHERE url = ? RETURNING failures",
                (now, reason, retry_at, url),
            ).fetchone()
        return None if row is None else int(row[0])

    def delete(self, url: str, now: float) -> bool:
        with self._transaction():
            return self._remove(url, now)

    def expire(self, now: float) -> list[str]:
        with self._transaction() as conn:
            urls = [
                url
                for (url,) in conn.execute(
                    "SELECT url FROM records WHERE expires <= ? ORDER BY expires, url", (now,)
                ).fetchall()
            ]
            for url in urls:
                self._remove(url, now)
            conn.execute("DELETE FROM listings WHERE expires <= ?", (now,))
            cutoff = to_us(now - self._retention)
            (newest,) = conn.execute(
                "SELECT max(deleted_us) FROM tombstones WHERE deleted_us < ?", (cutoff,)
            ).fetchone()
            if newest is not None:
                conn.execute(
                    "UPDATE meta SET value = max(value, ?) WHERE key = 'horizon'", (newest,)
                )
                conn.execute("DELETE FROM tombstones WHERE deleted_us < ?", (cutoff,))
        return urls

    def _remove(self, url: str, now: float) -> bool:
        """Delete a generated record; its manual record, if any, is then exported alone."""
        if self._conn.execute("DELETE FROM records WHERE url = ?", (url,)).rowcount == 0:
            return False
        us = self._tick(now)
        moved = self._conn.execute("UPDATE manual SET update_us = ? WHERE url = ?", (us, url))
        if moved.rowcount == 0:
            self._bury(url, us)
        return True

    def _bury(self, url: str, us: int) -> None:
        self._conn.execute(
            "INSERT OR REPLACE INTO tombstones (url, deleted_us) VALUES (?, ?)", (url, us)
        )

    def _touch(self, url: str, us: int) -> bool:
        """Mark a generated record's exported form changed (its manual record changed)."""
        row = self._conn.execute("SELECT soif FROM records WHERE url = ?", (url,)).fetchone()
        if row is None:
            return False
        soif = encode(_stamped(load_record(url, row[0]), us))
        self._conn.execute(
            "UPDATE records SET soif = ?, update_us = ?, content_us = ? WHERE url = ?",
            (soif, us, us, url),
        )
        return True

    def put_manual(self, url: str, record: Record, now: float | None) -> int:
        soif = encode(record)
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT soif, update_us FROM manual WHERE url = ?", (url,)
            ).fetchone()
            if row is not None and row[0] == soif:
                return int(row[1])  # the same record again: nothing changed to export
            us = self._tick(now)
            conn.execute(
                "INSERT OR REPLACE INTO manual (url, soif, update_us) VALUES (?, ?, ?)",
                (url, soif, us),
            )
            self._touch(url, us)
            conn.execute("DELETE FROM tombstones WHERE url = ?", (url,))
        return us

    def delete_manual(self, url: str, now: float | None) -> bool:
        with self._transaction() as conn:
            if conn.execute("DELETE FROM manual WHERE url = ?", (url,)).rowcount == 0:
                return False
            us = self._tick(now)
            if not self._touch(url, us):
                self._bury(url, us)
        return True

    def get(self, url: str) -> Stored | None:
        row = self._conn.execute(
            "SELECT soif, md5, etag, last_modified, content_us, update_us, time_to_live,"
            " expires, refresh_at, failures, failed_at, last_error FROM records WHERE url = ?",
            (url,),
        ).fetchone()
        if row is None:
            return None
        soif, md5, etag, last_modified, content_us, update_us, ttl, expires, refresh_at = row[:9]
        return Stored(
            load_record(url, soif),
            md5,
            etag,
            last_modified,
            content_us / _US,
            update_us / _US,
            ttl,
            expires,
            refresh_at,
            *row[9:],
        )

    def due(self, now: float, limit: int) -> list[str]:
        rows = self._conn.execute(
            "SELECT url FROM records WHERE refresh_at <= ? ORDER BY refresh_at, url LIMIT ?",
            (now, limit),
        ).fetchall()
        return [url for (url,) in rows]

    def fingerprints(self) -> list[tuple[str, int]]:
        rows = self._conn.execute(
            "SELECT url, fingerprint FROM records WHERE fingerprint IS NOT NULL"
        )
        return [(url, value & _UNSIGNED) for url, value in rows]

    def urls(self, table: str) -> set[str]:
        return {url for (url,) in self._conn.execute(f"SELECT url FROM {table}")}

    def get_listing(self, url: str) -> StoredListing | None:
        row = self._conn.execute(
            "SELECT entries, md5, etag, last_modified, checked FROM listings WHERE url = ?",
            (url,),
        ).fetchone()
        return None if row is None else StoredListing(*row)

    def put_listing(self, url: str, listing: StoredListing, expires: float) -> None:
        with self._transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO listings (url, entries, md5, etag, last_modified,"
                " checked, expires) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (url, *_listing_row(listing), expires),
            )

    def touch_listing(self, url: str, checked: float, expires: float) -> None:
        with self._transaction() as conn:
            conn.execute(
                "UPDATE listings SET checked = ?, expires = ? WHERE url = ?",
                (checked, expires, url),
            )

    def count(self) -> int:
        return int(self._conn.execute("SELECT count(*) FROM records").fetchone()[0])

    def stats(self) -> DatabaseStats:
        with self._transaction("BEGIN"):  # one consistent set of counts
            return self._stats()

    def _stats(self) -> DatabaseStats:
        conn = self._conn
        (records, failing) = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE failures > 0) FROM records"
        ).fetchone()
        (manual,) = conn.execute("SELECT count(*) FROM manual").fetchone()
        (tombstones,) = conn.execute("SELECT count(*) FROM tombstones").fetchone()
        (clock,) = conn.execute("SELECT value FROM meta WHERE key = 'clock'").fetchone()
        return DatabaseStats(records, manual, tombstones, failing, clock / _US)

    def start_run(self, now: float) -> int:
        with self._transaction() as conn:
            (run,) = conn.execute(
                "INSERT INTO runs (started, reported) VALUES (?, ?) RETURNING id", (now, now)
            ).fetchone()
            row = conn.execute(
                "SELECT id FROM runs ORDER BY id DESC LIMIT 1 OFFSET ?", (RUNS_KEPT,)
            ).fetchone()
            if row is not None:
                self._fold_runs_before(row[0] + 1)
        return int(run)

    def _fold_runs_before(self, cutoff: int) -> None:
        conn = self._conn
        (complete,) = conn.execute("SELECT max(id) FROM runs WHERE outcome = 'complete'").fetchone()
        old = {"cutoff": cutoff, "complete": complete}
        conn.execute(
            "INSERT INTO run_counts (run, name, kind, value)"
            f" SELECT 0, name, kind, sum(value) FROM run_counts WHERE {_OLD_RUNS}"
            " GROUP BY name, kind"
            " ON CONFLICT (run, name, kind) DO UPDATE SET value = value + excluded.value",
            old,
        )
        conn.execute(f"DELETE FROM run_counts WHERE {_OLD_RUNS}", old)
        conn.execute("DELETE FROM runs WHERE id < :cutoff AND id IS NOT :complete", old)

    def report_run(self, run: int, report: RunReport) -> None:
        with self._transaction() as conn:
            conn.execute(
                "UPDATE runs SET reported = ?, seconds = ?, queued = ?, active = ?, hosts = ?,"
                " ended = ?, outcome = ? WHERE id = ?",
                (
                    report.at,
                    report.seconds,
                    report.queued,
                    report.active,
                    report.hosts,
                    None if report.outcome is None else report.at,
                    report.outcome,
                    run,
                ),
            )
            conn.executemany(
                "INSERT INTO run_counts (run, name, kind, value) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (run, name, kind) DO UPDATE SET value = excluded.value",
                [(run, name, kind, value) for (name, kind), value in report.counts.items()],
            )

    def gather_report(self) -> GatherReport:
        with self._transaction("BEGIN") as conn:
            (created,) = conn.execute("SELECT value FROM meta WHERE key = 'created'").fetchone()
            totals = conn.execute(
                "SELECT name, kind, sum(value) FROM run_counts GROUP BY name, kind"
            ).fetchall()
            latest = conn.execute(f"{_RUN} ORDER BY id DESC LIMIT 1").fetchone()
            complete = conn.execute(
                f"{_RUN} WHERE outcome = 'complete' ORDER BY id DESC LIMIT 1"
            ).fetchone()
            return GatherReport(
                self._stats(),
                created / _US,
                {(name, kind): value for name, kind, value in totals},
                None if latest is None else Run(*latest),
                None if complete is None else Run(*complete),
            )

    def close(self) -> None:
        self._conn.close()


def _signed(value: int) -> int:
    """A 64-bit unsigned value as SQLite's signed INTEGER holds it (``& _UNSIGNED`` undoes)."""
    return value - (1 << 64) if value >> 63 else value


def _listing_row(listing: StoredListing) -> tuple[object, ...]:
    return (listing.entries, listing.md5, listing.etag, listing.last_modified, listing.checked)


def _timed(record: Record, us: int, time_to_live: float, refresh_rate: float) -> Record:
    """``record`` with the attributes the database owns set (in place if present), built
    in one step: each Record.replace would validate every attribute again."""
    owned = {
        UPDATE_TIME.lower(): (UPDATE_TIME, time_text(us).encode()),
        TIME_TO_LIVE.lower(): (TIME_TO_LIVE, seconds_text(time_to_live).encode()),
        REFRESH_RATE.lower(): (REFRESH_RATE, seconds_text(refresh_rate).encode()),
    }
    attributes = [owned.pop(name.lower(), (name, value)) for name, value in record.attributes]
    return Record(record.template, record.url, (*attributes, *owned.values()))


class GathererDatabase:
    """The gatherer's records in one SQLite file; see the module docstring."""

    def __init__(
        self,
        path: Path,
        executor: ThreadPoolExecutor,
        writer: _Writer,
        max_exports: int,
    ) -> None:
        self.path = path
        self._executor = executor
        self._writer = writer
        self._exports = asyncio.Semaphore(max_exports)
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"GathererDatabase({str(self.path)!r}, {state})"

    @classmethod
    async def open(
        cls,
        path: Path,
        *,
        tombstone_retention: float = 30 * DAY,
        max_exports: int = 4,
    ) -> GathererDatabase:
        """Open (creating if needed) the database at ``path``."""
        executor = ThreadPoolExecutor(1, thread_name_prefix="gatherer-db")
        opening = executor.submit(connect, path, readonly=False)
        try:
            conn = await _result(opening, f"cannot open gatherer database {path}")
        except BaseException:
            # Cancelled mid-open: the connection is closed once made, on its own thread.
            executor.submit(sqlite.close_made, opening)
            executor.shutdown(wait=False)
            raise
        return cls(path, executor, _Writer(conn, tombstone_retention), max_exports)

    async def __aenter__(self) -> GathererDatabase:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the writing connection and stop the database thread; idempotent. Open
        snapshots are not affected: each closes with its export."""
        if self._closed:
            return
        self._closed = True
        await sqlite.finish(
            self._executor, self._writer.close, f"gatherer database {self.path}", DatabaseError
        )

    async def _call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if self._closed:
            raise DatabaseError(f"gatherer database {self.path} is closed")
        future = self._executor.submit(fn, *args, **kwargs)
        return await _result(future, f"gatherer database {self.path}")

    async def get(self, url: str) -> Stored | None:
        return await self._call(self._writer.get, url)

    async def put(
        self,
        record: Record,
        *,
        md5: str | None,
        etag: str | None,
        last_modified: str | None,
        now: float,
        time_to_live: float,
        refresh_rate: float,
        fingerprint: int | None = None,
    ) -> float:
        """Insert or replace ``record`` (keyed by its URL) as new content; clears any
        tombstone for it. ``fingerprint`` is its text's, for near-duplicate checks (None:
        it has none). Returns its update time (also its content time)."""
        us = await self._call(
            self._writer.put,
            record,
            md5,
            etag,
            last_modified,
            now,
            time_to_live,
            refresh_rate,
            fingerprint,
        )
        return us / _US

    async def fingerprints(self) -> list[tuple[str, int]]:
        """The (url, fingerprint) of every record that has a fingerprint."""
        return await self._call(self._writer.fingerprints)

    async def refresh(
        self,
        url: str,
        *,
        now: float,
        time_to_live: float,
        refresh_rate: float,
        validators: tuple[str | None, str | None] | None = None,
    ) -> float | None:
        """The document was gathered again and is unchanged: push out its expiry and next
        refresh, clear its failures and give it a new update time (not a new content time).
        ``validators``, the (etag, last_modified) of a fetch that found the same content
        under new validators, replace the stored ones (None keeps them). None if ``url`` has
        no record."""
        us = await self._call(
            self._writer.refresh, url, now, time_to_live, refresh_rate, validators
        )
        return None if us is None else us / _US

    async def fail(
        self, url: str, reason: str, *, now: float, retry_at: float | None = None
    ) -> int | None:
        """Count a failed gather of ``url`` (the record is kept until it expires); with
        ``retry_at``, that is its next refresh time. Returns the failure count, or None if
        ``url`` has no record."""
        return await self._call(self._writer.fail, url, reason, now, retry_at)

    async def delete(self, url: str, *, now: float) -> bool:
        """Remove ``url``'s record, leaving a tombstone; False if it had none."""
        return await self._call(self._writer.delete, url, now)

    async def expire(self, now: float) -> list[str]:
        """Remove the records whose ``expires`` has come (leaving tombstones), oldest first,
        and the listings whose has, and drop tombstones older than the retention. Returns
        the removed records' URLs."""
        return await self._call(self._writer.expire, now)

    async def due(self, now: float, limit: int) -> list[str]:
        """Up to ``limit`` URLs whose refresh time has come, the longest-waiting first."""
        return await self._call(self._writer.due, now, limit)

    async def urls(self) -> set[str]:
        return await self._call(self._writer.urls, "records")

    async def get_listing(self, url: str) -> StoredListing | None:
        """The sitemap or feed at ``url`` as last read, or None."""
        return await self._call(self._writer.get_listing, url)

    async def put_listing(self, url: str, listing: StoredListing, *, time_to_live: float) -> None:
        """Store what was read of the sitemap or feed at ``url``, checked at
        ``listing.checked``; it is kept ``time_to_live`` seconds (listings are never
        exported)."""
        expires = listing.checked + time_to_live
        await self._call(self._writer.put_listing, url, listing, expires)

    async def touch_listing(self, url: str, *, now: float, time_to_live: float) -> None:
        """The listing at ``url`` was checked ``now`` and is unchanged: keep it
        ``time_to_live`` seconds from now."""
        await self._call(self._writer.touch_listing, url, now, now + time_to_live)

    async def count(self) -> int:
        return await self._call(self._writer.count)

    async def stats(self) -> DatabaseStats:
        return await self._call(self._writer.stats)

    async def start_run(self, now: float) -> int:
        """Note a gathering run started at ``now``; returns its number for ``report_run``.
        Runs beyond the RUNS_KEPT newest are forgotten (their counts stay in the totals)."""
        return await self._call(self._writer.start_run, now)

    async def report_run(self, run: int, report: RunReport) -> None:
        """Keep what run ``run`` reports of itself (replacing its earlier report)."""
        await self._call(self._writer.report_run, run, report)

    async def gather_report(self) -> GatherReport:
        """What the runs reported, with the database's counts, in one consistent read."""
        return await self._call(self._writer.gather_report)

    async def put_manual(self, url: str, record: Record, *, now: float | None = None) -> float:
        """Store a hand-written record for ``url``, merged over the generated one on export
        (its attributes win); gathering never changes it. Returns its update time: ``now``,
        or without it the next tick of the clock (a manual record has no lifetime, its
        update time only has to order it among the changes). The record already stored
        changes nothing: its update time stays, so it is not exported again."""
        if record.url != url:
            raise ValueError(f"manual record is for {record.url!r}, not {url!r}")
        return await self._call(self._writer.put_manual, url, record, now) / _US

    async def delete_manual(self, url: str, *, now: float | None = None) -> bool:
        """Remove ``url``'s manual record (its generated record, if any, is then exported
        alone; else a tombstone is left); False if it had none. ``now`` as for put_manual."""
        return await self._call(self._writer.delete_manual, url, now)

    async def manual_urls(self) -> set[str]:
        return await self._call(self._writer.urls, "manual")

    @asynccontextmanager
    async def snapshot(self, since: float | None) -> AsyncIterator[Snapshot]:
        """A consistent view of the changes after ``since`` (all records for None), open for
        the ``async with`` block; waits while ``max_exports`` others are open."""
        if self._closed:
            raise DatabaseError(f"gatherer database {self.path} is closed")
        async with self._exports:
            snapshot = await Snapshot.open(self.path, since)
            try:
                yield snapshot
            finally:
                await snapshot.close()
