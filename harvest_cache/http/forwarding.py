"""What a proxy changes in the messages it forwards (RFC 9110 7.6, RFC 9112 9.6).

Hop-by-hop fields are dropped, ``Via`` gets our entry, ``X-Forwarded-For`` follows the
configured mode, and ``Max-Forwards`` is decremented. Loops are detected by our name in Via.
"""

from __future__ import annotations

from harvest_cache.http.dates import format_http_date
from harvest_cache.http.headers import Headers

# Fields that describe one connection, never the message (RFC 9110 7.6.1, plus the
# non-standard Proxy-Connection that old browsers send and Keep-Alive).
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


def end_to_end(headers: Headers, without: frozenset[str] = frozenset()) -> Headers:
    """A copy without hop-by-hop fields, the fields that Connection names, and the fields
    ``without`` names (lowercased)."""
    drop = HOP_BY_HOP | without
    if headers.names().isdisjoint(drop):  # Connection is hop-by-hop: nothing to drop
        return headers.copy()
    drop |= {n.lower() for n in headers.get_list("Connection")}
    return Headers([(n, v) for n, v in headers if n.lower() not in drop])


def ensure_date(headers: Headers, now: float) -> None:
    """Give a response without Date the time it was received (RFC 9110 6.6.1)."""
    if "Date" not in headers:
        headers.add("Date", format_http_date(now))


def via_entry(version: str, name: str) -> str:
    return f"{version} {name}"


def add_via(headers: Headers, version: str, name: str) -> None:
    """Append our Via entry, keeping earlier ones in one line (RFC 9110 7.6.3)."""
    previous = headers.get("Via")
    entry = via_entry(version, name)
    headers.set("Via", f"{previous}, {entry}" if previous else entry)


def is_loop(headers: Headers, name: str) -> bool:
    """True when a Via entry was added by a cache of our name: the request came round."""
    for member in headers.get_list("Via"):
        parts = member.split()
        if len(parts) >= 2 and parts[1] == name:
            return True
    return False


def apply_x_forwarded_for(headers: Headers, mode: str, client: str) -> None:
    if mode == "delete":
        headers.remove("X-Forwarded-For")
    elif mode == "on":
        previous = headers.get("X-Forwarded-For")
        headers.set("X-Forwarded-For", f"{previous}, {client}" if previous else client)


def max_forwards(headers: Headers) -> int | None:
    """The request's Max-Forwards, or None when absent or not a number."""
    value = headers.get("Max-Forwards")
    if value is None:
        return None
    value = value.strip()
    return int(value) if value.isdigit() else None


def request_head(method: str, path: str, headers: Headers) -> bytes:
    """An HTTP/1.1 request head in origin-form."""
    return f"{method} {path} HTTP/1.1\r\n".encode("latin-1") + headers.encode() + b"\r\n"


def response_head(status: int, reason: str, headers: Headers) -> bytes:
    return f"HTTP/1.1 {status} {reason}\r\n".encode("latin-1") + headers.encode() + b"\r\n"


__all__ = [
    "HOP_BY_HOP",
    "add_via",
    "apply_x_forwarded_for",
    "end_to_end",
    "ensure_date",
    "is_loop",
    "max_forwards",
    "request_head",
    "response_head",
]
