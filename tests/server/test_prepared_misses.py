"""Miss plans, without a network: a plan must repeat exactly what the full path does.

A response is worked out as the miss fast path works it out (``end_to_end``, ``storable``,
``head_to_store``, ``forwarded_head`` with the framing), a plan is made from it with
``plan_miss``, and for later responses of the same shape the plan's stored head and client
head are compared with the full path's for the same input; responses of any other shape must
not match.
"""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harvest_cache.http.cache_control import parse_cache_control
from harvest_cache.http.cache_status import cache_status
from harvest_cache.http.forwarding import end_to_end, forwarded_head, via_entry
from harvest_cache.http.headers import Headers
from harvest_cache.http.policy import storable
from harvest_cache.http.stored import StoredHead
from harvest_cache.http.target import Target, parse_absolute
from harvest_cache.server.fetch import head_to_store
from harvest_cache.server.prepared.misses import MissPlan, MissPlans, plan_key, plan_miss

VIA = via_entry("1.1", "test-cache")
STATUS_VALUE = cache_status("test-cache", hit=False, fwd="uri-miss", fwd_status=200, stored=True)
COLLAPSED_VALUE = cache_status(
    "test-cache", hit=False, fwd="uri-miss", fwd_status=200, collapsed=True
)
REPLACED = frozenset({"connection", "content-length"})  # as the miss fast path sets them
NO_DIRECTIVES = parse_cache_control(())
REQUEST_TAIL = b" HTTP/1.1\r\nHost: origin.test:8080\r\nVia: 1.1 test-cache\r\n\r\n"
MAX = 64 * 1024

Raw = list[tuple[bytes, bytes]]


def nginx(n: int = 1, *, length: int = 1024, **extra: bytes) -> Raw:
    """The fields of a response as nginx sends them, with values that differ with ``n``."""
    fields = [
        (b"Server", b"nginx/1.22.1"),
        (b"Date", b"Mon, 30 Nov 2026 17:%02d:00 GMT" % (n % 60)),
        (b"Content-Type", b"application/octet-stream"),
        (b"Content-Length", b"%d" % length),
        (b"Last-Modified", b"Sun, 29 Nov 2026 10:%02d:00 GMT" % (n % 60)),
        (b"Connection", b"keep-alive"),
        (b"ETag", b'"%x-400"' % (0x6560 + n)),
        (b"Cache-Control", b"max-age=3600"),
        (b"Accept-Ranges", b"bytes"),
    ]
    fields.extend((name.replace("_", "-").encode(), value) for name, value in extra.items())
    return fields


class Full:
    """What the full path makes of a 200 response for ``target``."""

    def __init__(self, target: Target, raw: Raw, status: int = 200, reason: str = "OK") -> None:
        headers = end_to_end((n.decode("latin-1"), v.decode("latin-1")) for n, v in raw)
        self.headers = headers
        decision = storable(
            "GET",
            Headers(),
            NO_DIRECTIVES,
            status,
            headers,
            parse_cache_control(headers.get_all("Cache-Control")),
        )
        assert decision.ok, decision
        value = headers.get("Content-Length")
        assert value is not None
        self.length = int(value)
        self.stored = head_to_store(
            target.url, status, reason, headers, decision, (10.0, 11.0), "", self.length
        )
        extra = [("Cache-Status", STATUS_VALUE), ("Content-Length", str(self.length))]
        self.client_head = forwarded_head(status, reason, headers, VIA, extra, REPLACED)
        self.content_type = headers.get("Content-Type") or "-"


def make_plan(
    raw: Raw,
    url: str = "http://origin.test:8080/first",
    *,
    raw_target: bytes | None = None,
    status: int = 200,
    reason: str = "OK",
    request: bytes | None = None,
    queries: bool = True,
    stored: StoredHead | None = None,
    client_head: bytes | None = None,
    answered: Raw | None = None,
) -> MissPlan | None:
    """A plan made from ``raw`` as the full path answered it (or with ``stored`` and
    ``client_head`` given instead, or as it answered ``answered``)."""
    target = parse_absolute(url)
    full = Full(target, raw if answered is None else answered, status, reason)
    return plan_miss(
        target=target,
        raw_target=url.encode() if raw_target is None else raw_target,
        request=b"GET " + target.path.encode() + REQUEST_TAIL if request is None else request,
        status=status,
        reason=reason,
        reply=raw,
        stored=full.stored if stored is None else stored,
        client_head=full.client_head if client_head is None else client_head,
        cache_status=STATUS_VALUE,
        collapsed_status=COLLAPSED_VALUE,
        via=VIA,
        replaced=REPLACED,
        content_type=full.content_type,
        queries=queries,
        max_length=MAX,
    )


def planned(url: str = "http://origin.test:8080/first") -> MissPlan:
    plan = make_plan(nginx(), url)
    assert plan is not None
    return plan


def same_as_full(plan: MissPlan, url: str, raw: Raw) -> None:
    """The plan's answer to ``raw`` for ``url`` is exactly the full path's."""
    full = Full(parse_absolute(url), raw)
    assert plan.match(200, "OK", raw) == full.length
    stored = plan.stored_head(url, raw, 10.0, 11.0, full.length)
    assert stored == full.stored
    assert plan.client_head(raw, full.length) == full.client_head


# -- made, and repeated exactly ----------------------------------------------------------------


def test_plan_of_an_nginx_miss_repeats_the_full_path_for_other_objects() -> None:
    plan = planned()
    for n in (2, 17, 59):
        url = f"http://origin.test:8080/obj/{n}?r=x"
        same_as_full(plan, url, nginx(n, length=100 + n))


def test_planned_request_is_the_path_and_the_learned_fields() -> None:
    plan = planned()
    assert plan.request(b"/other?q=2") == b"GET /other?q=2" + REQUEST_TAIL
    assert (plan.host, plan.port) == ("origin.test", 8080)


def test_stored_head_shares_the_static_lines_and_interns_the_names() -> None:
    plan = planned()
    one = plan.stored_head("http://origin.test:8080/a", nginx(3), 1.0, 2.0, 1024)
    two = plan.stored_head("http://origin.test:8080/b", nginx(4), 1.0, 2.0, 1024)
    statics = [i for i, (name, _) in enumerate(one.headers) if name == "Server"]
    assert statics
    assert one.headers[statics[0]] is two.headers[statics[0]]
    dates = [i for i, (name, _) in enumerate(one.headers) if name == "Date"]
    assert one.headers[dates[0]] != two.headers[dates[0]]
    assert one.headers[dates[0]][0] is two.headers[dates[0]][0]


def test_hop_by_hop_fields_are_matched_but_never_stored_or_forwarded() -> None:
    plan = planned()
    head = plan.stored_head("http://origin.test:8080/a", nginx(3), 1.0, 2.0, 1024)
    assert "Connection" not in [name for name, _ in head.headers]
    assert b"Connection:" not in plan.client_head(nginx(3), 1024)
    assert plan.match(200, "OK", [*nginx(3)[:5], (b"Connection", b"close"), *nginx(3)[6:]]) is None


def test_log_tail_names_the_url_and_the_type() -> None:
    tail = planned().log_tail("http://origin.test:8080/a", "127.0.0.1")
    assert b"http://origin.test:8080/a" in tail
    assert b"HIER_DIRECT/127.0.0.1" in tail
    assert b"application/octet-stream" in tail


# -- what does not match ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "raw"),
    [
        (404, nginx(2)),
        (200, nginx(2)[:-1]),  # a field fewer
        (200, [*nginx(2), (b"X-Extra", b"1")]),  # one more
        (200, [(b"Server", b"nginx/1.23.0"), *nginx(2)[1:]]),  # a static value changed
        (200, [(b"server", b"nginx/1.22.1"), *nginx(2)[1:]]),  # a name spelt otherwise
        (200, [*nginx(2)[:7], (b"Cache-Control", b"no-store"), *nginx(2)[8:]]),
        (200, [*nginx(2)[:1], (b"Expires", b"x"), *nginx(2)[2:]]),  # Date's place, other name
        (200, nginx(2, length=MAX + 1)),  # over the largest planned body
        (200, [*nginx(2)[:3], (b"Content-Length", b"12a"), *nginx(2)[4:]]),
        (200, [*nginx(2)[:3], (b"Content-Length", b"+12"), *nginx(2)[4:]]),
        (200, [*nginx(2)[:3], (b"Content-Length", b"9" * 12), *nginx(2)[4:]]),
    ],
)
def test_other_responses_do_not_match(status: int, raw: Raw) -> None:
    assert planned().match(status, "OK", raw) is None


def test_another_reason_phrase_does_not_match() -> None:
    assert planned().match(200, "Fine", nginx(2)) is None


def test_body_at_the_largest_planned_length_matches() -> None:
    assert planned().match(200, "OK", nginx(2, length=MAX)) == MAX


# -- what is not planned ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        {"Vary": b"Accept-Encoding"},
        {"Expires": b"Mon, 30 Nov 2026 18:00:00 GMT"},
        {"Via": b"1.1 upstream"},
        {"Date": b"Mon, 30 Nov 2026 17:00:01 GMT"},  # a second Date
        {"ETag": b'"two"'},  # a second ETag
    ],
)
def test_responses_with_these_fields_are_not_planned(extra: dict[str, bytes]) -> None:
    assert make_plan([*nginx(1), *((n.encode(), v) for n, v in extra.items())]) is None


def test_keep_alive_field_is_matched_but_neither_stored_nor_forwarded() -> None:
    plan = make_plan(nginx(1, Keep_Alive=b"timeout=5"))
    assert plan is not None
    same_as_full(plan, "http://origin.test:8080/k", nginx(2, Keep_Alive=b"timeout=5"))
    assert plan.match(200, "OK", nginx(2, Keep_Alive=b"timeout=6")) is None
    assert b"Keep-Alive" not in plan.client_head(nginx(2, Keep_Alive=b"timeout=5"), 1024)


@pytest.mark.parametrize(
    "cc",
    [b"max-age=0", b"no-cache", b'no-cache="Set-Cookie", max-age=60', b"s-maxage=0, max-age=9"],
)
def test_response_revalidated_on_every_use_is_not_planned(cc: bytes) -> None:
    # (whether it may be stored turns on its ETag being well-formed: a value a plan ignores)
    raw = [(n, cc if n == b"Cache-Control" else v) for n, v in nginx(1)]
    assert make_plan(raw) is None


def test_connection_naming_a_field_is_not_planned() -> None:
    raw = [*nginx(1)[:5], (b"Connection", b"keep-alive, X-Private"), *nginx(1)[6:]]
    raw.append((b"X-Private", b"1"))
    assert make_plan(raw) is None


def test_response_without_content_length_or_date_is_not_planned() -> None:
    no_length = [f for f in nginx(1) if f[0] != b"Content-Length"]
    no_length.append((b"Transfer-Encoding", b"chunked"))
    no_date = [f for f in nginx(1) if f[0] != b"Date"]
    for raw in (no_length, no_date):
        # (answered as the full path answers nginx(1), so only the missing field differs)
        assert make_plan(raw, answered=nginx(1)) is None
    assert make_plan(nginx(1), answered=nginx(1)) is not None


@pytest.mark.parametrize(
    "raw_target",
    [
        b"http://ORIGIN.test:8080/first",  # the key is the host lowercased
        b"HTTP://origin.test:8080/first",
        b"http://origin.test:8080/first#frag",
    ],
)
def test_target_not_spelt_as_its_url_is_not_planned(raw_target: bytes) -> None:
    assert make_plan(nginx(1), raw_target=raw_target) is None


def test_default_port_spelt_out_is_not_planned() -> None:
    assert (
        make_plan(nginx(1), "http://origin.test/first", raw_target=b"http://origin.test:80/first")
        is None
    )
    assert make_plan(nginx(1), "http://origin.test/first") is not None


def test_request_for_another_path_is_not_planned() -> None:
    assert make_plan(nginx(1), request=b"GET /elsewhere" + REQUEST_TAIL) is None


def test_plan_that_would_not_reproduce_the_answer_is_refused() -> None:
    full = Full(parse_absolute("http://origin.test:8080/first"), nginx(1))
    wrong_head = full.client_head.replace(b"nginx", b"NGINX")
    assert make_plan(nginx(1), client_head=wrong_head) is None
    fewer = full.stored.revalidated(full.stored.headers[1:], 10.0, 11.0)
    assert make_plan(nginx(1), stored=fewer) is None
    assert make_plan(nginx(1), stored=full.stored, client_head=full.client_head) is not None


# -- targets and keys ------------------------------------------------------------------------------


def test_plan_key_splits_the_origin_from_the_path() -> None:
    fields = ((b"Host", b"origin.test:8080"),)
    found = plan_key("127.0.0.1", b"http://origin.test:8080/a/b?c", fields)
    assert found == (("127.0.0.1", b"http://origin.test:8080", fields), 23)
    assert plan_key("127.0.0.1", b"http://origin.test:8080", fields) is None
    secure = plan_key("127.0.0.1", b"https://origin.test/a", fields)
    assert secure == (("127.0.0.1", b"https://origin.test", fields), 19)
    assert plan_key("127.0.0.1", b"https://origin.test", fields) is None
    assert plan_key("127.0.0.1", b"ftp://origin.test/a", fields) is None
    assert plan_key("127.0.0.1", b"/a/b", fields) is None


def test_rest_of_takes_plain_paths_and_queries_only_if_cached() -> None:
    plan = planned()
    target = b"http://origin.test:8080/a?b=1"
    assert plan.rest_of(target, 23) == b"/a?b=1"
    assert plan.rest_of(b"http://origin.test:8080/a b", 23) is None
    assert plan.rest_of(b"http://origin.test:8080/a#b", 23) is None
    assert plan.rest_of(b'http://origin.test:8080/"', 23) is None
    no_queries = make_plan(nginx(1), queries=False)
    assert no_queries is not None
    assert no_queries.rest_of(target, 23) is None
    assert no_queries.rest_of(b"http://origin.test:8080/a", 23) == b"/a"


def test_rest_of_gives_what_the_target_parser_keeps() -> None:
    for rest in ("/a", "/a/../b", "/%7Ex", "/a?b=1&c=%20", "/~!$&'()*+,;=:@"):
        raw = ("http://origin.test:8080" + rest).encode()
        assert planned().rest_of(raw, 23) == rest.encode()
        assert parse_absolute(raw.decode()).url == raw.decode()


# -- the plans kept --------------------------------------------------------------------------------


def test_plans_are_bounded_and_refusals_retried_later() -> None:
    plans = MissPlans()
    plan = planned()
    key = ("127.0.0.1", b"http://origin.test:8080", ())
    assert plans.wanted(key)
    plans.keep(key, plan)
    assert plans.get(key) is plan
    assert not plans.wanted(key)
    other = ("127.0.0.2", b"http://origin.test:8080", ())
    plans.keep(other, None)
    assert plans.get(other) is None
    waited = 0
    while not plans.wanted(other):
        waited += 1
        assert waited < 1000
    assert waited == 256
    for n in range(1100):
        plans.keep((str(n), b"http://x", ()), plan)
    assert len(plans) == 1024
    assert plans.get(key) is None  # the oldest went first
    plans.keep(key, None)  # a refused key forgets its plan
    assert plans.get(key) is None


# -- property: any planned shape, any varying values ----------------------------------------------

_TOKEN = st.text(string.ascii_letters + string.digits + "-", min_size=1, max_size=12)
_VALUE = (
    st.text(string.ascii_letters + string.digits + ' ;=,./:-"', min_size=1, max_size=20)
    .map(str.strip)
    .filter(bool)
)
_STATIC_NAMES = st.sampled_from(
    [
        "Server",
        "Content-Type",
        "Cache-Control",
        "Accept-Ranges",
        "X-Frame-Options",
        "Age",
        "X-A",
        "x-b",
    ]
)


@st.composite
def shapes(draw: st.DrawFn) -> tuple[Raw, list[int]]:
    """A response's fields (a random order of statics and the four varying ones, Cache-Control
    giving freshness) and the indexes of the varying ones."""
    statics = draw(
        st.lists(st.tuples(_STATIC_NAMES | _TOKEN.map(lambda t: "X-" + t), _VALUE), max_size=6)
    )
    fields = [(n.encode(), v.encode()) for n, v in statics if n.lower() not in ("cache-control",)]
    fields.append((b"Cache-Control", b"max-age=%d" % draw(st.integers(1, 10**6))))
    fields.append((b"Date", b"Mon, 30 Nov 2026 17:00:00 GMT"))
    fields.append((b"Content-Length", b"10"))
    if draw(st.booleans()):
        fields.append((b"ETag", b'"e0"'))
    if draw(st.booleans()):
        fields.append((b"Last-Modified", b"Sun, 29 Nov 2026 10:00:00 GMT"))
    order = draw(st.permutations(range(len(fields))))
    raw = [fields[i] for i in order]
    varying = [
        i
        for i, (n, _) in enumerate(raw)
        if n.lower() in (b"date", b"content-length", b"etag", b"last-modified")
    ]
    return raw, varying


@settings(max_examples=200, deadline=None)
@given(shape=shapes(), data=st.data())
def test_any_planned_shape_repeats_the_full_path(
    shape: tuple[Raw, list[int]], data: st.DataObject
) -> None:
    raw, varying = shape
    plan = make_plan(raw)
    if plan is None:
        # Refused only for a reason the module gives: a field it does not plan (none drawn
        # here) or a name repeated that must be single.
        names = [n.lower() for n, _ in raw]
        assert any(names.count(n) > 1 for n in names)
        return
    later = list(raw)
    for i in varying:
        name = raw[i][0]
        if name.lower() == b"content-length":
            value = b"%d" % data.draw(st.integers(0, MAX))
        else:
            value = data.draw(_VALUE).encode()
        later[i] = (name, value)
    same_as_full(plan, "http://origin.test:8080/" + data.draw(_TOKEN), later)
    if len(raw) > len(varying):
        static = data.draw(st.sampled_from([i for i in range(len(raw)) if i not in varying]))
        changed = list(later)
        changed[static] = (raw[static][0], raw[static][1] + b"x")
        assert plan.match(200, "OK", changed) is None


def test_a_request_joining_the_planned_fetch_gets_the_head_collapsed_and_not_stored() -> None:
    plan = planned()
    head = plan.client_head(nginx(), 5)
    joined = plan.collapsed_head(head)
    assert f"Cache-Status: {STATUS_VALUE}\r\n".encode() in head
    assert joined == head.replace(STATUS_VALUE.encode(), COLLAPSED_VALUE.encode())
    assert b"collapsed" in joined
    assert b"stored" not in joined
