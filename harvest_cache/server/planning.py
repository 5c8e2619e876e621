"""What the planned paths (revalidations and misses) share: sending the planned request,
handing an exchange that turned out unplanned to the miss fast path, and answering."""

from __future__ import annotations

import time
from collections.abc import Callable

from harvest_cache.http.headers import Headers
from harvest_cache.http.target import Target
from harvest_cache.server.accesslog import Hierarchy, line_head
from harvest_cache.server.connection import ClientConnection
from harvest_cache.server.flight import Flight
from harvest_cache.server.lean import LeanFetch, LeanPath, Step, write_answer
from harvest_cache.server.reply import interim_relay
from harvest_cache.server.request import Request
from harvest_cache.store.interface import StoredObject
from harvest_cache.upstream.connection import (
    Listener,
    Recognise,
    ResponseHead,
    UpstreamConnection,
)


def send_planned(
    path: LeanPath,
    listener: Listener,
    conn: ClientConnection,
    upstream: UpstreamConnection,
    request: bytes,
    recognise: Recognise | None = None,
) -> float:
    """Send ``request`` on ``upstream``, its response told to ``listener`` (or recognised);
    the time sent."""
    sent = time.time()
    relay = interim_relay(conn, "1.1", path.via)
    upstream.begin(False, path.config.upstream.read_timeout, listener, relay, recognise)
    upstream.send_now(request)
    return sent


def unplanned(
    path: LeanPath,
    planned: Step,
    conn: ClientConnection,
    upstream: UpstreamConnection,
    flight: Flight,
    *,
    target: Target,
    raw_target: str,
    fields: tuple[tuple[bytes, bytes], ...],
    started: float,
    stored: StoredObject | None,
    request_time: float,
    head: ResponseHead | None = None,
) -> LeanFetch:
    """The miss fast path's fetch for the plain keep-alive GET that ``planned`` began,
    taking over its exchange and flight where they stand."""
    req = Request(
        method="GET",
        target=raw_target,
        version="1.1",
        headers=Headers.from_raw(fields),
        keep_alive=True,
        started=started,
    )
    fetch = LeanFetch(
        path,
        req,
        target,
        conn,
        stored,
        upstream,
        flight=flight,
        request_time=request_time,
        head=head,
    )
    path.begun(fetch)  # first, so that shutdown never sees no fetch running
    path.ended(planned)
    if upstream.listening:
        upstream.relisten(fetch)
    return fetch


def answer_planned(
    path: LeanPath,
    planned: Step,
    conn: ClientConnection,
    answer: tuple[bytes, bytes],
    started: float,
    result: str,
    status: int,
    log_tail: Callable[[], bytes],
) -> None:
    """Send a planned answer (head and body), count it and log it (``log_tail``: the line's
    fields after the size)."""
    head, body = answer
    sent = write_answer(conn, head, body)
    size = len(head) + len(body)
    seconds = time.monotonic() - started
    path.traffic.ended("GET", result, status, size, seconds, Hierarchy.HIER_DIRECT, not sent)
    if path.log.enabled:
        elapsed = round(seconds * 1000)
        line = line_head(
            time.time(), elapsed, conn.client_bytes, result.encode(), status, size, not sent
        )
        path.log.write(line + log_tail())
    path.answered += 1
    path.ended(planned)
    conn.lean_done(True)
