"""The gatherer database's SQLite schema, its version, and how a connection is set up.

Times that order changes (``update_us``, ``content_us``, ``deleted_us``) are INTEGER
microseconds since the epoch: exact, so a client resuming "after the last Update-Time I
received" compares the very value it was sent. Scheduling times (``expires``,
``refresh_at``) are REAL seconds; nothing is compared with them exactly.

::

    records     url → encoded SOIF (always stamped with its current Update-Time,
                Time-to-Live and Refresh-Rate), validators, times, failures, the text's
                near-duplicate fingerprint (a SimHash, stored as a signed 64-bit integer)
    manual      url → a hand-written SOIF record, merged over the generated one on export
    tombstones  url → when it was deleted (kept for incremental exports)
    listings    url → a sitemap's or feed's entries as last read (gatherer.listings' stored
                form), its validators, when it was last checked and when it expires; never
                exported (version 4)
    meta        'clock' (the last update time assigned), 'horizon' (the newest tombstone
                ever dropped: incremental exports from before it are incomplete),
                'created' (when the database was made, or brought to version 2)
    runs        one row per gathering run (the latest kept): when it started, last
                reported and ended, how, and its frontier while it runs
    run_counts  (run, counter, kind) → the run's count (RunStats' names); run 0 holds the
                sums of the runs no longer kept, so that the totals never fall
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gatherer.errors import DatabaseError
from harvest_common import sqlite

VERSION = 4

_TABLES = """
CREATE TABLE records (
    url           TEXT PRIMARY KEY,
    soif          BLOB NOT NULL,
    md5           TEXT,
    etag          TEXT,
    last_modified TEXT,
    content_us    INTEGER NOT NULL,
    update_us     INTEGER NOT NULL UNIQUE,
    time_to_live  REAL NOT NULL,
    expires       REAL NOT NULL,
    refresh_at    REAL NOT NULL,
    failures      INTEGER NOT NULL DEFAULT 0,
    failed_at     REAL,
    last_error    TEXT,
    fingerprint   INTEGER
);
CREATE INDEX records_refresh_at ON records (refresh_at);
CREATE INDEX records_expires ON records (expires);
CREATE TABLE manual (
    url       TEXT PRIMARY KEY,
    soif      BLOB NOT NULL,
    update_us INTEGER NOT NULL UNIQUE
);
CREATE TABLE tombstones (
    url        TEXT PRIMARY KEY,
    deleted_us INTEGER NOT NULL UNIQUE
);
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
INSERT INTO meta VALUES ('clock', 0), ('horizon', 0);
"""
# Gathering runs, for the export service's /metrics (version 2). 'created' is stamped by
# SQLite's clock as the tables are made (a version 1 file: as it is brought up to date).
_RUNS = """
INSERT INTO meta VALUES ('created', CAST((julianday('now') - 2440587.5) * 86400e6 AS INTEGER));
CREATE TABLE runs (
    id       INTEGER PRIMARY KEY,
    started  REAL NOT NULL,
    reported REAL NOT NULL,
    ended    REAL,
    outcome  TEXT,
    seconds  REAL NOT NULL DEFAULT 0,
    queued   INTEGER NOT NULL DEFAULT 0,
    active   INTEGER NOT NULL DEFAULT 0,
    hosts    INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE run_counts (
    run   INTEGER NOT NULL,
    name  TEXT NOT NULL,
    kind  TEXT NOT NULL,
    value REAL NOT NULL,
    PRIMARY KEY (run, name, kind)
);
"""
# Sitemaps and feeds as last read (version 4).
_LISTINGS = """
CREATE TABLE listings (
    url           TEXT PRIMARY KEY,
    entries       BLOB NOT NULL,
    md5           TEXT,
    etag          TEXT,
    last_modified TEXT,
    checked       REAL NOT NULL,
    expires       REAL NOT NULL
)
"""


def _statements(script: str) -> list[str]:
    return [statement for statement in script.split(";") if statement.strip()]


_CREATE = [*_statements(_TABLES + _RUNS), _LISTINGS]
# What takes a file of version n to n + 1.
_UPGRADES = {
    1: _statements(_RUNS),
    2: ["ALTER TABLE records ADD COLUMN fingerprint INTEGER"],  # near-duplicates (version 3)
    3: [_LISTINGS],  # sitemaps and feeds (version 4)
}


def connect(path: Path, *, readonly: bool) -> sqlite3.Connection:
    """Open ``path`` in autocommit mode (transactions are explicit), creating the schema
    for a writer. Raises sqlite3.Error, or DatabaseError for a schema this code can't read."""
    if readonly:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout = {sqlite.BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA query_only = ON")
        except BaseException:
            conn.close()
            raise
        return conn
    conn = sqlite.connect(path)
    try:
        sqlite.migrate(conn, _CREATE, VERSION, _unreadable, _UPGRADES)
    except BaseException:
        conn.close()
        raise
    return conn


def _unreadable(version: int) -> DatabaseError:
    return DatabaseError(f"database schema version {version}; this gatherer reads {VERSION}")
