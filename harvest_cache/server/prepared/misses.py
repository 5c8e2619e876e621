"""Prepared misses: new URLs of one origin, asked for by one client in one way.

A client fetching many objects it has not fetched before sends the same request fields each
time, and the origin answers each in the same shape: the same fields, with the same values
but for Date, Last-Modified, ETag and Content-Length. Worked out in full, each such miss
makes the same decisions (storable, the same stored fields, the same client head but for
those values). Once the miss fast path has worked one out, it keeps a plan of it for the
client, the origin and the request's fields. A later miss asked the same way is sent
upstream as planned, and if its response has the planned shape, only those four values are
new: the stored head and the client's head are filled in from the plan. Any other response
is worked out in full, as the first was.

What is planned: an HTTP/1.1 keep-alive GET whose target is the URL's canonical spelling,
answered with a storable response of known length, with one Date, no Vary, no Expires (its
meaning moves with the Date), no Via and no field that Connection names, that need not be
revalidated on every use (whether such a response may be stored turns on its validators'
values); and a Cache-Status that does not name the URL. The status line's reason must be the
planned one too.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from harvest_cache.http.cache_control import parse_cache_control
from harvest_cache.http.forwarding import HOP_BY_HOP, forwarded_head
from harvest_cache.http.freshness import directive_lifetime
from harvest_cache.http.headers import RawFields
from harvest_cache.http.policy import validated_on_every_use
from harvest_cache.http.reply_shape import ReplyShape, shape_of, values_in
from harvest_cache.http.stored import StoredHead
from harvest_cache.http.target import PLAIN_PATH, Target
from harvest_cache.server.accesslog import Hierarchy, line_tail
from harvest_cache.store.fields import Fields, shared_fields

# Who asks, for which origin ("http://host:port" or "https://...", as spelt), with which
# request fields.
PlanKey = tuple[str, bytes, RawFields]

# The response fields whose values may differ from one planned answer to the next.
_VARYING = frozenset({b"date", b"last-modified", b"etag", b"content-length"})
# Fields that keep a response off a plan (see the module's docstring).
_UNPLANNED = frozenset({b"vary", b"expires", b"via"})
_PLAIN_CONNECTION = frozenset({b"keep-alive", b"close"})
# Stand-ins for the varying values while the client head's template is made: no field
# value can hold a NUL.
_MARK = re.compile(rb"\x00(\d+)\x00")
_MAX_PLANS = 1024
# An int: asking for bytes in bytes first raises and drops a TypeError (CPython 3.11).
_QUESTION_MARK = ord("?")
# A request that could not be planned is tried again after this many more misses.
_RETRY_AFTER = 256


def plan_key(client_ip: str, raw_target: bytes, fields: RawFields) -> tuple[PlanKey, int] | None:
    """The key of the plan for a request, and where its path starts in ``raw_target``;
    None if the target is not one a plan can take."""
    if raw_target.startswith(b"http://"):
        slash = raw_target.find(b"/", 7)
    elif raw_target.startswith(b"https://"):
        slash = raw_target.find(b"/", 8)
    else:
        return None
    if slash < 0:
        return None
    return (client_ip, raw_target[:slash], fields), slash


@dataclass(slots=True)
class MissPlan:
    host: str
    port: int
    tls: bool  # the origin is reached over TLS (an https:// URL)
    queries: bool  # whether URLs with a query are cached
    request_tail: bytes  # the upstream request after its path: " HTTP/1.1\r\n", fields, CRLF
    status: int
    reason: str
    count: int  # fields in a planned response
    static_runs: tuple[tuple[int, int, list[tuple[bytes, bytes]]], ...]  # (start, end, fields)
    varying: tuple[tuple[int, bytes], ...]  # (index, name as received)
    length_at: int  # index of Content-Length
    max_length: int  # largest body a planned answer takes
    stored_template: tuple[tuple[str, str] | None, ...]  # None where a varying value goes
    stored_varying: tuple[tuple[int, str, int], ...]  # (position, name, index in the reply)
    head_parts: tuple[bytes | int, ...]  # client head: bytes, and indexes of varying values
    content_type: str
    # The client head's Cache-Status line, and the one for a request that joins the planned
    # fetch (collapsed, not stored by it); empty if the head cannot be told apart that way.
    status_field: bytes = b""
    collapsed_field: bytes = b""
    # The shape of a planned response, learnt from one parsed as planned (a keep-alive one):
    # later ones are recognised in their bytes, unparsed (``recognised``).
    shape: ReplyShape | None = None
    shape_learnt: bool = False

    def rest_of(self, raw_target: bytes, slash: int) -> bytes | None:
        """The path and query of ``raw_target`` if it is one this plan can fetch."""
        rest = raw_target[slash:]
        if PLAIN_PATH.fullmatch(rest) is None or (not self.queries and _QUESTION_MARK in rest):
            return None
        return rest

    def request(self, rest: bytes) -> bytes:
        return b"GET " + rest + self.request_tail

    def match(self, status: int, reason: str, raw: list[tuple[bytes, bytes]]) -> int | None:
        """The body length announced by ``raw`` if a response of ``status``, ``reason`` and
        those fields is the planned one but for the varying values and within
        ``max_length``, else None."""
        if status != self.status or reason != self.reason or len(raw) != self.count:
            return None
        for start, end, fields in self.static_runs:
            if raw[start:end] != fields:
                return None
        for at, name in self.varying:
            if raw[at][0] != name:
                return None
        return self._length(raw[self.length_at][1])

    def _length(self, value: bytes) -> int | None:
        """A Content-Length value as a body length this plan takes, else None."""
        if not value.isdigit() or len(value) > 9:
            return None
        length = int(value)
        return length if length <= self.max_length else None

    def learn_shape(self, version: str, raw: list[tuple[bytes, bytes]]) -> None:
        """Learn the shape of a response that ``match`` took, parsed as HTTP/``version``."""
        gaps = tuple(at for at, _ in self.varying)
        self.shape = shape_of(version, self.status, self.reason, raw, gaps)
        self.shape_learnt = True

    def recognised(self, data: bytes) -> tuple[list[tuple[bytes, bytes]], int, int] | None:
        """The raw fields and body length of the response that ``data`` holds whole, and
        where its body starts, if it has the learnt shape and a body as planned; else None."""
        if self.shape is None:
            return None
        found = values_in(self.shape, data)
        if found is None:
            return None
        raw, end = found
        length = self._length(raw[self.length_at][1])
        if length is None or len(data) - end != length:
            return None  # (more or fewer bytes than the body: the parser handles them)
        return raw, length, end

    def stored_head(
        self,
        url: str,
        raw: list[tuple[bytes, bytes]],
        request_time: float,
        response_time: float,
        body_length: int,
    ) -> StoredHead:
        fields = list(self.stored_template)
        for position, name, at in self.stored_varying:
            fields[position] = (name, raw[at][1].decode("latin-1"))
        return StoredHead(
            url,
            self.status,
            self.reason,
            cast(Fields, tuple(fields)),  # (every None is filled in)
            request_time,
            response_time,
            body_length,
        )

    def client_head(self, raw: list[tuple[bytes, bytes]], length: int) -> bytes:
        parts = [p if isinstance(p, bytes) else raw[p][1] for p in self.head_parts]
        return b"%bContent-Length: %d\r\n\r\n" % (b"".join(parts), length)

    def collapsed_head(self, head: bytes) -> bytes:
        """A planned answer's ``head`` as a request that joined its fetch gets it."""
        return head.replace(self.status_field, self.collapsed_field, 1)

    def log_tail(self, url: str, peer: str) -> bytes:
        """The access-log line's fields after the size."""
        return line_tail("GET", url, Hierarchy.HIER_DIRECT, peer, None, self.content_type)


def plan_miss(
    *,
    target: Target,
    raw_target: bytes,
    request: bytes,
    status: int,
    reason: str,
    reply: list[tuple[bytes, bytes]],
    stored: StoredHead,
    client_head: bytes,
    cache_status: str,
    collapsed_status: str,
    via: str,
    replaced: frozenset[str],
    content_type: str,
    queries: bool,
    max_length: int,
) -> MissPlan | None:
    """A plan of a miss just worked out in full: ``request`` (sent upstream) got the response
    of ``status``, ``reason`` and raw fields ``reply``, stored under ``stored`` and answered
    with ``client_head`` (composed by ``forwarded_head`` with ``via``, a Cache-Status of
    ``cache_status`` and a Content-Length, without the fields ``replaced``); a request that
    joins such a fetch gets a Cache-Status of ``collapsed_status`` instead. None if the
    miss is not one a plan can repeat; a plan is only made if it reproduces the stored head
    and the client head of this response exactly."""
    if _needs_validator(stored):
        return None
    url = target.url
    if raw_target != url.encode("latin-1") or target.path[:1] != "/":
        return None
    line = b"GET " + target.path.encode("latin-1")
    if not request.startswith(line + b" HTTP/1.1\r\n"):
        return None
    names = [name.lower() for name, _ in reply]
    if (
        not _UNPLANNED.isdisjoint(names)
        or names.count(b"date") != 1
        or names.count(b"content-length") != 1
        or any(names.count(n) > 1 for n in (b"last-modified", b"etag"))
    ):
        return None
    for (_, value), low in zip(reply, names, strict=True):
        if low == b"connection" and value.strip().lower() not in _PLAIN_CONNECTION:
            return None
    varying = tuple(i for i, low in enumerate(names) if low in _VARYING)
    runs = []
    start = 0
    for at in (*varying, len(reply)):
        if at > start:
            runs.append((start, at, reply[start:at]))
        start = at + 1
    # The stored fields: end-to-end lines, varying values left to fill in.
    kept = [i for i, low in enumerate(names) if low.decode("latin-1") not in HOP_BY_HOP]
    decoded = [(reply[i][0].decode("latin-1"), reply[i][1].decode("latin-1")) for i in kept]
    shared = shared_fields(decoded)
    template = tuple(
        None if names[i] in _VARYING else kept_line
        for i, kept_line in zip(kept, shared, strict=True)
    )
    stored_varying = tuple(
        (position, shared[position][0], i)
        for position, i in enumerate(kept)
        if names[i] in _VARYING
    )
    # The client head, with a mark where each varying value goes.
    marked = [
        (name, f"\x00{i}\x00" if names[i] in _VARYING else value)
        for i, (name, value) in zip(kept, decoded, strict=True)
    ]
    composed = forwarded_head(
        status, reason, marked, via, [("Cache-Status", cache_status)], replaced
    )
    # (the blank line ending the head comes after the framing, added per answer)
    pieces = _MARK.split(composed[:-2])
    status_field = f"Cache-Status: {cache_status}\r\n".encode("latin-1")
    if composed.count(status_field) != 1:
        status_field = b""
    head_parts = tuple(
        piece if n % 2 == 0 else int(piece) for n, piece in enumerate(pieces) if piece
    )
    plan = MissPlan(
        host=target.host,
        port=target.port,
        tls=target.tls,
        queries=queries,
        request_tail=request[len(line) :],
        status=status,
        reason=sys.intern(reason),
        count=len(reply),
        static_runs=tuple(runs),
        varying=tuple((i, reply[i][0]) for i in varying),
        length_at=names.index(b"content-length"),
        max_length=max_length,
        stored_template=template,
        stored_varying=stored_varying,
        head_parts=head_parts,
        content_type=content_type,
        status_field=status_field,
        collapsed_field=f"Cache-Status: {collapsed_status}\r\n".encode("latin-1")
        if status_field
        else b"",
    )
    length = plan.match(status, reason, reply)
    if length is None or length != stored.body_length:
        return None
    again = plan.stored_head(url, reply, 0.0, 0.0, length)
    if again.headers != stored.headers or again.reason != stored.reason:
        return None
    if plan.client_head(reply, length) != client_head:
        return None
    return plan


def _needs_validator(stored: StoredHead) -> bool:
    """Whether the response must be revalidated on every use, so that whether it may be
    stored at all turns on its validators being well-formed (RFC 9111 4.3.1: ``storable``
    refuses such a response without one), which a plan does not look at. (A plan takes no
    Expires, so its directives alone give its lifetime.)"""
    cc = parse_cache_control([v for n, v in stored.headers if n.lower() == "cache-control"])
    return validated_on_every_use(cc, directive_lifetime(cc))


class MissPlans:
    """Plans by (client address, origin as spelt, request fields), the oldest forgotten
    first past a bound; requests that could not be planned are left alone for a while."""

    def __init__(self) -> None:
        self._plans: dict[PlanKey, MissPlan] = {}
        self._refused: dict[PlanKey, int] = {}
        # The plan for a key: the dict's own look-up, no frame of ours per request.
        self.get: Callable[[PlanKey], MissPlan | None] = self._plans.get

    def wanted(self, key: PlanKey) -> bool:
        """Whether a miss asked this way should be worked into a plan (none held, and no
        attempt made lately)."""
        if key in self._plans:
            return False
        left = self._refused.get(key)
        if left is None:
            return True
        if left > 0:
            self._refused[key] = left - 1
            return False
        del self._refused[key]
        return True

    def keep(self, key: PlanKey, plan: MissPlan | None) -> None:
        """Keep ``plan`` for ``key``, or remember that it could not be planned."""
        if plan is None:
            self._plans.pop(key, None)
            if key not in self._refused and len(self._refused) >= _MAX_PLANS:
                del self._refused[next(iter(self._refused))]
            self._refused[key] = _RETRY_AFTER
            return
        if key not in self._plans and len(self._plans) >= _MAX_PLANS:
            del self._plans[next(iter(self._plans))]
        self._plans[key] = plan

    def __len__(self) -> int:
        return len(self._plans)
