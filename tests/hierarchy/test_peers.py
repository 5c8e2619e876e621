"""Peers and direct rules as configured: `[[hierarchy.peers]]`, `always_direct`/`never_direct`,
`--peer`, domain matching, and how the `[hierarchy]` section fits the rest of the config."""

from __future__ import annotations

from typing import Any

import pytest

from harvest_cache.cli import main
from harvest_cache.config import from_mapping
from harvest_cache.hierarchy.peers import (
    OPTIONS,
    DirectRule,
    Peer,
    direct_rules,
    domain_matches,
    in_domains,
    peer_flag,
    peer_list,
)
from harvest_common.errors import ConfigError


def one(**table: Any) -> Peer:
    (peer,) = peer_list([table])
    return peer


def problem(v: Any) -> str:
    """The message peer_list gives for ``v``."""
    with pytest.raises(ValueError, match=r".") as info:
        peer_list(v)
    return str(info.value)


# -- domains -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "pattern", "expected"),
    [
        ("edu", ".edu", True),
        ("x.edu", ".edu", True),
        ("a.b.x.edu", ".edu", True),
        ("xedu", ".edu", False),
        ("edu.com", ".edu", False),
        ("example.org", "example.org", True),
        ("www.example.org", "example.org", False),
        ("anexample.org", "example.org", False),
        ("example.org.uk", "example.org", False),
    ],
)
def test_domain_matches_like_dstdomain(host: str, pattern: str, expected: bool) -> None:
    assert domain_matches(host, pattern) is expected


def test_in_domains_first_match_decides() -> None:
    patterns = ("!private.example.org", ".example.org")
    assert in_domains("www.example.org", patterns)
    assert in_domains("example.org", patterns)
    assert not in_domains("private.example.org", patterns)
    assert not in_domains("other.net", patterns)
    # An inclusion before the exclusion wins for the hosts it matches.
    assert in_domains("private.example.org", (".example.org", "!private.example.org"))


def test_in_domains_only_exclusions_means_all_but_these() -> None:
    patterns = ("!.edu", "!intranet.example")
    assert in_domains("example.com", patterns)
    assert in_domains("www.intranet.example", patterns)
    assert not in_domains("mit.edu", patterns)
    assert not in_domains("edu", patterns)
    assert not in_domains("intranet.example", patterns)


def test_in_domains_a_mixed_list_takes_only_what_it_names() -> None:
    assert not in_domains("example.com", ("!.edu", ".org"))
    assert in_domains("example.org", ("!.edu", ".org"))


# -- peers: values -----------------------------------------------------------------------------


def test_peer_defaults() -> None:
    peer = one(host="proxy.example")
    assert peer == Peer("proxy.example:3128", "proxy.example")
    assert peer.http_port == 3128
    assert peer.icp_port == 3130
    assert peer.role == "parent"
    assert peer.parent
    assert peer.weight == 1
    assert peer.domains == ()
    assert not any(getattr(peer, o) for o in OPTIONS)
    assert peer.queried
    assert peer.serves("anything.example")


def test_peer_every_key_given() -> None:
    peer = one(
        name="up-1",
        host="Proxy.Example",
        http_port=8080,
        icp_port=3131,
        role="sibling",
        weight=5,
        domains=[".Example.ORG", "host.example.net."],
        no_query=True,
        closest_only=True,
        proxy_only=True,
        no_digest=True,
        tls=True,
    )
    assert peer == Peer(
        "up-1",
        "proxy.example",
        8080,
        3131,
        "sibling",
        5,
        (".example.org", "host.example.net"),
        no_query=True,
        closest_only=True,
        proxy_only=True,
        no_digest=True,
        tls=True,
    )
    assert not peer.parent


def test_default_name_is_host_and_http_port() -> None:
    assert one(host="p.example", http_port=8080).name == "p.example:8080"
    assert one(host="10.0.0.1").name == "10.0.0.1:3128"


@pytest.mark.parametrize("option", OPTIONS)
def test_each_option_flag_sets_only_itself(option: str) -> None:
    peer = one(host="p.example", **{option: True})
    assert getattr(peer, option) is True
    assert [o for o in OPTIONS if getattr(peer, o)] == [option]
    assert option.replace("_", "-") in str(peer)
    assert one(host="p.example", **{option: False}) == one(host="p.example")


@pytest.mark.parametrize("option", OPTIONS)
def test_option_flags_must_be_booleans(option: str) -> None:
    message = problem([{"host": "p.example", option: 1}])
    assert message == f"peers 1: {option}: expected true or false, got 1"


def test_queried_only_with_an_icp_port_and_without_no_query() -> None:
    assert one(host="p.example").queried
    assert not one(host="p.example", icp_port=0).queried
    assert not one(host="p.example", no_query=True).queried


def test_domains_single_string_or_list() -> None:
    assert one(host="p.example", domains=".edu").domains == (".edu",)
    peer = one(host="p.example", domains=["!.mit.edu", ".edu"])
    assert peer.domains == ("!.mit.edu", ".edu")
    assert peer.serves("harvard.edu")
    assert not peer.serves("cs.mit.edu")
    assert not peer.serves("example.com")


def test_domains_of_exclusions_only_serve_everything_else() -> None:
    peer = one(host="p.example", domains=["!.edu"])
    assert peer.serves("example.com")
    assert not peer.serves("mit.edu")


def test_weight_bounds() -> None:
    assert one(host="p.example", weight=1).weight == 1
    assert one(host="p.example", weight=1000).weight == 1000


def test_ports_bounds() -> None:
    assert one(host="p.example", http_port=1, icp_port=0).icp_port == 0
    assert one(host="p.example", http_port=65535, icp_port=65535).http_port == 65535


@pytest.mark.parametrize(
    ("table", "reason"),
    [
        ({}, "missing host"),
        ({"port": 1}, "unknown key port"),
        ({"host": ""}, "host: expected a host name or IPv4 address, got ''"),
        ({"host": 7}, "host: expected a host name or IPv4 address, got 7"),
        ({"host": "p.example:3128"}, "host: expected a host name"),
        ({"host": "http://p.example"}, "host: expected a host name"),
        ({"host": "user@p.example"}, "host: expected a host name"),
        ({"host": "[::1]"}, "host: expected a host name"),
        ({"host": "p example"}, "host: expected a host name"),
        ({"host": "p.example", "http_port": 0}, "expected a port from 1 to 65535, got 0"),
        ({"host": "p.example", "http_port": 65536}, "expected a port from 1 to 65535"),
        ({"host": "p.example", "http_port": "80"}, "expected a port from 1 to 65535, got '80'"),
        ({"host": "p.example", "http_port": True}, "expected a port from 1 to 65535, got True"),
        ({"host": "p.example", "icp_port": -1}, "expected a port from 0 to 65535, got -1"),
        ({"host": "p.example", "icp_port": 3130.0}, "expected a port from 0 to 65535"),
        ({"host": "p.example", "role": "child"}, "role: expected 'parent' or 'sibling'"),
        ({"host": "p.example", "role": "Parent"}, "role: expected 'parent' or 'sibling'"),
        ({"host": "p.example", "weight": 0}, "weight: expected an integer from 1 to 1000, got 0"),
        ({"host": "p.example", "weight": 1001}, "weight: expected an integer from 1 to 1000"),
        ({"host": "p.example", "weight": 1.5}, "weight: expected an integer from 1 to 1000"),
        ({"host": "p.example", "weight": True}, "weight: expected an integer from 1 to 1000"),
        ({"host": "p.example", "name": "-up"}, "name: expected letters, digits"),
        ({"host": "p.example", "name": "up one"}, "name: expected letters, digits"),
        ({"host": "p.example", "name": ""}, "name: expected letters, digits"),
        ({"host": "p.example", "name": 3}, "name: expected letters, digits"),
        ({"host": "p.example", "domains": []}, "expected a domain or a list of domains"),
        ({"host": "p.example", "domains": 5}, "expected a domain or a list of domains"),
        ({"host": "p.example", "domains": ["a b"]}, "'a b' is not a domain"),
        ({"host": "p.example", "domains": ["http://x.org"]}, "is not a domain"),
        ({"host": "p.example", "domains": ["!"]}, "'!' is not a domain"),
        ({"host": "p.example", "domains": [".edu", 3]}, "3 is not a domain"),
        (
            {"host": "p.example", "role": "sibling", "default": True},
            "default and round_robin apply to parents only",
        ),
        (
            {"host": "p.example", "role": "sibling", "round_robin": True},
            "default and round_robin apply to parents only",
        ),
    ],
)
def test_bad_values_are_reported_with_their_position(table: dict[str, Any], reason: str) -> None:
    good = {"host": "ok.example"}
    message = problem([good, table])
    assert message.startswith("peers 2: ")
    assert reason in message
    assert "peers 1" not in message


@pytest.mark.parametrize("key", ["http_port", "icp_port"])
def test_bad_port_names_its_key(key: str) -> None:
    assert f"peers 1: {key}: " in problem([{"host": "p.example", key: 70000}])


def test_sibling_may_say_default_false() -> None:
    peer = one(host="s.example", role="sibling", default=False, round_robin=False)
    assert not peer.parent
    assert not peer.default


def test_not_a_list_of_tables() -> None:
    assert problem({"host": "p.example"}).startswith(
        "expected a list of tables ([[hierarchy.peers]])"
    )


def test_an_item_that_is_not_a_table() -> None:
    assert problem([{"host": "p.example"}, "p2.example"]) == (
        "peers 2: expected a table, got 'p2.example'"
    )


def test_unknown_keys_are_all_named_with_the_known_ones() -> None:
    message = problem([{"host": "p.example", "colour": "red", "address": "x"}])
    assert message.startswith("peers 1: unknown key address, colour (known: name, host, ")
    assert "carp_key, no_query" in message
    assert "tls, carp, htcp)" in message


def test_several_bad_tables_are_reported_together() -> None:
    message = problem(
        [
            {"host": "a.example"},
            {"host": "b.example", "weight": 0},
            {"host": "c.example"},
            {"host": "d.example", "role": "uncle"},
            {"hots": "e.example"},
        ]
    )
    parts = message.split("; ")
    assert len(parts) == 3
    assert parts[0].startswith("peers 2: weight:")
    assert parts[1].startswith("peers 4: role:")
    assert parts[2].startswith("peers 5: unknown key hots")


def test_empty_list_means_no_peers() -> None:
    assert peer_list([]) == ()


def test_peers_keep_their_order() -> None:
    peers = peer_list([{"host": "b.example"}, {"host": "a.example"}, {"host": "c.example"}])
    assert [p.host for p in peers] == ["b.example", "a.example", "c.example"]


def test_duplicate_default_names_are_refused() -> None:
    message = problem([{"host": "p.example"}, {"host": "p.example", "role": "sibling"}])
    assert message == "peer names must differ: p.example:3128 named twice"


def test_duplicate_explicit_names_are_refused() -> None:
    message = problem(
        [
            {"name": "up", "host": "a.example"},
            {"name": "side", "host": "b.example"},
            {"name": "up", "host": "c.example"},
            {"name": "side", "host": "d.example"},
        ]
    )
    assert message == "peer names must differ: side, up named twice"


def test_same_host_on_other_ports_is_another_peer() -> None:
    peers = peer_list([{"host": "p.example"}, {"host": "p.example", "http_port": 3129}])
    assert [p.name for p in peers] == ["p.example:3128", "p.example:3129"]


def test_peer_str() -> None:
    peer = one(name="up", host="p.example", weight=2, default=True, domains=[".edu", ".org"])
    assert str(peer) == "parent up p.example:3128 icp 3130 weight 2 default domains .edu, .org"


# -- direct rules ------------------------------------------------------------------------------

always = direct_rules("always_direct")
never = direct_rules("never_direct")


def rule(**table: Any) -> DirectRule:
    (r,) = always([table])
    return r


def test_empty_rule_matches_every_request() -> None:
    r = rule()
    assert r == DirectRule()
    assert r.matches("GET", "http://a.example/", "a.example")
    assert r.matches("POST", "http://b.example/x", "b.example")
    assert str(r) == "all"


def test_rule_url_regex_is_searched_anywhere() -> None:
    r = rule(url_regex=r"/cgi-bin/")
    assert r.matches("GET", "http://a.example/cgi-bin/x", "a.example")
    assert not r.matches("GET", "http://a.example/cgi/x", "a.example")
    anchored = rule(url_regex=r"\.php$")
    assert anchored.matches("GET", "http://a.example/x.php", "a.example")
    assert not anchored.matches("GET", "http://a.example/x.php?y", "a.example")


def test_rule_domain() -> None:
    r = rule(domain=".Example.org")
    assert r.domains == (".example.org",)
    assert r.matches("GET", "http://example.org/", "example.org")
    assert r.matches("GET", "http://a.example.org/", "a.example.org")
    assert not r.matches("GET", "http://anexample.org/", "anexample.org")
    everything_but = rule(domain=["!.local"])
    assert everything_but.matches("GET", "http://a.example/", "a.example")
    assert not everything_but.matches("GET", "http://printer.local/", "printer.local")


def test_rule_method_string_or_list() -> None:
    assert rule(method="POST").methods == ("POST",)
    r = rule(method=["POST", "PUT"])
    assert r.matches("PUT", "http://a.example/", "a.example")
    assert not r.matches("GET", "http://a.example/", "a.example")
    # Methods are case-sensitive tokens (RFC 9110 9.1).
    assert not r.matches("post", "http://a.example/", "a.example")


def test_rule_conditions_all_have_to_hold() -> None:
    r = rule(url_regex=r"^http://[^/]*/api/", domain=".example.org", method="POST")
    url = "http://www.example.org/api/v1"
    assert r.matches("POST", url, "www.example.org")
    assert not r.matches("GET", url, "www.example.org")
    assert not r.matches("POST", "http://www.example.net/api/v1", "www.example.net")
    assert not r.matches("POST", "http://www.example.org/web/", "www.example.org")
    assert str(r) == "url ~ ^http://[^/]*/api/ and domain .example.org and method POST"


@pytest.mark.parametrize(
    ("table", "reason"),
    [
        ({"url_regex": "("}, "url_regex: bad regex '('"),
        ({"url_regex": 5}, "url_regex: expected a string, got 5"),
        ({"domain": []}, "expected a domain or a list of domains"),
        ({"domain": "no spaces.example"}, "is not a domain"),
        ({"method": "get"}, "method: expected a method or a list of them, got 'get'"),
        ({"method": ["GET", 1]}, "method: expected a method or a list of them"),
        ({"method": 1}, "method: expected a method or a list of them"),
        ({"host": "a.example"}, "unknown key host (known: url_regex, domain, method)"),
    ],
)
def test_bad_rules_are_reported_with_their_position(table: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValueError, match=r"^never_direct 2: ") as info:
        never([{}, table])
    assert reason in str(info.value)


def test_bad_rules_are_reported_together() -> None:
    with pytest.raises(ValueError, match=r".") as info:
        always([{"url_regex": "["}, {"domain": "x.example"}, 7])
    parts = str(info.value).split("; ")
    assert [p.split(":")[0] for p in parts] == ["always_direct 1", "always_direct 3"]


def test_rules_not_a_list() -> None:
    with pytest.raises(ValueError, match=r"\[\[hierarchy\.always_direct\]\]"):
        always({"domain": ".example"})


def test_rule_with_an_empty_method_list_does_not_match_everything() -> None:
    try:
        rules = always([{"method": []}])
    except ValueError:
        return
    assert not rules[0].matches("GET", "http://a.example/", "a.example")


# -- --peer ------------------------------------------------------------------------------------


def test_peer_flag_without_icp_port() -> None:
    table = peer_flag("parent:proxy.example:3128")
    assert table == {"role": "parent", "host": "proxy.example", "http_port": 3128}
    assert peer_list([table])[0].icp_port == 3130


def test_peer_flag_with_icp_port() -> None:
    table = peer_flag("sibling:10.0.0.2:8080:0")
    assert table == {"role": "sibling", "host": "10.0.0.2", "http_port": 8080, "icp_port": 0}
    (peer,) = peer_list([table])
    assert not peer.parent
    assert not peer.queried


@pytest.mark.parametrize(
    ("flag", "reason"),
    [
        ("parent:p.example", "expected ROLE:HOST:HTTP_PORT[:ICP_PORT]"),
        ("parent:p.example:3128:3130:1", "expected ROLE:HOST:HTTP_PORT[:ICP_PORT]"),
        ("uncle:p.example:3128", "expected ROLE:HOST:HTTP_PORT[:ICP_PORT]"),
        ("p.example:3128", "expected ROLE:HOST:HTTP_PORT[:ICP_PORT]"),
        ("parent:p.example:http", "http_port in 'parent:p.example:http' is not a number"),
        ("parent:p.example:-1", "http_port in 'parent:p.example:-1' is not a number"),
        ("parent:p.example:3128:x", "icp_port in 'parent:p.example:3128:x' is not a number"),
        ("parent:p.example:0", "expected a port from 1 to 65535, got 0"),
        ("parent:p.example:3128:70000", "expected a port from 0 to 65535, got 70000"),
        ("parent::3128", "host: expected a host name or IPv4 address"),
        ("parent:a/b:3128", "host: expected a host name or IPv4 address"),
    ],
)
def test_peer_flag_refuses(flag: str, reason: str) -> None:
    with pytest.raises(ValueError, match=r".") as info:
        peer_flag(flag)
    assert reason in str(info.value)


def test_cli_peer_flags_make_the_peers(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--peer", "parent:p.example:3128", "--peer", "sibling:s.example:3128:0"]
    assert main([*argv, "--check-config"]) == 0
    assert "configuration OK" in capsys.readouterr().out


def test_cli_bad_peer_flag_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--peer", "uncle:p.example:3128", "--check-config"])
    assert info.value.code == 2
    assert "expected ROLE:HOST:HTTP_PORT" in capsys.readouterr().err


def test_cli_peer_flags_named_twice(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--peer", "parent:p.example:3128", "--peer", "sibling:p.example:3128"]
    assert main([*argv, "--check-config"]) == 2
    assert "p.example:3128 named twice" in capsys.readouterr().err


def test_cli_icp_off_with_queried_peers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--peer", "parent:p.example:3128", "--icp-port", "0", "--check-config"]) == 2
    assert "icp.port is 0 but peers are to be queried" in capsys.readouterr().err
    argv = ["--peer", "parent:p.example:3128:0", "--icp-port", "0", "--check-config"]
    assert main(argv) == 0


# -- the [hierarchy] section -------------------------------------------------------------------


def hierarchy_problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        from_mapping(raw, "h.toml")
    return info.value.problems


def test_hierarchy_section_is_parsed() -> None:
    config = from_mapping(
        {
            "hierarchy": {
                "peers": [{"host": "p.example"}, {"host": "s.example", "role": "sibling"}],
                "always_direct": [{"domain": ".local"}],
                "never_direct": [{"method": "GET"}, {}],
                "icp_timeout_min": 0.01,
                "icp_timeout_max": 1,
                "dead_peer_timeout": 20,
                "peer_retry": 5,
            }
        }
    )
    h = config.hierarchy
    assert [p.name for p in h.peers] == ["p.example:3128", "s.example:3128"]
    assert h.always_direct == (DirectRule(domains=(".local",)),)
    assert h.never_direct == (DirectRule(methods=("GET",)), DirectRule())
    assert (h.icp_timeout_min, h.icp_timeout_max) == (0.01, 1.0)
    assert (h.dead_peer_timeout, h.peer_retry) == (20.0, 5.0)


def test_hierarchy_defaults() -> None:
    config = from_mapping({})
    h = config.hierarchy
    assert h.peers == ()
    assert h.always_direct == h.never_direct == ()
    assert (h.icp_timeout_min, h.icp_timeout_max) == (0.005, 2.0)
    assert (h.dead_peer_timeout, h.peer_retry) == (10.0, 30.0)


def test_icp_port_is_3130_when_a_peer_is_queried() -> None:
    config = from_mapping({"hierarchy": {"peers": [{"host": "p.example"}]}})
    assert config.icp.port is None
    assert config.icp_port == 3130


def test_icp_port_is_0_when_no_peer_is_queried() -> None:
    assert from_mapping({}).icp_port == 0
    peers = [{"host": "p.example", "icp_port": 0}, {"host": "q.example", "no_query": True}]
    assert from_mapping({"hierarchy": {"peers": peers}}).icp_port == 0


def test_icp_port_given_is_kept() -> None:
    peers = [{"host": "p.example"}]
    assert from_mapping({"icp": {"port": 4827}, "hierarchy": {"peers": peers}}).icp_port == 4827
    assert from_mapping({"icp": {"port": 4827}}).icp_port == 4827
    unqueried = [{"host": "p.example", "no_query": True}]
    assert from_mapping({"icp": {"port": 0}, "hierarchy": {"peers": unqueried}}).icp_port == 0


def test_icp_off_with_queried_peers_is_refused() -> None:
    problems = hierarchy_problems(
        {
            "icp": {"port": 0},
            "hierarchy": {
                "peers": [{"host": "p.example", "no_query": True}, {"host": "q.example"}]
            },
        }
    )
    assert len(problems) == 1
    assert problems[0].startswith("h.toml: icp.port is 0 but peers are to be queried over ICP")


def test_icp_timeout_min_above_max_is_refused() -> None:
    problems = hierarchy_problems({"hierarchy": {"icp_timeout_min": 1.5, "icp_timeout_max": 1}})
    assert problems == ["h.toml: hierarchy.icp_timeout_min (1.5) exceeds hierarchy.icp_timeout_max"]
    equal = from_mapping({"hierarchy": {"icp_timeout_min": 1, "icp_timeout_max": 1}})
    assert equal.hierarchy.icp_timeout_min == equal.hierarchy.icp_timeout_max


def test_both_consistency_problems_at_once() -> None:
    problems = hierarchy_problems(
        {
            "icp": {"port": 0},
            "hierarchy": {
                "peers": [{"host": "p.example"}],
                "icp_timeout_min": 3,
                "icp_timeout_max": 2,
            },
        }
    )
    assert len(problems) == 2


def test_bad_hierarchy_values_name_section_key_and_table() -> None:
    problems = hierarchy_problems(
        {
            "hierarchy": {
                "peers": [{"host": "p.example"}, {"host": "q.example", "weight": 0}],
                "always_direct": [{"url_regex": "("}],
                "icp_timeout_max": 0,
                "colour": "red",
            },
            "dns": {"min_ttl": -1},
        }
    )
    joined = "\n".join(problems)
    assert len(problems) == 5
    assert "h.toml: hierarchy.peers: peers 2: weight: expected an integer" in joined
    assert "h.toml: hierarchy.always_direct: always_direct 1: url_regex: bad regex" in joined
    assert "h.toml: hierarchy.icp_timeout_max: must be between" in joined
    assert "h.toml: unknown key hierarchy.colour" in joined
    assert "h.toml: dns.min_ttl:" in joined
