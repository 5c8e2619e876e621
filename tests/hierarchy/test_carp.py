"""hierarchy.carp: shares follow weights, a member gone moves its own URLs alone, keys, and
the routes an array gives (the same choices as Squid: tests/interop/test_squid_carp.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from harvest_cache.config import from_mapping
from harvest_cache.hierarchy.carp import Array, member_hash, url_key
from harvest_cache.hierarchy.health import PeerHealth
from harvest_cache.hierarchy.peers import DirectRule, Peer, peer_list
from harvest_cache.hierarchy.route import DIRECT, Facts, Hop, Policy, Selection
from harvest_common.errors import ConfigError

URLS = [f"http://site{i % 50}.example/page/{i}" for i in range(6000)]
NOW = 100.0


def homes(array: Array, up: Any = lambda _: True) -> dict[str, str]:
    return {url: array.choose(url, up).name for url in URLS}  # type: ignore[union-attr]


def test_each_member_takes_the_share_of_its_weight() -> None:
    array = Array([("a", 1, ()), ("b", 1, ()), ("c", 2, ())])
    shares = Counter(homes(array).values())
    assert abs(shares["a"] / len(URLS) - 0.25) < 0.04
    assert abs(shares["b"] / len(URLS) - 0.25) < 0.04
    assert abs(shares["c"] / len(URLS) - 0.50) < 0.04


def test_a_member_down_moves_its_own_urls_and_no_others() -> None:
    array = Array([(name, 1, ()) for name in ("a", "b", "c", "d")])
    before = homes(array)
    after = homes(array, lambda name: name != "c")
    moved = [url for url in URLS if before[url] != after[url]]
    assert all(before[url] == "c" for url in moved)
    assert len(moved) == sum(1 for home in before.values() if home == "c")
    assert abs(len(moved) / len(URLS) - 0.25) < 0.04  # about 1/N
    assert Counter(after[url] for url in moved).keys() == {"a", "b", "d"}


def test_ranked_starts_with_the_home_and_leaves_out_members_down() -> None:
    array = Array([(name, 1, ()) for name in ("a", "b", "c")])
    url = URLS[7]
    ranked = array.ranked(url)
    assert ranked[0] == array.choose(url)
    assert len(ranked) == 3
    second = array.ranked(url, lambda n: n != ranked[0].name)
    assert second == ranked[1:]
    assert array.choose(url, lambda _: False) is None


def test_weight_zero_is_no_member_and_names_hash_as_squid_does() -> None:
    array = Array([("a", 0, ()), ("b", 1, ())])
    assert [m.name for m in array.members] == ["b"]
    assert member_hash("alpha") != member_hash("alphb")
    assert 0 <= member_hash("x" * 300) < 2**32


def test_keys_of_url_parts() -> None:
    url = "http://Host.example:8080/a/b?c=d"
    assert url_key(url, ("host",)) == "host.example"
    assert url_key(url, ("scheme", "host", "port")) == "http://host.example:8080"
    assert url_key(url, ("path", "params")) == "/a/b?c=d"
    assert url_key("https://h/x", ("host", "port")) == "h:443"
    assert url_key("http://h/", ("params",)) == "http://h/"  # empty: the whole URL
    # Members hashing by host alone send one site's URLs to one home.
    array = Array([(n, 1, ("host",)) for n in ("a", "b", "c")])
    by_site = {url.split("/")[2]: set() for url in URLS}
    for url, home in homes(array).items():
        by_site[url.split("/")[2]].add(home)
    assert all(len(h) == 1 for h in by_site.values())


# -- routes ----------------------------------------------------------------------------------------

MEMBERS = tuple(Peer(n, f"{n}.example", icp_port=0, carp=True) for n in ("m1", "m2", "m3"))


def route(
    url: str, *, facts: Facts | None = None, down: str = "", me: str = "", **policy: Any
) -> list[tuple[str | None, str]]:
    array = Array([(p.name, p.weight, p.carp_key) for p in MEMBERS])
    health = {p.name: PeerHealth(retry_after=30.0) for p in MEMBERS}
    if down:
        health[down].connect_failed(NOW - 1.0)
    facts = facts or Facts("GET", url, "x.example", True)
    s = Selection(facts, Policy(MEMBERS, array=array, array_self=me, **policy), health, NOW)
    assert s.queries == ()  # (members are not asked over ICP)
    assert s.route is not None
    return [(h.peer.name if h.peer else None, h.code) for h in s.route.hops]


def test_a_url_goes_to_its_home_then_the_next_members_then_direct() -> None:
    array = Array([(p.name, p.weight, ()) for p in MEMBERS])
    url = URLS[3]
    ranked = [m.name for m in array.ranked(url)]
    assert route(url) == [(n, "CARP") for n in ranked] + [(None, "HIER_DIRECT")]
    assert route(url, down=ranked[0]) == [(n, "CARP") for n in ranked[1:]] + [(None, "HIER_DIRECT")]


def test_a_member_fetches_the_urls_whose_home_it_is() -> None:
    array = Array([(p.name, p.weight, ()) for p in MEMBERS])
    for url in URLS[:40]:
        ranked = [m.name for m in array.ranked(url)]
        me = "m2"
        expected = [(n, "CARP") for n in ranked[: ranked.index(me)]] + [(None, "HIER_DIRECT")]
        assert route(url, me=me) == expected


def test_a_request_from_a_member_is_not_sent_on_and_a_reload_goes_direct() -> None:
    url = URLS[5]
    assert route(url, facts=Facts("GET", url, "x.example", True, from_array=True)) == [
        (None, "HIER_DIRECT")
    ]
    assert route(url, facts=Facts("GET", url, "x.example", False)) == [(None, "HIER_DIRECT")]


def test_under_never_direct_members_thought_down_are_tried() -> None:
    url = URLS[9]
    hops = route(url, never_direct=(DirectRule(),), down="m1")
    assert DIRECT not in [Hop(None, c) for _, c in hops]
    assert all(code == "CARP" for _, code in hops)


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"host": "s", "role": "sibling", "carp": True}, "carp applies to parents only"),
        ({"host": "p", "carp_key": ["host"]}, "carp_key needs carp = true"),
        ({"host": "p", "carp": True, "carp_key": ["hostname"]}, "carp_key: expected a list"),
    ],
)
def test_bad_array_members_are_reported(table: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        peer_list([table])


def test_array_name_must_name_a_member() -> None:
    peers = [{"host": "m1.example", "name": "m1", "carp": True, "icp_port": 0}]
    assert from_mapping({"hierarchy": {"peers": peers, "array_name": "m1"}}).hierarchy.array_name
    with pytest.raises(ConfigError, match="array_name 'm9' names no `carp` peer"):
        from_mapping({"hierarchy": {"peers": peers, "array_name": "m9"}})
