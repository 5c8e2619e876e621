"""What a proxy changes in the messages it forwards (RFC 9110 7.6, RFC 9112 9.6).

Hop-by-hop fields are dropped, ``Via`` gets our entry, ``X-Forwarded-For`` follows the
configured mode, and ``Max-Forwards`` is decremented. Loops are detected by our name in Via.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from harvest_cache.http.dates import format_http_date
from harvest_cache.http.headers import Headers, split_list

# Fields that describe one connection, never the message (RFC 9110 7.6.1, plus the
# non-standard Proxy-Connection that old browsers send and Keep-Alive).
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        # These three concern the proxy next to the client alone (RFC 9110 11.7), and a
        # cache must not store them (RFC 9111 3.1).
        "proxy-authorization",
        "proxy-authenticate",
        "proxy-authentication-info",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


# Request fields the proxy replaces (Host must match the target) or answers itself (Expect).
_NOT_FORWARDED = frozenset({"expect", "host"})


# Connection values that name no field but hop-by-hop ones: nothing to look for.
_PLAIN_CONNECTION = frozenset({"keep-alive", "close"})


def end_to_end(
    headers: Iterable[tuple[str, str]], without: frozenset[str] = frozenset()
) -> Headers:
    """A copy of ``headers`` (any fields in order) without hop-by-hop fields, the fields that
    Connection names, and the fields ``without`` names (lowercased)."""
    drop = HOP_BY_HOP | without if without else HOP_BY_HOP
    kept: list[tuple[str, str]] = []
    index: dict[str, list[str]] = {}
    named: list[str] = []
    for name, value in headers:
        low = name.lower()
        if low not in drop:
            kept.append((name, value))
            index.setdefault(low, []).append(value)
        elif low == "connection":
            named.append(value)
    if named:
        # Mostly "keep-alive" or "close", which name no kept field: nothing more to drop.
        options = {
            o.lower()
            for v in named
            if v.strip().lower() not in _PLAIN_CONNECTION
            for o in split_list(v)
        }
        if not options.isdisjoint(index):
            return Headers([(n, v) for n, v in kept if n.lower() not in options])
    return Headers.indexed(kept, index)


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


def request_fields(
    headers: Headers, authority: str, via: str, xff_mode: str, client: str
) -> Headers:
    """A request's fields as forwarded: Host for the target first, no hop-by-hop fields, no
    Expect (the proxy answers 100-continue itself), ``via`` appended to Via, and
    X-Forwarded-For extended with ``client`` ("on"), left alone ("off") or dropped."""
    items = [("Host", authority)]
    vias: list[str] = []
    forwarded: list[str] = []
    for name, value in end_to_end(headers, _NOT_FORWARDED):
        low = name.lower()
        if low == "via":
            vias.append(value)
        elif low == "x-forwarded-for" and xff_mode != "off":
            forwarded.append(value)
        else:
            items.append((name, value))
    vias.append(via)
    items.append(("Via", ", ".join(vias)))
    if xff_mode == "on":
        forwarded.append(client)
        items.append(("X-Forwarded-For", ", ".join(forwarded)))
    return Headers(items)


def max_forwards(headers: Headers) -> int | None:
    """The request's Max-Forwards (at most 2**31), or None when absent or not a number."""
    value = headers.get("Max-Forwards")
    if value is None:
        return None
    value = value.strip()
    # ASCII digits only (isdigit() takes others, which int() refuses); counts are capped at
    # 2**31 like delta-seconds (and int() refuses more than 4300 digits).
    if not (value.isascii() and value.isdigit()):
        return None
    return min(int(value), 2**31) if len(value) <= 10 else 2**31


def request_head(method: str, path: str, headers: Headers) -> bytes:
    """An HTTP/1.1 request head in origin-form."""
    return f"{method} {path} HTTP/1.1\r\n".encode("latin-1") + headers.encode() + b"\r\n"


def response_head(status: int, reason: str, headers: Headers) -> bytes:
    return f"HTTP/1.1 {status} {reason}\r\n".encode("latin-1") + headers.encode() + b"\r\n"


def forwarded_head(
    status: int,
    reason: str,
    fields: Iterable[tuple[str, str]],
    via: str,
    replace: Sequence[tuple[str, str]],
    replaced: frozenset[str],
) -> bytes:
    """A response head in one pass: ``fields`` with ``via`` appended to their Via, and the
    fields of ``replace`` instead of any of those names (``replaced``: them, lowercased)."""
    lines = [f"HTTP/1.1 {status} {reason}\r\n"]
    vias = []
    for name, value in fields:
        low = name.lower()
        if low == "via":
            vias.append(value)
        elif low not in replaced:
            lines.append(f"{name}: {value}\r\n")
    vias.append(via)
    lines.append(f"Via: {', '.join(vias)}\r\n")
    lines.extend(f"{name}: {value}\r\n" for name, value in replace)
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


def interim_head(status: int, reason: str, raw: Iterable[tuple[bytes, bytes]], via: str) -> bytes:
    """An interim (1xx) response as forwarded (RFC 9110 15.2): its end-to-end fields as
    received (Latin-1), with ``via`` appended to Via."""
    fields = end_to_end((n.decode("latin-1"), v.decode("latin-1")) for n, v in raw)
    return forwarded_head(status, reason, fields, via, (), frozenset())


__all__ = [
    "HOP_BY_HOP",
    "add_via",
    "end_to_end",
    "ensure_date",
    "forwarded_head",
    "interim_head",
    "is_loop",
    "max_forwards",
    "request_fields",
    "request_head",
    "response_head",
]
