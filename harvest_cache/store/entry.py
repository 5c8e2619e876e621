"""What the store keeps beside responses: Vary markers (responses are ``StoredHead`` and
their bodies; see ``harvest_cache.http.stored``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class VaryMarker:
    """Stored at a URL's primary key when its responses vary (Squid's "vary object").

    ``names`` are the lowercased field names of the latest response's Vary; ``generation``
    is part of every variant key, so invalidating the marker orphans all old variants.
    """

    url: str
    names: tuple[str, ...]
    generation: str
