"""Refresh plans, without a network: a plan must repeat exactly what the full path does.

Each test builds a stored object, runs the real ``freshen`` on a 304 as the miss fast path
does, and plans the refresh with ``plan_refresh``; what the plan then computes for a later
304 (the refreshed head, its age, the client's response head, its staleness) is compared with
what ``freshen``, ``evaluate`` and ``forwarded_head`` compute for the same input.
"""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harvest_cache.http.cache_control import parse_cache_control
from harvest_cache.http.cache_status import cache_status
from harvest_cache.http.forwarding import end_to_end, ensure_date, forwarded_head, via_entry
from harvest_cache.http.freshness import Heuristic, age_value
from harvest_cache.http.headers import Headers
from harvest_cache.http.policy import Fresh, MustValidate, evaluate
from harvest_cache.http.stored import StoredHead
from harvest_cache.http.target import Target
from harvest_cache.http.validation import freshen
from harvest_cache.server.prepared.revalidations import RefreshPlan, RefreshPlans, plan_refresh
from harvest_cache.store.interface import FileBody, StoredObject
from tests.http.test_reply_shape import Parsed
from tests.support import http_date

T0 = 1_700_000_000.0  # the stored response's Date
T1 = T0 + 100.0  # the first 304's Date
T2 = T0 + 200.0  # the second 304's Date
URL = "http://origin.test:8080/obj?q=1"
TARGET = Target("http", "origin.test", 8080, "/obj?q=1")
RAW_TARGET = URL.encode()
BODY = b"hello"
VIA = via_entry("1.1", "test-cache")
CLIENT_IP = "127.0.0.1"
PEER = "192.0.2.7"
SHAPE = ((b"Host", b"origin.test:8080"), (b"User-Agent", b"t/1"), (b"Accept", b"*/*"))
REQUEST = b'GET /obj?q=1 HTTP/1.1\r\nHost: origin.test:8080\r\nIf-None-Match: "v1"\r\n\r\n'
# Fields the cache sets itself on a response from the store (as the miss fast path has them).
SET_ON_STORED = frozenset({"connection", "content-length", "age"})
NO_DIRECTIVES = parse_cache_control(())
HEURISTIC = Heuristic(10, 86400)


def stored_fields(cc: str = "max-age=0", **extra: str) -> list[tuple[str, str]]:
    fields = [
        ("Date", http_date(T0)),
        ("Content-Type", "text/plain"),
        ("ETag", '"v1"'),
        ("Cache-Control", cc),
        ("Via", "1.0 upstream"),
        ("Content-Length", str(len(BODY))),
        ("X-Extra", "kept"),
        ("Age", "9"),  # aged an earlier exchange: a 304 drops it
    ]
    fields.extend((name.replace("_", "-"), value) for name, value in extra.items())
    return fields


def stored_object(fields: list[tuple[str, str]] | None = None, vary_key: str = "") -> StoredObject:
    head = StoredHead(
        URL,
        200,
        "OK",
        tuple(fields if fields is not None else stored_fields()),
        T0 + 1,
        T0 + 1.5,
        len(BODY),
        vary_key,
    )
    return StoredObject(head, BODY, "memory")


def not_modified(date: float | None = T1, cc: str = "max-age=0") -> Headers:
    """A 304 as it comes off the wire: with a hop-by-hop field the cache drops."""
    fields = []
    if date is not None:
        fields.append(("Date", http_date(date)))
    fields += [
        ("ETag", '"v1"'),
        ("Cache-Control", cc),
        ("Connection", "keep-alive"),
        ("Server", "origin/1"),
    ]
    return Headers(fields)


def wire(reply: Headers) -> list[tuple[bytes, bytes]]:
    """The fields as the upstream parser hands them over (a 304's raw fields)."""
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in reply]


def refresh(
    stored: StoredHead, reply: Headers, request_time: float, response_time: float
) -> StoredHead:
    """The full path's refresh (the miss fast path's ``_refreshed``)."""
    headers = end_to_end(reply)
    ensure_date(headers, response_time)
    return freshen(stored, headers, request_time, response_time)


def received_age(fresh: StoredHead) -> float:
    """Its age on arrival, as the full path has it."""
    return evaluate(fresh, NO_DIRECTIVES, fresh.response_time, HEURISTIC).age


def plan_for(
    stored: StoredObject,
    reply: Headers,
    *,
    request_time: float = T1 + 0.5,
    response_time: float = T1 + 0.75,
    fresh: StoredHead | None = None,
    body: bytes | FileBody = BODY,
) -> tuple[RefreshPlan | None, StoredObject]:
    """Refresh ``stored`` with ``reply`` as the full path does, then plan that refresh;
    the plan (or None) and the object the memory tier then holds."""
    if fresh is None:
        fresh = refresh(stored.head, reply, request_time, response_time)
    held = StoredObject(fresh, body, "memory")
    plan = plan_refresh(
        target=TARGET,
        raw_target=RAW_TARGET,
        obj=held,
        shape=SHAPE,
        client_ip=CLIENT_IP,
        peer=PEER,
        request=REQUEST,
        reply=wire(reply),
        fresh=fresh,
        received_age=received_age(fresh),
        via=VIA,
        replaced=SET_ON_STORED,
    )
    return plan, held


def made_plan(cc: str = "max-age=0") -> tuple[RefreshPlan, StoredObject]:
    plan, held = plan_for(stored_object(stored_fields(cc)), not_modified(cc=cc))
    assert plan is not None
    return plan, held


# -- (a) the next 304 ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cc", ["max-age=0", "max-age=30", "s-maxage=5, max-age=100", "no-cache, max-age=0"]
)
def test_second_304_gives_what_freshen_gives(cc: str) -> None:
    plan, held = made_plan(cc)
    second = not_modified(T2, cc)
    date = plan.date_of(wire(second))
    assert date == http_date(T2)
    request_time, response_time = T2 + 3.0, T2 + 3.25
    refreshed, age = plan.refreshed(held.head, date, request_time, response_time)
    expected = refresh(held.head, second, request_time, response_time)
    assert refreshed == expected
    assert refreshed.headers == expected.headers  # (names, values and order)
    assert (refreshed.request_time, refreshed.response_time) == (request_time, response_time)
    assert refreshed.body_length == len(BODY)
    assert age == pytest.approx(received_age(expected))
    assert age == pytest.approx(3.25)  # response time minus the 304's Date


def test_second_304_with_the_same_date_is_the_planned_one() -> None:
    plan, _ = made_plan()
    assert plan.date_of(wire(not_modified(T1))) == http_date(T1)


def test_freshen_of_the_first_304_is_what_the_plan_holds() -> None:
    """The plan is of the object the full path made (the same head, kept as is)."""
    stored = stored_object()
    reply = not_modified()
    plan, held = plan_for(stored, reply)
    assert plan is not None
    assert plan.obj is held
    assert held.head == refresh(stored.head, reply, T1 + 0.5, T1 + 0.75)
    assert not any(name == "Age" for name, _ in held.head.headers)
    assert (plan.status, plan.content_type, plan.request) == (200, "text/plain", REQUEST)
    assert plan.lifetime == 0.0


# -- (b) the client's response head -------------------------------------------------------------


@pytest.mark.parametrize(
    ("cc", "age"),
    [("max-age=0", 3.25), ("max-age=60", 0.0), ("no-cache, max-age=60", 1234.9)],
)
def test_client_head_is_the_general_paths_bytes(cc: str, age: float) -> None:
    plan, held = made_plan(cc)
    second = not_modified(T2, cc)
    date = plan.date_of(wire(second))
    assert date is not None
    refreshed, _ = plan.refreshed(held.head, date, T2 + 3.0, T2 + 3.25)
    status = cache_status(
        "test-cache", hit=False, fwd="stale", fwd_status=304, ttl=plan.lifetime - age
    )
    extra = [
        ("Age", age_value(age)),
        ("Cache-Status", status),
        ("Content-Length", str(len(BODY))),
    ]
    general = forwarded_head(
        refreshed.status, refreshed.reason, refreshed.headers, VIA, extra, SET_ON_STORED
    )
    planned = plan.client_head(date, age_value(age), status, len(BODY))
    assert planned == general
    # (what the comparison covers: the origin's Via extended, its length replaced)
    assert b"\r\nVia: 1.0 upstream, 1.1 test-cache\r\n" in planned
    assert planned.count(b"Content-Length") == 1
    assert b"Connection" not in planned


def test_client_head_with_a_date_of_another_length() -> None:
    """The Date is spliced in, so its value may be any length (an obsolete format here)."""
    plan, held = made_plan()
    date = "Sunday, 06-Nov-94 08:49:37 GMT"
    refreshed, _ = plan.refreshed(held.head, date, T2, T2)
    extra = [("Age", "0"), ("Cache-Status", "c"), ("Content-Length", "5")]
    general = forwarded_head(200, "OK", refreshed.headers, VIA, extra, SET_ON_STORED)
    assert plan.client_head(date, "0", "c", 5) == general


# -- (c) refreshes a plan cannot repeat -----------------------------------------------------------


def test_lifetime_from_expires_only_is_not_planned() -> None:
    fields = [(n, v) for n, v in stored_fields() if n != "Cache-Control"]
    fields.append(("Expires", http_date(T0 + 10)))
    reply = Headers([(n, v) for n, v in not_modified() if n != "Cache-Control"])
    plan, held = plan_for(stored_object(fields), reply)
    assert "Cache-Control" not in Headers(held.head.headers)  # (no max-age, no s-maxage)
    assert plan is None


def test_stale_while_revalidate_is_not_planned() -> None:
    cc = "max-age=0, stale-while-revalidate=30"
    plan, _ = plan_for(stored_object(stored_fields(cc)), not_modified(cc=cc))
    assert plan is None


def test_age_in_the_refreshed_head_is_not_planned() -> None:
    reply = not_modified()
    reply.add("Age", "3")
    plan, held = plan_for(stored_object(), reply)
    assert ("Age", "3") in held.head.headers
    assert plan is None


def test_variant_is_not_planned() -> None:
    plan, _ = plan_for(stored_object(vary_key="accept-encoding=gzip"), not_modified())
    assert plan is None


def test_vary_field_is_not_planned() -> None:
    """A 304 that adds Vary to an object stored without it: the flight's readers would have
    to read the 304's own fields, which a planned one does not keep."""
    reply = not_modified()
    reply.add("Vary", "Accept")
    plan, held = plan_for(stored_object(), reply)
    assert ("Vary", "Accept") in held.head.headers
    assert plan is None


def test_two_dates_are_not_planned() -> None:
    reply = not_modified()
    reply.add("Date", http_date(T1 + 1))
    plan, held = plan_for(stored_object(), reply)
    assert sum(1 for name, _ in held.head.headers if name == "Date") == 2
    assert plan is None


def test_stored_date_that_is_not_the_304s_is_not_planned() -> None:
    stored = stored_object()
    reply = not_modified(T1)
    fresh = refresh(stored.head, reply, T1, T1)
    other = tuple((n, http_date(T1 - 50) if n == "Date" else v) for n, v in fresh.headers)
    plan, _ = plan_for(stored, reply, fresh=fresh.revalidated(other, T1, T1))
    assert plan is None


def test_304_without_date_is_not_planned() -> None:
    """The cache gives it the time of receipt, which the next one cannot repeat."""
    plan, held = plan_for(stored_object(), not_modified(None))
    assert ("Date", http_date(T1 + 0.75)) in held.head.headers
    assert plan is None


def test_no_cache_without_max_age_is_not_planned() -> None:
    """Its lifetime (heuristic, or from Expires) is not explicit: no plan is made."""
    plan, _ = plan_for(stored_object(stored_fields("no-cache")), not_modified(cc="no-cache"))
    assert plan is None


def test_body_on_disk_is_not_planned() -> None:
    body = FileBody(io.BytesIO(BODY), 0, len(BODY))
    plan, _ = plan_for(stored_object(), not_modified(), body=body)
    assert plan is None


def test_plain_refresh_is_planned() -> None:
    """(The control for the cases above.)"""
    plan, _ = plan_for(stored_object(), not_modified())
    assert plan is not None


# -- (d) 304s that are not the planned one --------------------------------------------------------


def with_fields(fields: list[tuple[str, str]]) -> Headers:
    return Headers(fields)


@pytest.mark.parametrize(
    "change",
    [
        "value",
        "etag",
        "cache-control",
        "added",
        "added-at-end",
        "removed",
        "date-removed",
        "reordered",
        "date-moved",
        "date-name-case",
        "name-case",
        "second-date",
    ],
)
def test_date_of_a_different_304_is_none(change: str) -> None:
    plan, _ = made_plan()
    fields = not_modified(T2).items()
    date = ("Date", http_date(T2))
    if change == "value":
        fields[4] = ("Server", "origin/2")
    elif change == "etag":
        fields[1] = ("ETag", '"v2"')
    elif change == "cache-control":
        fields[2] = ("Cache-Control", "max-age=60")
    elif change == "added":
        fields.insert(2, ("X-New", "1"))
    elif change == "added-at-end":
        fields.append(("X-New", "1"))
    elif change == "removed":
        del fields[4]
    elif change == "date-removed":
        del fields[0]
    elif change == "reordered":
        fields[1], fields[2] = fields[2], fields[1]
    elif change == "date-moved":
        fields = [*fields[1:], date]
    elif change == "date-name-case":
        fields[0] = ("date", date[1])
    elif change == "name-case":
        fields[1] = ("Etag", '"v1"')
    elif change == "second-date":
        fields.append(date)
    assert with_fields(fields) != not_modified(T2)
    assert plan.date_of(wire(with_fields(fields))) is None


def test_date_of_leaves_the_reply_alone() -> None:
    plan, _ = made_plan()
    reply = wire(not_modified(T2))
    before = list(reply)
    assert plan.date_of(reply) == http_date(T2)
    assert reply == before
    assert plan.date_of(reply) == http_date(T2)  # (and the plan too)


# -- applies ------------------------------------------------------------------------------------


def test_applies_to_the_same_object_client_and_fields_only_once_stale() -> None:
    plan, held = made_plan()
    fields = SHAPE
    now = plan.stale_at
    assert plan.applies(held, CLIENT_IP, fields, now)
    equal = StoredObject(held.head, held.body, held.tier)
    assert equal == held
    assert not plan.applies(equal, CLIENT_IP, fields, now)  # identity, not equality
    assert not plan.applies(None, CLIENT_IP, fields, now)
    assert not plan.applies(held, "127.0.0.2", fields, now)
    assert not plan.applies(held, CLIENT_IP, (fields[1], fields[0], fields[2]), now)
    assert not plan.applies(held, CLIENT_IP, (*fields, (b"X-More", b"1")), now)
    assert not plan.applies(held, CLIENT_IP, fields[:2], now)
    assert not plan.applies(held, CLIENT_IP, (fields[0], (b"user-agent", b"t/1"), fields[2]), now)
    assert not plan.applies(held, CLIENT_IP, (fields[0], (b"User-Agent", b"t/2"), fields[2]), now)
    # Still fresh: a hit, not a revalidation (whatever else matches).
    assert not plan.applies(held, CLIENT_IP, fields, now - 0.01)
    assert plan.applies(held, CLIENT_IP, fields, now - 0.01) is plan.stale(now - 0.01)


# -- (e) staleness -------------------------------------------------------------------------------


def test_stale_follows_max_age() -> None:
    plan, held = made_plan("max-age=60")
    age = received_age(held.head)
    assert plan.stale_at == pytest.approx(held.head.response_time - age + 60)
    assert not plan.always_stale
    for at, stale in [(-30.0, False), (-0.01, False), (0.0, True), (0.01, True), (3600, True)]:
        now = plan.stale_at + at
        assert plan.stale(now) is stale, at
    # The same as the full path's evaluation, either side of the edge.
    before = evaluate(held.head, NO_DIRECTIVES, plan.stale_at - 0.01, HEURISTIC)
    after = evaluate(held.head, NO_DIRECTIVES, plan.stale_at + 0.01, HEURISTIC)
    assert isinstance(before, Fresh)
    assert isinstance(after, MustValidate)
    assert after.reason == "stale"


def test_s_maxage_wins_over_max_age() -> None:
    plan, held = made_plan("s-maxage=5, max-age=100")
    assert plan.lifetime == 5.0
    assert plan.stale_at == pytest.approx(held.head.response_time - received_age(held.head) + 5)


def test_max_age_zero_is_stale_at_once() -> None:
    plan, held = made_plan("max-age=0")
    assert plan.stale(held.head.response_time)
    assert plan.stale(T2)


def test_staleness_moves_with_a_planned_refresh() -> None:
    plan, held = made_plan("max-age=60")
    first = plan.stale_at
    date = http_date(T2)
    refreshed, age = plan.refreshed(held.head, date, T2 + 1.0, T2 + 1.5)
    assert plan.stale_at == pytest.approx(T2 + 1.5 - age + 60)
    assert plan.stale_at > first
    assert not plan.stale(T2 + 30)
    assert plan.stale(T2 + 61)
    assert isinstance(evaluate(refreshed, NO_DIRECTIVES, plan.stale_at - 0.01, HEURISTIC), Fresh)
    assert isinstance(
        evaluate(refreshed, NO_DIRECTIVES, plan.stale_at + 0.01, HEURISTIC), MustValidate
    )


@pytest.mark.parametrize("cc", ["no-cache, max-age=3600", 'max-age=3600, no-cache="Set-Cookie"'])
def test_no_cache_is_always_stale(cc: str) -> None:
    plan, held = made_plan(cc)
    assert plan.always_stale
    assert plan.stale(held.head.response_time)
    assert plan.stale(plan.stale_at - 1000)
    reuse = evaluate(held.head, NO_DIRECTIVES, held.head.response_time + 1, HEURISTIC)
    assert isinstance(reuse, MustValidate)
    assert reuse.reason == "no-cache"


# -- the log tail --------------------------------------------------------------------------------


def test_tail_names_the_peer_of_the_exchange() -> None:
    plan, _ = made_plan()
    tail = plan.tail_for(PEER)
    assert tail.split() == [
        b"GET",
        URL.encode(),
        b"-",
        b"HIER_DIRECT/" + PEER.encode(),
        b"text/plain",
    ]
    other = plan.tail_for("192.0.2.8")
    assert other.split()[3] == b"HIER_DIRECT/192.0.2.8"
    assert plan.tail_for("192.0.2.8") is other


# -- (f) the index of plans ----------------------------------------------------------------------


def test_plans_keep_at_most_their_bound_and_forget_the_oldest() -> None:
    plan, _ = made_plan()
    plans = RefreshPlans()
    bound = 4096
    for i in range(bound):
        plans.keep(b"http://o/%d" % i, plan)
    assert len(plans) == bound
    assert plans.get(b"http://o/0") is plan
    # Keeping a known target again forgets nothing.
    plans.keep(b"http://o/5", plan)
    assert len(plans) == bound
    assert plans.get(b"http://o/0") is plan
    plans.keep(b"http://o/new", plan)
    assert len(plans) == bound
    assert plans.get(b"http://o/0") is None
    assert plans.get(b"http://o/1") is plan
    assert plans.get(b"http://o/new") is plan
    for i in range(10):
        plans.keep(b"http://o/more%d" % i, plan)
    assert len(plans) == bound
    assert [plans.get(b"http://o/%d" % i) for i in range(1, 11)] == [None] * 10
    assert plans.get(b"http://o/11") is plan


def test_keep_none_forgets() -> None:
    plan, _ = made_plan()
    other, _ = made_plan("max-age=60")
    plans = RefreshPlans()
    plans.keep(RAW_TARGET, plan)
    plans.keep(b"http://o/other", plan)
    assert plans.get(RAW_TARGET) is plan
    plans.keep(RAW_TARGET, other)
    assert plans.get(RAW_TARGET) is other  # replaced
    assert len(plans) == 2
    plans.keep(RAW_TARGET, None)
    assert plans.get(RAW_TARGET) is None
    assert len(plans) == 1
    plans.keep(RAW_TARGET, None)  # (forgetting twice is fine)
    plans.keep(b"http://o/never", None)
    assert len(plans) == 1
    assert plans.get(b"http://o/other") is plan


# -- (g) the planned 304 recognised by its bytes ------------------------------------------------


def learnt_plan(version: str = "1.1", reason: str = "Not Modified") -> tuple[RefreshPlan, bytes]:
    """A plan that learnt its 304 from one dated T1; the bytes of the next, dated T2."""
    plan, _ = made_plan()
    return plan, learn(plan, version, reason)


def learn(plan: RefreshPlan, version: str, reason: str) -> bytes:
    """Teach ``plan`` its 304 (dated T1); the bytes of the next one, dated T2."""
    plan.learn_reply(version, reason, http_date(T1))
    fields = plan.reply_fields(http_date(T2))
    return b"HTTP/%b 304 %b\r\n%b\r\n" % (
        version.encode(),
        reason.encode(),
        b"".join(b"%b: %b\r\n" % field for field in fields),
    )


def assert_parses_as_planned(plan: RefreshPlan, data: bytes, date: str) -> None:
    parsed = Parsed(data)
    assert not parsed.error
    assert parsed.complete
    assert plan.reply_shape is not None
    assert (parsed.status, parsed.reason.decode("latin-1")) == (304, plan.reply_shape.reason)
    assert parsed.version == plan.reply_shape.version
    assert parsed.keep_alive
    assert parsed.fields == plan.reply_fields(date)


def test_nothing_is_recognised_before_a_304_is_learnt() -> None:
    plan, _ = made_plan()
    _, data = learnt_plan()
    assert plan.reply_shape is None
    assert plan.recognised(data) is None


def test_the_learnt_304_is_recognised_with_its_new_date() -> None:
    plan, data = learnt_plan()
    assert plan.recognised(data) == (http_date(T2), plan.reply_fields(http_date(T2)))
    assert data.startswith(b"HTTP/1.1 304 Not Modified\r\n")
    assert_parses_as_planned(plan, data, http_date(T2))
    # The planned path takes the same Date from the parsed fields.
    assert plan.date_of(Parsed(data).fields) == http_date(T2)


def test_a_304_that_cannot_be_spelt_back_is_never_recognised() -> None:
    plan, data = learnt_plan(reason="")
    assert plan.reply_learnt
    assert plan.reply_shape is None
    assert plan.recognised(data) is None


def test_more_or_fewer_bytes_are_not_recognised() -> None:
    plan, data = learnt_plan()
    for other in (data[:-1], data + b"\r\n", data + b"HTTP/1.1 200 OK\r\n"):
        assert plan.recognised(other) is None


@settings(max_examples=300, deadline=None)
@given(
    version=st.sampled_from(["1.1", "1.0"]),
    reason=st.sampled_from(["Not Modified", "Not  Modified", "OK"]),
    edits=st.lists(
        st.tuples(st.integers(0, 400), st.integers(0, 2), st.binary(max_size=3)), max_size=3
    ),
)
def test_whatever_is_recognised_parses_as_the_planned_304(
    version: str, reason: str, edits: list[tuple[int, int, bytes]]
) -> None:
    """Soundness: bytes that ``recognised`` accepts are parsed by llhttp into exactly the
    planned 304 with that Date, whatever was changed in them."""
    plan, _ = made_plan()
    if version == "1.0":
        # (an HTTP/1.0 304 is learnt only if it keeps the connection: it says so)
        plan.reply_after = [*plan.reply_after, (b"Connection", b"keep-alive")]
    data = learn(plan, version, reason)
    for at, cut, insert in edits:
        at %= len(data) + 1
        data = data[:at] + insert + data[at + cut :]
    found = plan.recognised(data)
    if found is not None:
        assert_parses_as_planned(plan, data, found[0])
        assert found[1] == plan.reply_fields(found[0])
