"""The registry's SQLite schema, its version, the statements the registry runs, and how a
connection is set up.

::

    objects      oid → collection, url, gatherer, record, expires, update_time, seq (its
                 last change), record_seq (its record's), stamp, origin (its version:
                 harvest_common/replication/version.py)
    records      id → one encoded SOIF object; owned by one objects row, one staging row
                 or the garbage (a commit hands it from staging to objects: never copied)
    garbage      records no longer owned, freed in small transactions later
    staging      the items of pulls not yet committed, one row each, in stream order
    tombstones   oid → url, gatherer, collection, seq, removed_at, stamp, origin (for
                 changes_since, and replicas: a removal is a version too)
    collections  name → cursor (opaque: where the next pull resumes), last_pull
    meta         'seq' (the last change number given), 'horizon' (the highest seq of a
                 tombstone dropped: changes from before it are no longer exact),
                 'indexed_seq' (the highest seq the index is known to reflect)

Records live apart from ``objects`` so that staging a pull writes each record once and its
commit only moves small rows: the commit holds the registry's only thread (and every query
waiting on it) for as long as writing those takes, not for copying hundreds of megabytes.
For the same reason a record is not deleted by the transaction that drops it (deleting
100k records of 4 KB takes seconds): triggers hand it to ``garbage``, and the registry frees
the garbage a small transaction at a time before its next pull, expiry or forget (and
when it opens).

Times (``expires``, ``update_time``, ``removed_at``, ``last_pull``) are REAL epoch seconds.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from broker.errors import StorageError
from harvest_common import sqlite
from harvest_common.replication.version import STEP

VERSION = 2

# SQLite's page cache (KiB; the default is 2 MiB). A commit inserts into the objects' B-trees
# in oid order, that is at random: with 100k objects, this cache makes it a third faster.
CACHE_KIB = 64 * 1024
# The WAL is truncated to this after a checkpoint; a large pull would otherwise leave it at
# its largest size for good.
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024

# Staging kinds.
UPSERT, REFRESH, DELETE = "upsert", "refresh", "delete"

# A replica reads one collection's changes in seq order.
_REPLICA_INDEXES = (
    "CREATE INDEX objects_collection_seq ON objects (collection, seq)",
    "CREATE INDEX tombstones_collection_seq ON tombstones (collection, seq)",
)

_TABLES = (
    """CREATE TABLE records (
        id   INTEGER PRIMARY KEY,
        soif BLOB NOT NULL
    )""",
    # Small rows (the record is elsewhere), so clustered on oid without a separate rowid.
    """CREATE TABLE objects (
        oid         TEXT PRIMARY KEY,
        collection  TEXT NOT NULL,
        url         TEXT NOT NULL,
        gatherer    TEXT NOT NULL,
        record      INTEGER NOT NULL,
        expires     REAL NOT NULL,
        update_time REAL,
        seq         INTEGER NOT NULL UNIQUE,
        record_seq  INTEGER NOT NULL,
        stamp       REAL NOT NULL DEFAULT 0,
        origin      TEXT NOT NULL DEFAULT ''
    ) WITHOUT ROWID""",
    "CREATE INDEX objects_url ON objects (url)",
    "CREATE INDEX objects_collection_url ON objects (collection, url)",
    "CREATE INDEX objects_expires ON objects (expires)",
    # pos is the rowid: it increases across all pulls, so it orders each pull's items.
    """CREATE TABLE staging (
        pos         INTEGER PRIMARY KEY,
        pull        INTEGER NOT NULL,
        kind        TEXT NOT NULL CHECK (kind IN ('upsert', 'refresh', 'delete')),
        oid         TEXT,
        url         TEXT NOT NULL,
        gatherer    TEXT,
        record      INTEGER,
        ttl         REAL,
        update_time REAL
    )""",
    "CREATE INDEX staging_pull ON staging (pull)",
    """CREATE TABLE tombstones (
        oid        TEXT PRIMARY KEY,
        url        TEXT NOT NULL,
        gatherer   TEXT NOT NULL,
        collection TEXT NOT NULL,
        seq        INTEGER NOT NULL UNIQUE,
        removed_at REAL NOT NULL,
        stamp      REAL NOT NULL DEFAULT 0,
        origin     TEXT NOT NULL DEFAULT ''
    ) WITHOUT ROWID""",
    "CREATE INDEX tombstones_removed_at ON tombstones (removed_at)",
    *_REPLICA_INDEXES,
    """CREATE TABLE collections (
        name      TEXT PRIMARY KEY,
        cursor    TEXT,
        last_pull REAL NOT NULL
    )""",
    """CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value INTEGER NOT NULL
    )""",
    "INSERT INTO meta VALUES ('seq', 0), ('horizon', 0), ('indexed_seq', 0)",
    "CREATE TABLE garbage (record INTEGER PRIMARY KEY)",
    """CREATE TRIGGER objects_drop_record AFTER DELETE ON objects BEGIN
        INSERT INTO garbage VALUES (old.record);
    END""",
    """CREATE TRIGGER objects_replace_record AFTER UPDATE OF record ON objects
    WHEN old.record != new.record BEGIN
        INSERT INTO garbage VALUES (old.record);
    END""",
    # An object present again is no longer removed: changes_since reports its upsert only.
    """CREATE TRIGGER objects_unbury AFTER INSERT ON objects BEGIN
        DELETE FROM tombstones WHERE oid = new.oid;
    END""",
)

# Version 1 had no versions: its objects and tombstones get stamp 0, which any change beats.
_UPGRADES = {
    1: (
        "ALTER TABLE objects ADD COLUMN record_seq INTEGER NOT NULL DEFAULT 0",
        "UPDATE objects SET record_seq = seq",
        "ALTER TABLE objects ADD COLUMN stamp REAL NOT NULL DEFAULT 0",
        "ALTER TABLE objects ADD COLUMN origin TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE tombstones ADD COLUMN stamp REAL NOT NULL DEFAULT 0",
        "ALTER TABLE tombstones ADD COLUMN origin TEXT NOT NULL DEFAULT ''",
        *_REPLICA_INDEXES,
    )
}

# -- staging ------------------------------------------------------------------------------

INSERT_RECORD = "INSERT INTO records (soif) VALUES (?)"
STAGE = (
    "INSERT INTO staging (pull, kind, oid, url, gatherer, record, ttl, update_time)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
STAGED = (
    "SELECT kind, oid, url, gatherer, record, ttl, update_time FROM staging"
    " WHERE pull = ? ORDER BY pos"
)
# Dropping a pull hands the records it staged to the garbage; a commit hands them on to
# the objects instead.
DROP_STAGED_RECORDS = (
    "INSERT INTO garbage SELECT record FROM staging WHERE pull = ? AND record IS NOT NULL"
)
DROP_STAGED = "DELETE FROM staging WHERE pull = ?"
# At open, no pull is in progress: whatever a killed process staged goes.
DROP_ALL_STAGED_RECORDS = "INSERT INTO garbage SELECT record FROM staging WHERE record IS NOT NULL"
DROP_ALL_STAGED = "DELETE FROM staging"
TAKE_GARBAGE = (
    "DELETE FROM garbage WHERE record IN (SELECT record FROM garbage LIMIT ?) RETURNING record"
)
FREE_RECORD = "DELETE FROM records WHERE id = ?"

# -- applying -----------------------------------------------------------------------------

# A change made here is stamped above the version it replaces, object or tombstone
# (harvest_common/replication/version.py): :stamp is the time now.
_ABOVE_TOMBSTONE = (
    f"max(:stamp, coalesce((SELECT stamp FROM tombstones WHERE oid = :oid), 0) + {STEP})"
)
UPSERT_OBJECT = f"""
INSERT INTO objects
    (oid, collection, url, gatherer, record, expires, update_time, seq, record_seq, stamp, origin)
VALUES (:oid, :collection, :url, :gatherer, :record, :expires, :update_time, :seq, :seq,
        {_ABOVE_TOMBSTONE}, :origin)
ON CONFLICT (oid) DO UPDATE SET
    collection = excluded.collection, url = excluded.url, gatherer = excluded.gatherer,
    record = excluded.record, expires = excluded.expires, update_time = excluded.update_time,
    seq = excluded.seq, record_seq = excluded.seq,
    stamp = max(excluded.stamp, objects.stamp + {STEP}), origin = excluded.origin
"""
# A replica's object, with the version it was made with: the caller has checked it is newer.
PUT_REPLICA = """
INSERT INTO objects
    (oid, collection, url, gatherer, record, expires, update_time, seq, record_seq, stamp, origin)
VALUES (:oid, :collection, :url, :gatherer, :record, :expires, :update_time, :seq, :seq,
        :stamp, :origin)
ON CONFLICT (oid) DO UPDATE SET
    collection = excluded.collection, url = excluded.url, gatherer = excluded.gatherer,
    record = excluded.record, expires = excluded.expires, update_time = excluded.update_time,
    seq = excluded.seq, record_seq = excluded.seq, stamp = excluded.stamp,
    origin = excluded.origin
"""
OIDS_BY_OID = "SELECT oid FROM objects WHERE collection = ? AND oid = ?"
OIDS_BY_URL = "SELECT oid FROM objects WHERE collection = ? AND url = ?"
# A refresh is a change (replicas must extend the object's life too), not of its record.
REFRESH_OBJECT = f"""
UPDATE objects SET expires = ?, seq = ?, stamp = max(?, stamp + {STEP}), origin = ?
 WHERE oid = ?
"""

# Every removal returns what its tombstone needs.
_GONE = " RETURNING oid, url, gatherer, collection, stamp, origin, expires"
DELETE_BY_OID = "DELETE FROM objects WHERE collection = ? AND oid = ?" + _GONE
DELETE_BY_URL = "DELETE FROM objects WHERE collection = ? AND url = ?" + _GONE
# A complete pull: what the collection held before it (seq at most the last one given when
# the commit began) and the pull neither brought again nor refreshed (a JSON array of oids).
DELETE_UNSEEN = (
    "DELETE FROM objects WHERE collection = ? AND seq <= ?"
    " AND oid NOT IN (SELECT value FROM json_each(?))" + _GONE
)
DELETE_EXPIRED = "DELETE FROM objects WHERE expires <= ?" + _GONE
DELETE_COLLECTION = "DELETE FROM objects WHERE collection = ?" + _GONE
DELETE_OBJECT = "DELETE FROM objects WHERE oid = ?"
BURY = (
    "INSERT OR REPLACE INTO tombstones"
    " (oid, url, gatherer, collection, seq, removed_at, stamp, origin)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
# Tombstones past the retention, but never one the index has yet to apply.
DROP_TOMBSTONES = "DELETE FROM tombstones WHERE removed_at < ? AND seq <= ? RETURNING seq"
SAVE_COLLECTION = """
INSERT INTO collections (name, cursor, last_pull) VALUES (?, ?, ?)
ON CONFLICT (name) DO UPDATE SET cursor = excluded.cursor, last_pull = excluded.last_pull
"""
FORGET_COLLECTION = "DELETE FROM collections WHERE name = ?"
GET_META = "SELECT value FROM meta WHERE key = ?"
SET_META = "UPDATE meta SET value = ? WHERE key = ?"

# -- reading ------------------------------------------------------------------------------

_OBJECT = (
    "SELECT o.oid, o.collection, o.url, o.gatherer, r.soif, o.expires, o.seq, o.update_time"
    " FROM objects o JOIN records r ON r.id = o.record"
)
OBJECT_BY_OID = _OBJECT + " WHERE o.oid = ?"
OBJECTS_BY_OIDS = _OBJECT + " WHERE o.oid IN (SELECT value FROM json_each(?))"
OBJECTS_BY_URL = _OBJECT + " WHERE o.url = ? ORDER BY o.collection, o.gatherer"
# SQLite merges the two seq-ordered index scans, so a page of changes reads only that page.
# An object whose record did not change after :after (it was refreshed) is a 'refresh'.
CHANGES = """
SELECT o.seq, o.oid, iif(o.record_seq > :after, 'upsert', 'refresh'), o.collection, o.url,
       o.gatherer, r.soif, o.update_time
  FROM objects o JOIN records r ON r.id = o.record
 WHERE o.seq > :after
UNION ALL
SELECT t.seq, t.oid, 'remove', t.collection, t.url, t.gatherer, NULL, NULL
  FROM tombstones t
 WHERE t.seq > :after
ORDER BY 1
LIMIT :limit
"""
# A uniform sample, a page at a time: the objects whose oids (hashes) sort below :below, from
# :after on, but those of one collection.
SAMPLE = """
SELECT o.oid, r.soif
  FROM objects o JOIN records r ON r.id = o.record
 WHERE o.oid > :after AND o.oid < :below AND o.collection != :excluded
 ORDER BY o.oid
 LIMIT :limit
"""
# The objects outside a collection and their last change (an upsert or a removal).
OUTSIDE = """
SELECT (SELECT count(*) FROM objects WHERE collection != :excluded),
       max((SELECT coalesce(max(seq), 0) FROM objects WHERE collection != :excluded),
           (SELECT coalesce(max(seq), 0) FROM tombstones WHERE collection != :excluded))
"""
COUNT_ALL = "SELECT count(*) FROM objects"
COUNT_COLLECTION = "SELECT count(*) FROM objects WHERE collection = ?"
ALL_OIDS = "SELECT oid FROM objects"
# One statement, so the counts and cursors are of one moment. A collection that was never
# pulled here but whose objects are held (a replica's, applied by the replicator) has no
# row in ``collections``: it is listed from its objects, without a cursor or last pull.
COLLECTIONS = """
SELECT c.name, c.cursor, c.last_pull,
       (SELECT count(*) FROM objects o WHERE o.collection = c.name)
  FROM collections c
UNION ALL
SELECT o.collection, NULL, NULL, count(*)
  FROM objects o
 WHERE o.collection NOT IN (SELECT name FROM collections)
 GROUP BY o.collection
"""
CURSOR = "SELECT cursor FROM collections WHERE name = ?"

# -- replicas -----------------------------------------------------------------------------

# (seq, oid, stamp, origin, deleted) of one collection's changes after :after.
REPLICA_CHANGES = """
SELECT seq, oid, stamp, origin, 0 FROM objects WHERE collection = :collection AND seq > :after
UNION ALL
SELECT seq, oid, stamp, origin, 1 FROM tombstones WHERE collection = :collection AND seq > :after
ORDER BY 1
LIMIT :limit
"""
# (oid, stamp, origin, deleted) of the oids in a JSON array that are held or buried.
VERSIONS = """
SELECT oid, stamp, origin, 0 FROM objects WHERE oid IN (SELECT value FROM json_each(:oids))
UNION ALL
SELECT oid, stamp, origin, 1 FROM tombstones WHERE oid IN (SELECT value FROM json_each(:oids))
"""
# (oid, stamp, origin, deleted) of everything of a collection, for Merkle digests.
COLLECTION_VERSIONS = """
SELECT oid, stamp, origin, 0 FROM objects WHERE collection = :collection
UNION ALL
SELECT oid, stamp, origin, 1 FROM tombstones WHERE collection = :collection
"""
# The whole state of the oids in a JSON array: (oid, collection, url, gatherer, expires,
# stamp, origin, record), record NULL for a tombstone.
ENTRIES = """
SELECT o.oid, o.collection, o.url, o.gatherer, o.expires, o.stamp, o.origin, r.soif
  FROM objects o JOIN records r ON r.id = o.record
 WHERE o.oid IN (SELECT value FROM json_each(:oids))
UNION ALL
SELECT oid, collection, url, gatherer, 0, stamp, origin, NULL
  FROM tombstones WHERE oid IN (SELECT value FROM json_each(:oids))
"""


def connect(path: Path) -> sqlite3.Connection:
    """Open ``path`` in autocommit mode (transactions are explicit), creating the schema.
    Raises sqlite3.Error, or StorageError for a schema this code can't read."""
    conn = sqlite.connect(
        path, pragmas=(f"journal_size_limit = {JOURNAL_SIZE_LIMIT}", f"cache_size = -{CACHE_KIB}")
    )
    try:
        sqlite.migrate(conn, _TABLES, VERSION, _unreadable, _UPGRADES)
    except BaseException:
        conn.close()
        raise
    return conn


def _unreadable(version: int) -> StorageError:
    return StorageError(f"registry schema version {version}; this broker reads {VERSION}")
