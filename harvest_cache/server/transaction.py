"""What one request did, as the access log (and later the metrics) record it."""

from __future__ import annotations

from dataclasses import dataclass

from harvest_cache.server.accesslog import Hierarchy


@dataclass(slots=True)
class Transaction:
    """Squid's vocabulary: ``result`` is a result code (TCP_HIT, TCP_MISS...), ``hierarchy``
    a hierarchy code (HIER_NONE, HIER_DIRECT...), ``peer`` the address fetched from."""

    started: float
    client: str
    method: str
    url: str
    result: str = "NONE"
    status: int = 0
    bytes_sent: int = 0
    hierarchy: Hierarchy = Hierarchy.HIER_NONE
    peer: str = "-"
    content_type: str = "-"
    aborted: bool = False
