"""The export stream: the database's records as SOIF, all or only the changes since a time.

What ``harvest-gather export`` writes and the ``gatherd`` service sends a broker. Objects
come in update-time order from one consistent snapshot, read in batches on the snapshot's
own thread (so memory holds one batch, however large the database). Every object carries
its ``Update-Time``; a client resumes from the largest it received, or from the export's
:attr:`Export.until` (its high-water mark, known before the first byte).

Without ``since``, every current record is a plain ``@FILE`` object. With ``since``::

    @FILE { url ...the whole record... }              content changed after since
    @REFRESH { @FILE { url  Update-Time  Time-to-Live } ... }   only re-gathered after since
    @DELETE { @FILE { url  Update-Time } ... }                  deleted after since

Consecutive refreshes (or deletes) share one wrapper, up to one batch. A manual record is
merged over the generated record of its URL, attribute by attribute (manual wins, in the
generated attribute's place; its other attributes are appended); alone, it is exported as is.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack

from gatherer.database import (
    TIME_TO_LIVE,
    UPDATE_TIME,
    Change,
    ChangeKind,
    GathererDatabase,
    Snapshot,
    load_record,
    seconds_text,
)
from harvest_common.soif import Record, encode, encode_delete, encode_refresh

_WRAPPERS = {ChangeKind.REFRESH: encode_refresh, ChangeKind.DELETE: encode_delete}


def merged(generated: Record, manual: Record) -> Record:
    """``generated`` with ``manual``'s attributes over it (names compared ignoring case)."""
    record = generated
    for name, value in manual.attributes:
        record = record.replace(name, value)
    return record


def _whole(change: Change) -> bytes:
    if change.manual is None:
        assert change.soif is not None
        return change.soif  # stored already stamped: sent as is
    record = load_record(change.url, change.manual)
    if change.soif is not None:
        record = merged(load_record(change.url, change.soif), record)
    return encode(record.replace(UPDATE_TIME, change.update_time))


def _marker(change: Change) -> Record:
    attributes = [(UPDATE_TIME, change.update_time.encode())]
    if change.time_to_live is not None:
        attributes.append((TIME_TO_LIVE, seconds_text(change.time_to_live).encode()))
    return Record("FILE", change.url, tuple(attributes))


def render(changes: list[Change]) -> bytes:
    """One batch of changes as SOIF, runs of refreshes or deletes each in one wrapper."""
    parts: list[bytes] = []
    run: list[Record] = []
    run_kind: ChangeKind | None = None
    for change in changes:
        if change.kind is not run_kind and run_kind is not None:
            parts.append(_WRAPPERS[run_kind](run))
            run, run_kind = [], None
        if change.kind is ChangeKind.RECORD:
            parts.append(_whole(change))
        else:
            run.append(_marker(change))
            run_kind = change.kind
    if run_kind is not None:
        parts.append(_WRAPPERS[run_kind](run))
    return b"".join(parts)


class Export:
    """One export: an async iterable of SOIF chunks (one per batch of ``batch`` objects).

    As ``async with export(...) as stream``, the snapshot is taken on entry, so
    :attr:`until` and :attr:`complete` can be read before the first chunk, and released on
    exit. Iterated without ``async with``, it takes the snapshot on the first chunk and
    releases it at the end of the iteration (or when the iteration is closed).
    """

    def __init__(self, db: GathererDatabase, since: float | None, batch: int) -> None:
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        self._db = db
        self.since = since
        self.batch = batch
        self._stack = AsyncExitStack()
        self._snapshot: Snapshot | None = None

    def __repr__(self) -> str:
        since = "all" if self.since is None else f"since {self.since:.6f}"
        return f"Export({since}, batch {self.batch}, {self._snapshot!r})"

    async def __aenter__(self) -> Export:
        self._snapshot = await self._stack.enter_async_context(self._db.snapshot(self.since))
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._stack.aclose()

    @property
    def until(self) -> float:
        """The newest update time in the snapshot: where the client resumes."""
        return self._taken().until

    @property
    def complete(self) -> bool:
        """Every current record, no deletions: the client replaces what it holds."""
        return self._taken().complete

    def _taken(self) -> Snapshot:
        if self._snapshot is None:
            raise RuntimeError("the export's snapshot is taken by `async with` or iterating")
        return self._snapshot

    def __aiter__(self) -> AsyncGenerator[bytes, None]:
        return self._chunks()

    async def _chunks(self) -> AsyncGenerator[bytes, None]:
        async with AsyncExitStack() as stack:
            if self._snapshot is None:
                await stack.enter_async_context(self)
            snapshot = self._taken()
            while (chunk := await snapshot.read(self.batch, render)) is not None:
                yield chunk


def export(db: GathererDatabase, since: float | None, *, batch: int = 500) -> Export:
    """The records changed after ``since`` (epoch seconds, exclusive), or all for None."""
    return Export(db, since, batch)
