"""robots.txt: RFC 9309 matching (through Protego), the fetch outcome table and the cache."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gatherer.robots import MAX_SITEMAPS, PARSE_LIMIT, Robots, RobotsCache, decide, robots_url

# RFC 9309 section 5.1.
RFC_EXAMPLE = b"""\
User-Agent: *
Disallow: *.gif$
Disallow: /example/
Allow: /publications/

User-Agent: foobot
Disallow:/
Allow:/example/page.html
Allow:/example/allowed.gif

User-Agent: barbot
User-Agent: bazbot
Disallow: /example/page.html

User-Agent: quxbot

EOF
"""


@pytest.mark.parametrize(
    ("agent", "path", "allowed"),
    [
        # Any other crawler obeys the "*" group.
        pytest.param("otherbot", "/", True, id="star-root"),
        pytest.param("otherbot", "/example/page.html", False, id="star-disallowed-dir"),
        pytest.param("otherbot", "/publications/paper", True, id="star-allowed-dir"),
        pytest.param("otherbot", "/images/a.gif", False, id="star-dollar-anchor"),
        pytest.param("otherbot", "/images/a.gif?x", True, id="star-dollar-anchor-ends"),
        # foobot: everything disallowed but two pages; its own group, not "*".
        pytest.param("foobot", "/", False, id="foobot-root"),
        pytest.param("foobot", "/example/page.html", True, id="foobot-allowed-page"),
        pytest.param("foobot", "/example/allowed.gif", True, id="foobot-allowed-gif"),
        pytest.param("foobot", "/publications/paper", False, id="foobot-not-star-group"),
        pytest.param("FooBot", "/example/page.html", True, id="agent-case-insensitive"),
        pytest.param("FooBot/2.1", "/example/page.html", True, id="agent-product-token"),
        # barbot and bazbot share one group.
        pytest.param("barbot", "/example/page.html", False, id="barbot-shared-group"),
        pytest.param("bazbot", "/example/page.html", False, id="bazbot-shared-group"),
        pytest.param("bazbot", "/example/other.gif", True, id="bazbot-not-star-group"),
        # quxbot's group has no rules: everything allowed, the "*" group ignored.
        pytest.param("quxbot", "/example/page.html", True, id="quxbot-empty-group"),
        pytest.param("foobot", "/robots.txt", True, id="robots-txt-always-allowed"),
    ],
)
def test_rfc9309_example(agent: str, path: str, allowed: bool) -> None:
    assert Robots.parse(RFC_EXAMPLE, agent).allowed(f"http://h{path}") is allowed


@pytest.mark.parametrize(
    ("body", "path", "allowed"),
    [
        pytest.param(
            b"User-Agent: *\nAllow: /example/page/\nDisallow: /example/page/disallowed.gif\n",
            "/example/page/",
            True,
            id="longest-match-allow",
        ),
        pytest.param(
            b"User-Agent: *\nAllow: /example/page/\nDisallow: /example/page/disallowed.gif\n",
            "/example/page/disallowed.gif",
            False,
            id="longest-match-disallow",
        ),
        pytest.param(
            b"User-Agent: *\nDisallow: /p\nAllow: /p\n", "/p", True, id="allow-wins-a-tie"
        ),
        pytest.param(b"User-Agent: *\nDisallow: /path\n", "/path/sub", False, id="prefix-match"),
        pytest.param(
            b"User-Agent: *\nDisallow: /this/*/exactly\n",
            "/this/is/exactly",
            False,
            id="star-wildcard",
        ),
        pytest.param(
            b"User-Agent: *\nDisallow: /foo/bar/%E3%83%84\n",
            "/foo/bar/\u30c4",
            False,
            id="percent-encoded-utf8",
        ),
        pytest.param(
            b"User-Agent: *\nDisallow: / # everything\n", "/x", False, id="comment-stripped"
        ),
        pytest.param(b"User-Agent: *\nDisallow:\n", "/x", True, id="empty-disallow"),
        pytest.param(b"", "/x", True, id="empty-file"),
        pytest.param(b"\xef\xbb\xbfUser-Agent: *\nDisallow: /\n", "/x", False, id="utf8-bom"),
        pytest.param(
            b"User-Agent: *\nDisallow: /\xff\xfe\nDisallow: /x\n", "/x", False, id="bad-bytes"
        ),
    ],
)
def test_matching(body: bytes, path: str, allowed: bool) -> None:
    assert Robots.parse(body, "harvest").allowed(f"http://h{path}") is allowed


def test_groups_naming_one_agent_are_merged() -> None:
    body = b"user-agent: ExampleBot\ndisallow: /foo\ndisallow: /bar\n\n"
    body += b"user-agent: ExampleBot\ndisallow: /baz\n"
    robots = Robots.parse(body, "examplebot")
    assert [robots.allowed(f"http://h/{p}") for p in ("foo", "bar", "baz", "qux")] == [
        False,
        False,
        False,
        True,
    ]


@pytest.mark.parametrize(
    ("body", "agent", "delay"),
    [
        pytest.param(b"User-Agent: *\nCrawl-delay: 3.5\n", "harvest", 3.5, id="star-group"),
        pytest.param(
            b"User-Agent: *\nCrawl-delay: 3\n\nUser-Agent: harvest\nCrawl-delay: 10\n",
            "harvest",
            10.0,
            id="own-group-wins",
        ),
        pytest.param(b"User-Agent: *\nDisallow: /x\n", "harvest", None, id="absent"),
        pytest.param(b"User-Agent: *\nCrawl-delay: soon\n", "harvest", None, id="malformed"),
        pytest.param(b"User-Agent: *\nCrawl-delay: -4\n", "harvest", None, id="negative"),
    ],
)
def test_crawl_delay(body: bytes, agent: str, delay: float | None) -> None:
    assert Robots.parse(body, agent).crawl_delay == delay


def _padded(filler: int, tail: bytes) -> bytes:
    """ "Disallow: /" for everyone, ``filler`` bytes of comments, then ``tail``."""
    head = b"User-Agent: *\nDisallow: /\n"
    line = b"#" * 99 + b"\n"
    size = filler - len(head)
    return head + line * (size // 100) + b"#" * (size % 100 - 1) + b"\n" + tail


def test_only_the_first_500_kib_are_parsed() -> None:
    within = _padded(PARSE_LIMIT - 100, b"Allow: /inside\n")
    assert Robots.parse(within, "h").allowed("http://h/inside")
    beyond = _padded(PARSE_LIMIT + 10, b"Allow: /outside\n")
    assert not Robots.parse(beyond, "h").allowed("http://h/outside")


def test_a_rule_cut_by_the_limit_is_not_read_short() -> None:
    # Read up to the limit, "Allow: /abcdef" would be "Allow: /a": wider than written.
    body = _padded(PARSE_LIMIT - 9, b"Allow: /abcdef\n")
    assert body.index(b"Allow") + len(b"Allow: /a") == PARSE_LIMIT
    robots = Robots.parse(body, "h")
    assert not robots.allowed("http://h/a-secret")
    assert not robots.allowed("http://h/abcdef")


def test_no_whole_line_within_the_limit_means_no_rules() -> None:
    body = b"#" * PARSE_LIMIT + b"\nUser-Agent: *\nDisallow: /\n"
    assert Robots.parse(body, "h").allowed("http://h/y")


def test_sitemap_lines_in_order_each_once_for_every_agent() -> None:
    body = (
        b"Sitemap: http://h/one.xml\n"
        b"User-agent: other\nDisallow: /\nsitemap:  http://h/two.xml.gz \n"
        b"User-agent: *\nDisallow: /private/\nSITEMAP: http://h/one.xml\n"
    )
    robots = Robots.parse(body, "HarvestGatherer")
    assert robots.sitemaps == ("http://h/one.xml", "http://h/two.xml.gz")
    assert not robots.allowed("http://h/private/x")
    assert Robots.allow_all().sitemaps == ()
    many = b"".join(b"Sitemap: http://h/%d.xml\n" % n for n in range(MAX_SITEMAPS + 10))
    assert len(Robots.parse(many, "h").sitemaps) == MAX_SITEMAPS


def test_old_mac_line_ends_are_line_ends() -> None:
    body = _padded(PARSE_LIMIT - 9, b"Allow: /abcdef\r").replace(b"\n", b"\r")
    assert not Robots.parse(body, "h").allowed("http://h/a-secret")


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param(404, Robots.allow_all(), id="404-unavailable"),
        pytest.param(410, Robots.allow_all(), id="410-unavailable"),
        pytest.param(401, Robots.allow_all(), id="401-unavailable"),
        pytest.param(403, Robots.allow_all(), id="403-unavailable"),
        pytest.param(301, Robots.allow_all(), id="redirects-left-over"),
        pytest.param(500, Robots.disallow_all(), id="500-unreachable"),
        pytest.param(503, Robots.disallow_all(), id="503-unreachable"),
        pytest.param(None, Robots.disallow_all(), id="no-connection"),
        pytest.param(100, Robots.disallow_all(), id="nonsense-status"),
    ],
)
def test_decide_outcome_table(status: int | None, expected: Robots) -> None:
    robots = decide(status, b"User-Agent: *\nAllow: /\n", "harvest")
    assert robots == expected
    assert robots.allowed("http://h/x") is (expected == Robots.allow_all())
    assert robots.crawl_delay is None


@pytest.mark.parametrize("status", [200, 203, 299])
def test_decide_parses_a_success(status: int) -> None:
    robots = decide(status, b"User-Agent: *\nDisallow: /private\nCrawl-delay: 2\n", "harvest")
    assert not robots.allowed("http://h/private/x")
    assert robots.allowed("http://h/public")
    assert robots.crawl_delay == 2.0


def test_blanket_verdicts_and_reprs() -> None:
    assert Robots.allow_all().allowed("http://h/anything")
    assert not Robots.disallow_all().allowed("http://h/anything")
    assert Robots.allow_all() != Robots.disallow_all()
    assert repr(Robots.disallow_all()) == "Robots(disallow all)"
    parsed = Robots.parse(b"User-Agent: *\nCrawl-delay: 2\n", "harvest")
    assert repr(parsed) == "Robots(rules for 'harvest', crawl_delay=2.0)"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://h/a/b?c#d", "http://h/robots.txt"),
        ("http://H:80/", "http://h/robots.txt"),
        ("https://h:443/x", "https://h/robots.txt"),
        ("http://h:8080/x", "http://h:8080/robots.txt"),
        ("http://user:pw@h/x", "http://h/robots.txt"),
        ("http://[::1]:81/", "http://[::1]:81/robots.txt"),
        ("ftp://h/pub/", "ftp://h/robots.txt"),
    ],
)
def test_robots_url(url: str, expected: str) -> None:
    assert robots_url(url) == expected


# -- cache ----------------------------------------------------------------------------------


def test_cache_keeps_rules_for_ttl() -> None:
    cache = RobotsCache(ttl=100.0, error_ttl=10.0)
    rules = Robots.parse(b"User-Agent: *\nDisallow: /\n", "h")
    assert cache.get("http://h:80", 0.0) is None
    cache.put("http://h:80", rules, 5.0)
    assert cache.get("http://h:80", 104.9) is rules
    assert cache.get("http://h:80", 105.0) is None
    assert len(cache) == 0  # the expired entry is gone


def test_cache_keeps_errors_for_error_ttl() -> None:
    cache = RobotsCache(ttl=100.0, error_ttl=10.0)
    cache.put("http://h:80", Robots.disallow_all(), 0.0, error=True)
    assert cache.get("http://h:80", 9.9) == Robots.disallow_all()
    assert cache.get("http://h:80", 10.0) is None  # ask the recovered server again


def test_cache_replaces_and_evicts_the_oldest_stored() -> None:
    cache = RobotsCache(max_hosts=2)
    cache.put("a", Robots.allow_all(), 0.0)
    cache.put("b", Robots.allow_all(), 1.0)
    cache.put("a", Robots.disallow_all(), 2.0)  # re-stored: now the youngest
    cache.put("c", Robots.allow_all(), 3.0)
    assert cache.get("b", 3.0) is None
    assert cache.get("a", 3.0) == Robots.disallow_all()
    assert cache.get("c", 3.0) == Robots.allow_all()
    assert repr(cache) == "<RobotsCache 2 hosts, ttl=86400s>"


@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.booleans(), st.sampled_from([0.0, 1.0, 30.0])),
        max_size=60,
    )
)
def test_cache_matches_a_model(puts: list[tuple[int, bool, float]]) -> None:
    cache = RobotsCache(ttl=50.0, error_ttl=5.0, max_hosts=3)
    model: dict[str, tuple[Robots, float]] = {}  # insertion-ordered, like the cache
    now = 0.0
    for host, error, step in puts:
        now += step
        for key, (robots, expires) in list(model.items()):
            fresh = now < expires
            assert cache.get(key, now) == (robots if fresh else None)
            if not fresh:
                del model[key]  # get() dropped it from the cache too
        key = f"http://h{host}:80"
        robots = Robots.disallow_all() if error else Robots.allow_all()
        cache.put(key, robots, now, error=error)
        model.pop(key, None)
        model[key] = (robots, now + (5.0 if error else 50.0))
        if len(model) > 3:
            del model[next(iter(model))]
        assert len(cache) == len(model)
