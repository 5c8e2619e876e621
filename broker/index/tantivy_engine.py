"""``TantivyIndex``: the broker's full-text index (broker/index/interface.py) on tantivy.

Concurrency, owned here: every tantivy call runs in a thread, never on the event loop. One
writer thread adds, removes and commits, in call order; a small pool runs searches, each on
the searcher of the last commit (the reader reloads only when this process commits, so a
search never waits for a reload and sees only committed objects); one more thread brings the
vocabulary of prefix and approximate words (broker/index/fuzzy.py) up to date. That happens
lazily, on the first such query after a commit, or when ``refresh_vocabulary`` is awaited:
a bulk load pays nothing for it. Until it is current, those words are asked of tantivy's
automaton queries, which find the same objects with constant scores. ``close`` waits for
the writer's queue and the running searches and discards what was not committed.

Crash safety is tantivy's: a commit replaces ``meta.json`` atomically, so an index killed
while adding or committing opens with its last commit.

``Results.total`` is exact: counting every match cost 0.2 ms or less next to ranking the top
ones (bench/README.md, "Broker index").
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import shutil
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Self, TypeVar

import tantivy

from broker.errors import EngineError
from broker.index.fuzzy import Vocabulary
from broker.index.interface import Hit, IndexedObject, Results
from broker.index.schema import OID, TEXT_FIELDS, Analyzer, build_schema, document, field_bit
from broker.index.translate import Context, translate
from broker.query.ast import And, Node, Not, Or, Pattern, Word

T = TypeVar("T")

log = logging.getLogger(__name__)

# Chosen by measurement on the 2-core machine (bench/README.md, "Broker index"): two threads
# use both cores; 512 MB keeps a 100,000-object load to 2-3 segments.
HEAP_BYTES = 512_000_000
INDEXING_THREADS = 2
SEARCH_THREADS = 2

# What tantivy raises for bad input, missing files or a schema that does not match.
_ENGINE_ERRORS = (ValueError, OSError, RuntimeError)
# How tantivy says that an index exists with other fields (its only report of it).
_LAYOUT_MISMATCH = "schema does not match"
_WRITER_LOCK = ".tantivy-writer.lock"
# Beside tantivy's files (which it leaves alone: it deletes only files it made), while a new
# index has not been filled from the registry.
_UNFILLED = ".harvest-unfilled"


class _Engine:
    """The synchronous half: tantivy's index, writer and current searcher. Called only from
    the threads of ``TantivyIndex``: the writer's methods from its writer thread."""

    def __init__(self, directory: Path, heap_bytes: int, threads: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.schema = build_schema()
        # Made before the index it marks: a new index is unfilled until ``filled`` removes it,
        # over as many opens as filling it takes.
        self.unfilled_marker = directory / _UNFILLED
        if not tantivy.Index.exists(str(directory)):
            self.unfilled_marker.touch()
        try:
            self.index = tantivy.Index(self.schema, path=str(directory), reuse=True)
        except ValueError as error:
            # Made with another layout (an older broker's): the registry can fill a new one.
            if _LAYOUT_MISMATCH not in str(error):
                raise
            _discard(directory)
            log.warning("the index in %s had another layout: starting a new one", directory)
            self.unfilled_marker.touch()
            self.index = tantivy.Index(self.schema, path=str(directory))
        self.unfilled = self.unfilled_marker.exists()
        # Reload only when this process commits: no file watching, no surprise reloads.
        self.index.config_reader(reload_policy="manual")
        self.writer: tantivy.IndexWriter | None = self.index.writer(heap_bytes, threads)
        # Files no commit refers to: segments replaced by merges that ended after the last
        # commit (tantivy collects garbage only when committing), or a killed commit's.
        self.writer.garbage_collect_files()
        self.analyzer = Analyzer()
        # The searcher and its generation (commits made), read and replaced as one value.
        self.current: tuple[int, tantivy.Searcher] = (0, self.index.searcher())
        # The vocabulary and the generation whose terms it holds (-1: none yet).
        self.vocabulary: tuple[int, Vocabulary] = (-1, Vocabulary())
        # Taken by the refresher thread to replace the vocabulary, by a commit to drop it.
        self.vocabulary_lock = threading.Lock()
        # Whether a clear waits for the next commit, and the oids added since the last one.
        self.cleared = False
        self.staged: set[str] = set()

    def live_writer(self) -> tantivy.IndexWriter:
        if self.writer is None:
            raise EngineError("the index is closed")
        return self.writer

    def add(self, objects: Sequence[IndexedObject]) -> None:
        writer = self.live_writer()
        # The last of several objects with one oid wins, as if added one after the other.
        latest = {obj.oid: obj for obj in objects}
        # Every document first: an object that cannot be indexed fails the batch unwritten.
        documents = [document(obj, self.schema) for obj in latest.values()]
        # Only an oid the index may hold needs deleting: tantivy runs every delete against
        # every segment, and deleting each batch's oids cost a new index's load about a tenth
        # of its rate. An oid is held if added since the last commit, or (unless a clear
        # waits for the commit) in the last commit's objects; one of a deleted object may be
        # counted too, which costs only a delete that finds nothing.
        _, searcher = self.current
        committed = not self.cleared and searcher.num_docs > 0
        held = [
            oid
            for oid in latest
            if oid in self.staged or (committed and searcher.doc_freq(OID, oid))
        ]
        if held:
            # One delete operation, ordered before the documents that replace them.
            writer.delete_documents_by_query(tantivy.Query.term_set_query(self.schema, OID, held))
        # Before adding: a batch cut short still has its oids deleted if added again.
        self.staged.update(latest)
        for doc in documents:
            writer.add_document(doc)

    def remove(self, oids: Sequence[str]) -> None:
        writer = self.live_writer()
        writer.delete_documents_by_query(tantivy.Query.term_set_query(self.schema, OID, list(oids)))

    def commit(self) -> None:
        self.live_writer().commit()
        self.staged.clear()
        self.index.reload()
        generation, _ = self.current
        if self.cleared:
            # The words of the objects that went would otherwise stay, as nearest words.
            with self.vocabulary_lock:
                self.vocabulary = (-1, Vocabulary())
            self.cleared = False
        self.current = (generation + 1, self.index.searcher())

    def clear(self) -> None:
        writer = self.live_writer()
        # tantivy's delete_all_documents spares what was added since the last commit.
        writer.rollback()
        writer.delete_all_documents()
        self.staged.clear()
        self.cleared = True

    def rollback(self) -> None:
        self.live_writer().rollback()
        self.staged.clear()
        self.cleared = False

    def close(self) -> None:
        writer, self.writer = self.writer, None
        if writer is not None:
            # Merges under way finish and are recorded (a rollback would abandon them, leaving
            # the many small segments of frequent commits); uncommitted documents are dropped.
            writer.wait_merging_threads()

    def search(self, query: Node, limit: int, offset: int) -> Results:
        generation, searcher = self.current
        known, vocabulary = self.vocabulary
        context = Context(
            self.schema, searcher, self.analyzer, vocabulary if known >= generation else None
        )
        # tantivy refuses a limit of 0; the count is the same.
        found = searcher.search(translate(query, context), max(limit, 1), count=True, offset=offset)
        hits = tuple(Hit(_oid(searcher, address), score) for score, address in found.hits[:limit])
        # The stubs lack SearchResult.count, which is set when counting was asked for.
        total: int = found.count  # type: ignore[attr-defined]
        return Results(total, hits, context.near)

    def vocabulary_current(self) -> bool:
        return self.vocabulary[0] >= self.current[0]

    def refresh_vocabulary(self) -> None:
        generation, searcher = self.current
        known, vocabulary = self.vocabulary
        if known >= generation:
            return
        # Every term of every field, those of deleted objects too until their segments merge
        # (a superset: such words cost look-ups that find nothing, and may take places among
        # an approximate word's nearest).
        words = [
            (term, field_bit(field))
            for field in TEXT_FIELDS
            for term, _ in searcher.terms_with_prefix(field, "")
        ]
        with self.vocabulary_lock:
            # Unless a commit after a clear dropped the vocabulary meanwhile.
            if self.vocabulary[1] is vocabulary:
                self.vocabulary = (generation, vocabulary.extended(words))

    def oids(self) -> set[str]:
        _, searcher = self.current
        if not searcher.num_docs:
            return set()
        found = searcher.search(tantivy.Query.all_query(), searcher.num_docs, count=False)
        return {_oid(searcher, address) for _, address in found.hits}

    def count(self) -> int:
        return self.current[1].num_docs

    def filled(self) -> None:
        self.unfilled_marker.unlink(missing_ok=True)
        self.unfilled = False


def _discard(directory: Path) -> None:
    """Remove the index in ``directory`` and leave the directory empty, unless another process
    (a running broker) writes to it: tantivy's writer holds an flock on its lock file."""
    with (directory / _WRITER_LOCK).open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EngineError(
                f"the index in {directory} has another layout, and another process is using it"
            ) from None
        shutil.rmtree(directory)
    directory.mkdir()


def _oid(searcher: tantivy.Searcher, address: tantivy.DocAddress) -> str:
    oid: str = searcher.doc(address)[OID][0]
    return oid


class TantivyIndex:
    """The broker's index on tantivy, in ``directory``: ``await TantivyIndex.open(path)``,
    or ``async with await TantivyIndex.open(path) as index``."""

    def __init__(self, engine: _Engine, writer: ThreadPoolExecutor) -> None:
        self._engine = engine
        self._writer = writer
        self._searchers = ThreadPoolExecutor(SEARCH_THREADS, thread_name_prefix="index-search")
        self._refresher = ThreadPoolExecutor(1, thread_name_prefix="index-vocabulary")
        self._refreshing: asyncio.Future[None] | None = None
        self._closed = False

    @classmethod
    async def open(
        cls,
        directory: Path,
        *,
        heap_bytes: int = HEAP_BYTES,
        indexing_threads: int = INDEXING_THREADS,
    ) -> TantivyIndex:
        """Open the index in ``directory``, creating it (and the directory) if need be.

        ``heap_bytes``: the writer's memory for documents not yet flushed to a segment, shared
        by ``indexing_threads`` threads of tantivy's own."""
        writer = ThreadPoolExecutor(1, thread_name_prefix="index-writer")
        try:
            engine = await _run(writer, _Engine, directory, heap_bytes, indexing_threads)
        except BaseException:
            writer.shutdown(wait=False)
            raise
        return cls(engine, writer)

    @property
    def unfilled(self) -> bool:
        return self._engine.unfilled

    async def filled(self) -> None:
        await self._write(self._engine.filled)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def add(self, objects: Sequence[IndexedObject]) -> None:
        if objects:
            await self._write(self._engine.add, objects)

    async def remove(self, oids: Sequence[str]) -> None:
        if oids:
            await self._write(self._engine.remove, oids)

    async def commit(self) -> None:
        await self._write(self._engine.commit)

    async def clear(self) -> None:
        await self._write(self._engine.clear)

    async def rollback(self) -> None:
        await self._write(self._engine.rollback)

    async def search(self, query: Node, *, limit: int, offset: int = 0) -> Results:
        self._check_open()
        if limit < 0 or offset < 0:
            raise EngineError(f"limit ({limit}) and offset ({offset}) must not be negative")
        if _approximate(query) and not self._engine.vocabulary_current():
            self._start_refresh()
        return await _run(self._searchers, self._engine.search, query, limit, offset)

    async def refresh_vocabulary(self) -> None:
        """Bring the vocabulary of prefix and approximate words up to date with the last
        commit, so that they are answered with ranked exact terms from now on."""
        self._check_open()
        while not self._engine.vocabulary_current():
            await asyncio.shield(self._start_refresh())

    async def oids(self) -> set[str]:
        self._check_open()
        return await _run(self._searchers, self._engine.oids)

    async def count(self) -> int:
        self._check_open()
        return await _run(self._searchers, self._engine.count)

    async def close(self) -> None:
        """Wait for queued writes and running searches, then release the engine; what was
        not committed is dropped."""
        if self._closed:
            return
        self._closed = True
        try:
            await _run(self._writer, self._shut_down)
        finally:
            self._writer.shutdown(wait=False)

    def _shut_down(self) -> None:
        # In the writer thread, after every queued write: nothing blocks the event loop.
        self._searchers.shutdown(wait=True)
        self._refresher.shutdown(wait=True, cancel_futures=True)
        self._engine.close()

    def _check_open(self) -> None:
        if self._closed:
            raise EngineError("the index is closed")

    async def _write(self, call: Callable[..., None], *args: object) -> None:
        self._check_open()
        await _run(self._writer, call, *args)

    def _start_refresh(self) -> asyncio.Future[None]:
        if self._refreshing is None or self._refreshing.done():
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(
                self._refresher, _guarded, self._engine.refresh_vocabulary
            )
            future.add_done_callback(_log_failure)
            self._refreshing = future
        return self._refreshing


async def _run(pool: ThreadPoolExecutor, call: Callable[..., T], *args: object) -> T:
    return await asyncio.get_running_loop().run_in_executor(pool, _guarded, call, *args)


def _guarded(call: Callable[..., T], *args: object) -> T:
    """``call`` with tantivy's errors as EngineError (in the worker thread, so the original
    traceback is kept as the cause)."""
    try:
        return call(*args)
    except EngineError:
        raise
    except _ENGINE_ERRORS as error:
        raise EngineError(f"{type(error).__name__}: {error}") from error


def _log_failure(future: asyncio.Future[None]) -> None:
    # Searches go on with the automaton queries; the next one tries again.
    if not future.cancelled() and (error := future.exception()) is not None:
        log.error("refreshing the vocabulary failed: %s", error)


def _approximate(node: Node) -> bool:
    """Whether ``node`` may use the vocabulary (a pattern's words may be prefixes)."""
    match node:
        case Word():
            return node.prefix or node.errors > 0
        case Pattern():
            return True
        case And() | Or():
            return any(_approximate(item) for item in node.items)
        case Not():
            return _approximate(node.item)
        case _:
            return False
