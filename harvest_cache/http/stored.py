"""A stored response's head, with the exchange times the policy reads (RFC 9111 4.2.3)."""

from __future__ import annotations

from typing import NamedTuple


class StoredHead(NamedTuple):
    """The head of a stored response (a named tuple: made on every miss and revalidation,
    and a frozen dataclass costs four times as much to make).

    ``headers`` are the end-to-end fields as received (hop-by-hop fields already removed).
    ``request_time`` and ``response_time`` are wall-clock seconds (RFC 9111 4.2.3) of the
    exchange that produced or last validated the response. ``vary_key`` is the normalised
    selecting-header text this variant was stored under ("" without Vary).
    """

    url: str
    status: int
    reason: str
    headers: tuple[tuple[str, str], ...]
    request_time: float
    response_time: float
    body_length: int
    vary_key: str = ""

    # Copies with some fields changed, made directly: _replace() costs twice as much, and
    # these run on every miss and revalidation.

    def with_body_length(self, body_length: int) -> StoredHead:
        return StoredHead(
            self.url,
            self.status,
            self.reason,
            self.headers,
            self.request_time,
            self.response_time,
            body_length,
            self.vary_key,
        )

    def revalidated(
        self, headers: tuple[tuple[str, str], ...], request_time: float, response_time: float
    ) -> StoredHead:
        """With the fields and exchange times of a validation."""
        return StoredHead(
            self.url,
            self.status,
            self.reason,
            headers,
            request_time,
            response_time,
            self.body_length,
            self.vary_key,
        )
