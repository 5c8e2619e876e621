"""Disk hits begun on the fast path: a plain GET whose object only the disk tier may hold.

The read runs on the store's threads and calls back on the loop (``MemoryView.read_disk``),
which has promoted what it found to the memory tier. A fresh object with its body read whole
is answered there, as the general path would answer it (the same decision, head and log
line); anything else (nothing found, a Vary marker, a body left in its file, a stale object)
is handed to the general path, which then finds the memory tier's copy, if any, without a
second read. No task, request object of the general path or await is spent on the hit.
"""

from __future__ import annotations

import time
from functools import partial

from harvest_cache.http.cache_status import cache_status
from harvest_cache.http.decision import Asked, FromCache, Held, lookup
from harvest_cache.http.freshness import HeuristicRules
from harvest_cache.http.headers import Headers
from harvest_cache.server.accesslog import AccessLog
from harvest_cache.server.connection import ClientConnection
from harvest_cache.server.reply import ClientGone, Reply, from_store
from harvest_cache.server.request import Request
from harvest_cache.server.transaction import Transaction, record
from harvest_cache.store.interface import FileBody, Found, MemoryView, StoredObject
from harvest_cache.traffic import Traffic


class DiskHits:
    """Starts disk reads for plain GETs and answers the hits they find; ``answered`` and
    ``handed_over`` count them (for metrics, and for tests to see which path ran)."""

    def __init__(
        self,
        name: str,
        memory: MemoryView,
        heuristics: HeuristicRules,
        access_log: AccessLog,
        traffic: Traffic,
        status_keys: bool,
    ) -> None:
        self.name = name
        self.memory = memory
        self.heuristics = heuristics
        self.log = access_log
        self.traffic = traffic
        self.status_keys = status_keys
        self.answered = 0
        self.handed_over = 0

    def read(self, conn: ClientConnection, req: Request, key: str) -> bool:
        """Begin answering ``req``, a plain GET for ``key``, from the disk tier; False if it
        cannot be read here (the request then goes the general way at once)."""
        return self.memory.read_disk(key, partial(self._found, conn, req, key))

    def _found(self, conn: ClientConnection, req: Request, key: str, found: Found | None) -> None:
        obj = found if isinstance(found, StoredObject) else None
        if obj is None or isinstance(obj.body, FileBody):
            if obj is not None and isinstance(obj.body, FileBody):
                obj.body.file.close()  # (a large body: streamed by the general path)
            self._hand_over(conn, req)
            return
        now = time.time()
        asked = Asked("GET", req.headers, False, plain=True)
        decision = lookup(asked, Held(obj.head, obj.tier), now, self.heuristics.for_url(key))
        if not isinstance(decision, FromCache):
            self._hand_over(conn, req)  # (stale: revalidated there)
            return
        tx = Transaction(req.started, conn.client_ip, "GET", key, decision.result)
        headers = Headers(obj.head.headers)
        value = cache_status(
            self.name, hit=True, ttl=decision.ttl, key=key if self.status_keys else None
        )
        from_store(headers, decision.age, value, self.name)
        reply = Reply(conn, req)
        try:
            reply.start(obj.head.status, obj.head.reason, headers, obj.head.body_length, obj.body)
        except ClientGone:
            tx.aborted = True
        tx.status, tx.bytes_sent = reply.status, reply.bytes_sent
        tx.content_type = reply.content_type
        record(self.log, self.traffic, tx)
        self.answered += 1
        conn.lean_done(req.keep_alive)

    def _hand_over(self, conn: ClientConnection, req: Request) -> None:
        self.handed_over += 1
        conn.lean_handoff(req)
