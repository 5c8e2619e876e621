"""Prepared revalidations: the same stale object revalidated again and again.

An object that must be revalidated on use (``max-age=0``, ``no-cache``, or simply expired) and
is asked for with the same request each time makes the same exchange each time: the same
conditional request, the same 304 but for its Date, the same answer but for Date, Age and the
ttl in Cache-Status. Once the miss fast path has worked such an exchange out in full, it keeps
a plan of it. A later request with the very same fields from the same client is sent the
planned request, and if the 304 is the planned one (all but its Date), only the Date, the
exchange times and what follows from them are new. Any other request or answer is worked out
in full, as the first was (and leaves a new plan).

A plan holds only for the object the memory tier held after the refresh it describes (an
identity check, as for hot entries): any other change to the object retires it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harvest_cache.http.cache_control import parse_cache_control
from harvest_cache.http.dates import parse_http_date
from harvest_cache.http.forwarding import forwarded_head
from harvest_cache.http.freshness import directive_lifetime, initial_age, stale_at
from harvest_cache.http.headers import RawFields, stored_fields
from harvest_cache.http.reply_shape import ReplyShape, shape_of, values_in
from harvest_cache.http.stored import StoredHead
from harvest_cache.http.target import Target
from harvest_cache.server.accesslog import Hierarchy, line_tail
from harvest_cache.store.fields import Fields
from harvest_cache.store.interface import StoredObject

_MAX_PLANS = 4096


@dataclass(slots=True)
class RefreshPlan:
    target: Target
    raw_target: bytes  # the request target as the client sent it
    obj: StoredObject  # the memory tier's object after the last refresh
    shape: RawFields  # the client's request fields as it sent them
    client_ip: str
    request: bytes  # the conditional request sent upstream
    reply_before: list[tuple[bytes, bytes]]  # the 304's fields before its Date, as received
    reply_date: bytes  # the name of its Date field, as received
    reply_after: list[tuple[bytes, bytes]]
    before_date: Fields  # the refreshed head's fields before and after its Date
    date_name: str
    after_date: Fields
    lifetime: float  # from max-age or s-maxage (``directive_lifetime``): no Date changes it
    always_stale: bool  # no-cache: validated on every use whatever its lifetime
    stale_at: float  # wall clock from which ``obj`` needs validation
    head_before: bytes  # the client's response head up to the Date value, ...
    head_after: bytes  # ... and after it, up to Via (Age, Cache-Status and framing follow)
    status: int
    content_type: str
    peer: str  # the origin address the log tail names
    log_tail: bytes
    # The shape of the planned 304, learnt from one parsed as planned (a keep-alive one): the
    # next is recognised in its bytes, unparsed (``recognised``).
    reply_shape: ReplyShape | None = None
    reply_learnt: bool = False
    # Our Cache-Status member around its ttl (``cache_status.ttl_parts``), once made.
    status_parts: tuple[str, str] | None = None

    def applies(self, obj: object, client_ip: str, fields: RawFields, now: float) -> bool:
        """Whether this plan's request is the one to send at ``now`` for a request of
        ``fields`` from ``client_ip`` while the memory tier holds ``obj``: the object must
        still be the planned one, asked for the same way, and ``stale`` (else it is a hit)."""
        return (
            obj is self.obj
            and client_ip == self.client_ip
            and fields == self.shape
            and (self.always_stale or now >= self.stale_at)  # (``stale``, inline: per request)
        )

    def stale(self, now: float) -> bool:
        """Whether the object needs validation at ``now`` (else it is a hit)."""
        return self.always_stale or now >= self.stale_at

    def tail_for(self, peer: str) -> bytes:
        """The access-log line's fields after the size, for an exchange with ``peer``."""
        if peer != self.peer:
            self.peer = peer
            self.log_tail = _log_tail(self.target.url, peer, self.content_type)
        return self.log_tail

    def date_of(self, reply: list[tuple[bytes, bytes]]) -> str | None:
        """The Date of ``reply`` (raw fields) if it is the planned 304 but for that Date,
        else None."""
        at = len(self.reply_before)
        if len(reply) != at + 1 + len(self.reply_after):
            return None
        name, date = reply[at]
        if name != self.reply_date or reply[:at] != self.reply_before:
            return None
        return date.decode("latin-1") if reply[at + 1 :] == self.reply_after else None

    def learn_reply(self, version: str, reason: str, date: str) -> None:
        """Learn the shape of the planned 304 from one parsed as planned, with ``date``."""
        gap = (len(self.reply_before),)
        self.reply_shape = shape_of(version, 304, reason, self.reply_fields(date), gap)
        self.reply_learnt = True

    def recognised(self, data: bytes) -> tuple[str, list[tuple[bytes, bytes]]] | None:
        """The Date and fields of ``data`` if it is exactly the learnt 304 but for its Date
        (``reply_shape``), else None."""
        if self.reply_shape is None:
            return None
        found = values_in(self.reply_shape, data)
        if found is None or found[1] != len(data):
            return None  # (bytes after the 304: the parser handles them)
        fields, _ = found
        return fields[len(self.reply_before)][1].decode("latin-1"), fields

    def reply_fields(self, date: str) -> list[tuple[bytes, bytes]]:
        """The planned 304's raw fields with ``date``."""
        return [*self.reply_before, (self.reply_date, date.encode("latin-1")), *self.reply_after]

    def refreshed(
        self, stored: StoredHead, date: str, request_time: float, response_time: float
    ) -> tuple[StoredHead, float]:
        """The stored head after a planned 304 with ``date``, and its age on arrival.

        Also moves the plan's staleness to that of the new head."""
        fields = (*self.before_date, (self.date_name, date), *self.after_date)
        received_age = initial_age(parse_http_date(date), 0, request_time, response_time)
        self.stale_at = stale_at(response_time, received_age, self.lifetime)
        return stored.revalidated(fields, request_time, response_time), received_age

    def client_head(self, date: str, age: str, cache_status: str, length: int) -> bytes:
        return b"%b%b%bAge: %b\r\nCache-Status: %b\r\nContent-Length: %d\r\n\r\n" % (
            self.head_before,
            date.encode("latin-1"),
            self.head_after,
            age.encode(),
            cache_status.encode("latin-1"),
            length,
        )


def _log_tail(url: str, peer: str, content_type: str) -> bytes:
    return line_tail("GET", url, Hierarchy.HIER_DIRECT, peer, None, content_type)


def plan_refresh(
    *,
    target: Target,
    raw_target: bytes,
    obj: StoredObject,
    shape: RawFields,
    client_ip: str,
    peer: str,
    request: bytes,
    reply: list[tuple[bytes, bytes]],
    fresh: StoredHead,
    received_age: float,
    via: str,
    replaced: frozenset[str],
) -> RefreshPlan | None:
    """A plan of a refresh just worked out in full: ``request`` got the 304 whose raw fields
    are ``reply``, which made ``fresh`` (now held as ``obj``) of age ``received_age`` when it
    arrived. None if the refresh is not one a plan can repeat exactly: its lifetime must not
    depend on the Date (explicit max-age or s-maxage), there is one Date (the 304's) and no
    Age, no Vary (neither a stored variant nor a Vary field), and no stale-while-revalidate
    (whether that applies changes with time).

    The client head is composed by ``forwarded_head`` as on the full path, with ``via`` and
    without the fields ``replaced`` there, so a planned answer is the same bytes."""
    if fresh.vary_key or not isinstance(obj.body, bytes):
        return None
    headers = stored_fields(fresh.headers)
    cc = parse_cache_control(headers.get_all("Cache-Control"))
    lifetime = directive_lifetime(cc)
    if lifetime is None or cc.stale_while_revalidate is not None:
        return None
    if "Age" in headers or "Vary" in headers:
        return None
    dates = [i for i, (name, _) in enumerate(fresh.headers) if name.lower() == "date"]
    reply_dates = [i for i, (name, _) in enumerate(reply) if name.lower() == b"date"]
    if len(dates) != 1 or len(reply_dates) != 1:
        return None
    at, reply_at = dates[0], reply_dates[0]
    name, date = fresh.headers[at]
    if reply[reply_at] != (name.encode("latin-1"), date.encode("latin-1")):
        return None  # the stored Date is not the 304's
    prefix = forwarded_head(fresh.status, fresh.reason, fresh.headers, via, (), replaced)[:-2]
    marker = f"\r\n{name}: ".encode("latin-1")
    line = marker + date.encode("latin-1") + b"\r\n"
    if prefix.count(line) != 1:
        return None
    cut = prefix.index(line) + len(marker)
    content_type = headers.get("Content-Type") or "-"
    return RefreshPlan(
        target=target,
        raw_target=raw_target,
        obj=obj,
        shape=shape,
        client_ip=client_ip,
        request=request,
        reply_before=reply[:reply_at],
        reply_date=reply[reply_at][0],
        reply_after=reply[reply_at + 1 :],
        before_date=fresh.headers[:at],
        date_name=name,
        after_date=fresh.headers[at + 1 :],
        lifetime=lifetime,
        always_stale=cc.no_cache or bool(cc.no_cache_fields),
        stale_at=stale_at(fresh.response_time, received_age, lifetime),
        head_before=prefix[:cut],
        head_after=prefix[cut + len(date) :],
        status=fresh.status,
        content_type=content_type,
        peer=peer,
        log_tail=_log_tail(target.url, peer, content_type),
    )


class RefreshPlans:
    """Plans by raw request target, the oldest forgotten first past a bound."""

    def __init__(self) -> None:
        self._plans: dict[bytes, RefreshPlan] = {}
        # The plan for a raw target: the dict's own look-up, no frame of ours per request.
        self.get: Callable[[bytes], RefreshPlan | None] = self._plans.get

    def keep(self, raw_target: bytes, plan: RefreshPlan | None) -> None:
        """Keep ``plan`` for ``raw_target``, or forget the target's plan if None."""
        if plan is None:
            self._plans.pop(raw_target, None)
            return
        if raw_target not in self._plans and len(self._plans) >= _MAX_PLANS:
            del self._plans[next(iter(self._plans))]
        self._plans[raw_target] = plan

    def __len__(self) -> int:
        return len(self._plans)
