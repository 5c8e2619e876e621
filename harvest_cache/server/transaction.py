"""What one request did, as the access log and the metrics record it."""

from __future__ import annotations

import time
from dataclasses import dataclass

from harvest_cache.server.accesslog import AccessLog, Hierarchy, line_head, line_tail
from harvest_cache.traffic import Traffic


@dataclass(slots=True)
class Transaction:
    """Squid's vocabulary: ``result`` is a result code (TCP_HIT, TCP_MISS...), ``hierarchy``
    a hierarchy code (HIER_NONE, HIER_DIRECT...), ``peer`` the address fetched from."""

    started: float  # time.monotonic() when the request head was complete
    client: str
    method: str
    url: str
    result: str = "NONE"
    status: int = 0
    bytes_sent: int = 0
    hierarchy: str = Hierarchy.HIER_NONE
    peer: str = "-"
    content_type: str = "-"
    aborted: bool = False


def record(log: AccessLog, traffic: Traffic, tx: Transaction) -> None:
    """Count ``tx`` and write its access-log line, now that it has ended."""
    seconds = time.monotonic() - tx.started
    traffic.ended(tx.method, tx.result, tx.status, tx.bytes_sent, seconds, tx.hierarchy, tx.aborted)
    if not log.enabled:
        return
    elapsed = round(seconds * 1000)
    head = line_head(
        time.time(),
        elapsed,
        tx.client.encode(),
        tx.result.encode(),
        tx.status,
        tx.bytes_sent,
        tx.aborted,
    )
    log.write(head + line_tail(tx.method, tx.url, tx.hierarchy, tx.peer, None, tx.content_type))
