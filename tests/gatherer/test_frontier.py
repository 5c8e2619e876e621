"""The frontier: RootNode limits, breadth-first order and per-host politeness."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gatherer.frontier import MAX_LISTED, MAX_LISTING_CHAIN, Admission, Frontier, Job, Scope

ALL = frozenset({"HTTP", "FTP", "GOPHER", "FILE"})


def started(frontier: Frontier, url: str, scope: Scope, *, ip: str | None = None) -> Job:
    """Add a root and start its job at time 0."""
    assert frontier.add_root(url, scope, ip=ip) is Admission.ACCEPTED
    job = frontier.take(0.0)
    assert job is not None
    assert job.url == url
    return job


def descend(frontier: Frontier, parent: Job, url: str, now: float = 0.0) -> Job:
    """Offer ``url`` from ``parent``, finish the parent at ``now`` and start ``url`` once any
    delay (10 s at most) is over."""
    assert frontier.offer(url, parent=parent, ip=None).accepted
    frontier.finish(parent, now)
    job = frontier.take(now + 10.0)
    assert job is not None
    assert job.url == url
    return job


def drain(frontier: Frontier, now: float = 0.0) -> list[str]:
    """Take and finish every job at once (with no delay) and return their URLs in order."""
    urls = []
    for _ in range(10_000):
        job = frontier.take(now)
        if job is None:
            break
        frontier.finish(job, now)
        urls.append(job.url)
    assert frontier.is_idle
    return urls


# -- admission ------------------------------------------------------------------------------


def test_roots_are_numbered_in_order_refused_ones_included() -> None:
    frontier = Frontier()
    scope = Scope(delay=0)
    assert frontier.add_root("http://a/", scope, ip=None) is Admission.ACCEPTED
    assert frontier.add_root("http://A:80/#x", scope, ip=None) is Admission.DUPLICATE
    assert frontier.add_root("mailto:x@y", scope, ip=None) is Admission.SCHEME
    assert frontier.add_root("http://b/", scope, ip=None) is Admission.ACCEPTED
    roots = [frontier.take(0.0), frontier.take(0.0)]
    assert [(job.url, job.root, job.depth) for job in roots if job] == [
        ("http://a/", 0, 0),
        ("http://b/", 3, 0),
    ]
    assert frontier.stats().generated == (1, 0, 0, 1)


def test_url_max_counts_only_accepted_urls_root_included() -> None:
    frontier = Frontier()
    scope = Scope(url_max=3, delay=0, url_filter=lambda path: "skip" not in path)
    root = started(frontier, "http://a/", scope)
    verdicts = [
        frontier.offer(url, parent=root, ip=None)
        for url in (
            "http://a/1",
            "http://a/skip",  # refused by the filter: not generated
            "http://a/1",  # duplicate: not generated
            "ftp://a/x",  # scheme: not generated
            "http://a/2",
            "http://a/3",
        )
    ]
    assert [v.reason for v in verdicts] == [
        "accepted",
        "url_filter",
        "duplicate",
        "scheme",
        "accepted",
        "url_max",
    ]
    assert frontier.stats().generated == (3,)


def test_host_max_counts_addresses_so_aliases_count_once() -> None:
    frontier = Frontier()
    root = started(frontier, "http://www.a/", Scope(delay=0), ip="10.0.0.1")
    # Host=1: another name for the same address is the same host; another address is not.
    assert frontier.offer("http://alias.a/x", parent=root, ip="10.0.0.1").accepted
    assert frontier.offer("http://other/x", parent=root, ip="10.0.0.2") is Admission.HOST_MAX
    # Without an address the name decides: a touched name is still fine.
    assert frontier.offer("http://www.a/y", parent=root, ip=None).accepted
    assert frontier.offer("http://unknown/x", parent=root, ip=None) is Admission.HOST_MAX


def test_host_max_allows_more_hosts_up_to_the_limit() -> None:
    frontier = Frontier()
    root = started(frontier, "http://a/", Scope(host_max=2, delay=0), ip="10.0.0.1")
    assert frontier.offer("http://b/1", parent=root, ip="10.0.0.2").accepted
    assert frontier.offer("http://c/1", parent=root, ip="10.0.0.3") is Admission.HOST_MAX
    assert frontier.offer("http://b/2", parent=root, ip="10.0.0.2").accepted  # touched already
    # A refused URL touches nothing: c is still refused, b and a still welcome.
    assert frontier.offer("http://c/2", parent=root, ip="10.0.0.3") is Admission.HOST_MAX


def test_hosts_are_counted_per_root() -> None:
    frontier = Frontier()
    first = started(frontier, "http://a/", Scope(delay=0))
    assert frontier.add_root("http://b/", Scope(delay=0), ip=None).accepted
    assert frontier.offer("http://b/x", parent=first, ip=None) is Admission.HOST_MAX


@pytest.mark.parametrize(
    ("depth_limit", "link_depth", "expected"),
    [
        pytest.param(0, 1, "accepted", id="depth0-unlimited-shallow"),
        pytest.param(0, 40, "accepted", id="depth0-unlimited-deep"),
        pytest.param(1, 1, "accepted", id="depth1-root-links"),
        pytest.param(1, 2, "depth", id="depth1-links-of-links"),
        pytest.param(2, 2, "accepted", id="depth2-two-steps"),
        pytest.param(2, 3, "depth", id="depth2-three-steps"),
    ],
)
def test_depth(depth_limit: int, link_depth: int, expected: str) -> None:
    frontier = Frontier()
    parent = started(frontier, "http://a/", Scope(depth=depth_limit, url_max=100, delay=0))
    for step in range(1, link_depth):  # walk down to the parent of the link
        parent = descend(frontier, parent, f"http://a/{step}", now=10.0 * step)
    assert parent.depth == link_depth - 1
    assert frontier.offer("http://a/link", parent=parent, ip=None).reason == expected


@pytest.mark.parametrize(
    ("root_url", "access", "link", "expected"),
    [
        pytest.param("http://a/", {"HTTP"}, "ftp://a/pub/", "scheme", id="ftp-under-http-only"),
        pytest.param("http://a/", {"HTTP", "FTP"}, "ftp://a/pub/", "accepted", id="ftp-allowed"),
        pytest.param("http://a/", {"HTTP"}, "https://a/x", "accepted", id="https-is-http"),
        pytest.param("https://a/", {"HTTP"}, "http://a/x", "accepted", id="http-from-https"),
        pytest.param("http://a/", {"HTTP"}, "gopher://a/1/", "scheme", id="gopher-not-asked"),
        pytest.param("http://a/", {"HTTP"}, "file:///etc/motd", "scheme", id="file-not-asked"),
        pytest.param("http://a/", {"HTTP"}, "news:comp.x", "scheme", id="unknown-scheme"),
        pytest.param("http://a/", {"HTTP"}, "mailto:x@a", "scheme", id="mailto"),
        pytest.param("ftp://a/", {"HTTP"}, "ftp://a/pub/", "accepted", id="root-method-followed"),
        pytest.param("gopher://a/", {"HTTP"}, "http://a/", "gopher_cross_method", id="gopher-http"),
        pytest.param("gopher://a/", ALL, "ftp://a/", "gopher_cross_method", id="gopher-ftp"),
        pytest.param("gopher://a/", {"HTTP"}, "gopher://a/0/x", "accepted", id="gopher-gopher"),
    ],
)
def test_access(root_url: str, access: set[str], link: str, expected: str) -> None:
    frontier = Frontier()
    root = started(frontier, root_url, Scope(access=frozenset(access), delay=0))
    assert frontier.offer(link, parent=root, ip=None).reason == expected


def test_gopher_document_reached_from_http_root_links_only_to_gopher() -> None:
    frontier = Frontier()
    root = started(frontier, "http://a/", Scope(access=frozenset({"HTTP", "GOPHER"}), delay=0))
    assert frontier.offer("gopher://a/1/menu", parent=root, ip=None).accepted
    menu = frontier.take(0.0)
    assert menu is not None
    assert frontier.offer("http://a/x", parent=menu, ip=None) is Admission.GOPHER_CROSS_METHOD
    assert frontier.offer("gopher://a/0/doc", parent=menu, ip=None).accepted


def test_filters_see_path_with_query_and_host_with_port() -> None:
    paths: list[str] = []
    hosts: list[str] = []

    def url_filter(path: str) -> bool:
        paths.append(path)
        return not path.startswith("/private")

    def host_filter(host: str) -> bool:
        hosts.append(host)
        return host != "a:8080"

    frontier = Frontier()
    scope = Scope(host_max=5, delay=0, url_filter=url_filter, host_filter=host_filter)
    root = started(frontier, "http://a/", scope)
    assert frontier.offer("http://a/p?q=1#f", parent=root, ip=None).accepted
    assert frontier.offer("http://a/private/x", parent=root, ip=None) is Admission.URL_FILTER
    assert frontier.offer("http://a:8080/x", parent=root, ip=None) is Admission.HOST_FILTER
    assert frontier.offer("https://b/x", parent=root, ip=None).accepted
    assert paths == ["/p?q=1", "/private/x", "/x", "/x"]
    assert hosts == ["a:80", "a:8080", "b:443"]


def test_roots_are_not_filtered() -> None:
    frontier = Frontier()
    scope = Scope(url_filter=lambda _: False, host_filter=lambda _: False)
    assert frontier.add_root("http://a/", scope, ip=None).accepted


@pytest.mark.parametrize(
    ("link", "scope", "expected"),
    [
        # Each link breaks two rules; the earlier rule in offer's order is reported.
        pytest.param("ftp://a/", Scope(depth=1), "scheme", id="scheme-before-depth"),
        pytest.param("http://a/", Scope(depth=1), "duplicate", id="duplicate-before-depth"),
        pytest.param(
            "http://a/x",
            Scope(depth=1, url_filter=lambda path: path != "/x"),
            "depth",
            id="depth-before-url-filter",
        ),
        pytest.param(
            "http://b/x",
            Scope(url_filter=lambda path: path != "/x", host_filter=lambda host: host != "b:80"),
            "url_filter",
            id="url-filter-before-host-filter",
        ),
        pytest.param(
            "http://b/x",
            Scope(host_filter=lambda host: host != "b:80"),
            "host_filter",
            id="host-filter-before-host-max",
        ),
        pytest.param("http://b/x", Scope(url_max=2), "host_max", id="host-max-before-url-max"),
    ],
)
def test_rules_are_checked_in_order(link: str, scope: Scope, expected: str) -> None:
    frontier = Frontier()
    child = descend(frontier, started(frontier, "http://a/", scope), "http://a/1")
    assert frontier.offer(link, parent=child, ip=None).reason == expected


def test_a_url_is_gathered_once_across_roots() -> None:
    frontier = Frontier()
    first = started(frontier, "http://a/", Scope(host_max=2, delay=0))
    second = started(frontier, "http://b/", Scope(host_max=2, delay=0))
    assert frontier.offer("http://c/shared", parent=first, ip=None).accepted
    assert frontier.offer("HTTP://C:80/shared#x", parent=second, ip=None) is Admission.DUPLICATE
    frontier.finish(first, 0.0)
    frontier.finish(second, 0.0)
    assert drain(frontier) == ["http://c/shared"]
    assert frontier.stats().generated == (2, 1)


# -- listings -------------------------------------------------------------------------------


def test_listing_entries_carry_their_dates_one_step_down() -> None:
    frontier = Frontier()
    feed = started(frontier, "http://a/feed.xml", Scope(delay=0, depth=1))
    dated = frontier.offer("http://a/post.html", parent=feed, ip=None, modified=1700000000.0)
    assert dated.accepted
    assert frontier.offer("http://a/old.html", parent=feed, ip=None).accepted
    frontier.finish(feed, 0.0)
    post = frontier.take(0.0)
    assert post is not None
    frontier.finish(post, 0.0)
    old = frontier.take(0.0)
    assert old is not None
    assert (post.url, post.depth, post.modified, post.listed) == (
        "http://a/post.html",
        1,
        1700000000.0,
        0,
    )
    assert old.modified is None
    # Depth=1: the entries' own links are a step too far.
    assert frontier.offer("http://a/next.html", parent=post, ip=None) is Admission.DEPTH


def test_sitemaps_named_by_an_index_stand_at_its_depth() -> None:
    frontier = Frontier()
    root = started(frontier, "http://a/", Scope(delay=0, depth=1))
    # robots.txt's Sitemap: lines, as if the root were an index.
    sitemap_index = descend_listed(frontier, root, "http://a/index.xml")
    assert (sitemap_index.depth, sitemap_index.listed) == (0, 1)
    sitemap = descend_listed(frontier, sitemap_index, "http://a/pages.xml")
    assert (sitemap.depth, sitemap.listed) == (0, 2)
    page = descend(frontier, sitemap, "http://a/page.html")
    assert (page.depth, page.listed) == (1, 0)


def test_chains_of_sitemap_indexes_are_bounded() -> None:
    frontier = Frontier()
    job = started(frontier, "http://a/", Scope(delay=0))
    for n in range(MAX_LISTING_CHAIN):
        job = descend_listed(frontier, job, f"http://a/index{n}.xml")
    assert job.listed == MAX_LISTING_CHAIN
    verdict = frontier.offer("http://a/deeper.xml", parent=job, ip=None, listed=True)
    assert verdict is Admission.LISTING_DEPTH
    # A page the last index lists (wrongly) is still a page one step down.
    assert frontier.offer("http://a/page.html", parent=job, ip=None).accepted


def test_sitemaps_named_for_one_root_are_bounded() -> None:
    frontier = Frontier()
    index = started(frontier, "http://a/index.xml", Scope(delay=0, url_max=MAX_LISTED + 10))
    other = started(frontier, "http://b/index.xml", Scope(delay=0))
    for n in range(MAX_LISTED):
        assert frontier.offer(f"http://a/{n}.xml", parent=index, ip=None, listed=True).accepted
    verdict = frontier.offer("http://a/more.xml", parent=index, ip=None, listed=True)
    assert verdict is Admission.LISTING_MAX
    assert frontier.offer("http://a/page.html", parent=index, ip=None).accepted
    # Each root has its own count.
    assert frontier.offer("http://b/1.xml", parent=other, ip=None, listed=True).accepted


def test_a_root_is_exhausted_once_url_max_is_generated() -> None:
    frontier = Frontier()
    root = started(frontier, "http://a/", Scope(delay=0, url_max=3))
    assert not frontier.exhausted(root)
    assert frontier.offer("http://a/1", parent=root, ip=None).accepted
    assert not frontier.exhausted(root)
    assert frontier.offer("http://a/2", parent=root, ip=None, listed=True).accepted
    assert frontier.exhausted(root)
    assert frontier.offer("http://a/3", parent=root, ip=None) is Admission.URL_MAX


def descend_listed(frontier: Frontier, parent: Job, url: str) -> Job:
    """Offer ``url`` as a sitemap ``parent`` names, finish the parent and start ``url``."""
    assert frontier.offer(url, parent=parent, ip=None, listed=True).accepted
    frontier.finish(parent, 0.0)
    job = frontier.take(10.0)
    assert job is not None
    assert job.url == url
    return job


# -- redirects ------------------------------------------------------------------------------


def test_admit_redirect_marks_seen_without_queueing_or_counting() -> None:
    frontier = Frontier()
    root = started(frontier, "http://a/dir", Scope(url_max=1, delay=0))
    assert frontier.admit_redirect("http://a/dir/", job=root, ip=None).accepted
    assert frontier.stats().queued == 0
    assert frontier.stats().generated == (1,)  # URL= was full and is still not exceeded
    assert frontier.admit_redirect("http://a/dir/", job=root, ip=None) is Admission.DUPLICATE
    assert frontier.offer("http://a/dir/", parent=root, ip=None) is Admission.DUPLICATE


@pytest.mark.parametrize(
    ("target", "scope", "expected"),
    [
        pytest.param("http://elsewhere/", Scope(), "host_max", id="other-host"),
        pytest.param("http://elsewhere/", Scope(host_max=2), "accepted", id="other-host-ok"),
        pytest.param("ftp://a/x", Scope(), "scheme", id="scheme"),
        pytest.param(
            "http://a/x", Scope(url_filter=lambda path: path != "/x"), "url_filter", id="url"
        ),
        pytest.param(
            "http://b/x",
            Scope(host_max=2, host_filter=lambda host: host != "b:80"),
            "host_filter",
            id="host",
        ),
        pytest.param("http://a/", Scope(), "duplicate", id="back-to-itself"),
        pytest.param("http://a/deep", Scope(depth=1), "accepted", id="depth-not-checked"),
    ],
)
def test_admit_redirect_checks_the_roots_scope(target: str, scope: Scope, expected: str) -> None:
    frontier = Frontier()
    child = descend(frontier, started(frontier, "http://a/", scope), "http://a/1")
    assert frontier.admit_redirect(target, job=child, ip=None).reason == expected


def test_a_redirect_touches_its_host() -> None:
    frontier = Frontier()
    root = started(frontier, "http://a/", Scope(host_max=2))
    assert frontier.admit_redirect("http://b/", job=root, ip=None).accepted
    assert frontier.offer("http://c/", parent=root, ip=None) is Admission.HOST_MAX
    assert frontier.offer("http://b/x", parent=root, ip=None).accepted


# -- order ----------------------------------------------------------------------------------


def test_breadth_first_across_hosts() -> None:
    frontier = Frontier()
    scope = Scope(host_max=2, delay=0)
    ra = started(frontier, "http://a/", scope)
    rb = started(frontier, "http://b/", scope)
    for parent, url in ((ra, "http://a/1"), (ra, "http://a/2"), (rb, "http://b/1")):
        assert frontier.offer(url, parent=parent, ip=None).accepted
    frontier.finish(ra, 0.0)
    frontier.finish(rb, 0.0)
    a1, b1 = frontier.take(0.0), frontier.take(0.0)
    assert (a1 and a1.url, b1 and b1.url) == ("http://a/1", "http://b/1")  # a busy: b next
    assert frontier.take(0.0) is None  # both hosts busy
    assert a1 is not None
    assert b1 is not None
    assert frontier.offer("http://b/deep", parent=a1, ip=None).accepted  # depth 2
    frontier.finish(a1, 0.0)
    frontier.finish(b1, 0.0)
    assert drain(frontier) == ["http://a/2", "http://b/deep"]


def test_a_shallower_job_admitted_later_goes_first() -> None:
    frontier = Frontier()
    root = started(frontier, "http://a/", Scope(delay=0))
    assert frontier.offer("http://a/1", parent=root, ip=None).accepted
    frontier.finish(root, 0.0)
    one = frontier.take(0.0)
    assert one is not None
    assert frontier.offer("http://a/1/deep", parent=one, ip=None).accepted  # depth 2
    frontier.finish(one, 0.0)
    assert frontier.offer("http://a/late", parent=root, ip=None).accepted  # depth 1
    assert drain(frontier) == ["http://a/late", "http://a/1/deep"]


def test_roots_before_links_across_roots() -> None:
    frontier = Frontier(max_connections=1)
    ra = started(frontier, "http://a/", Scope(delay=0))
    assert frontier.offer("http://a/1", parent=ra, ip=None).accepted
    assert frontier.add_root("http://b/", Scope(delay=0), ip=None).accepted
    frontier.finish(ra, 0.0)
    assert drain(frontier) == ["http://b/", "http://a/1"]


# -- politeness -----------------------------------------------------------------------------


def test_delay_holds_a_host_after_each_finish_while_others_are_served() -> None:
    frontier = Frontier()
    ra = started(frontier, "http://a/", Scope(delay=2, host_max=2))
    assert frontier.offer("http://a/1", parent=ra, ip=None).accepted
    assert frontier.offer("http://b/1", parent=ra, ip=None).accepted
    b1 = frontier.take(1.0)  # a is busy; b has never been contacted
    assert b1 is not None
    assert b1.url == "http://b/1"
    frontier.finish(ra, 5.0)
    assert frontier.next_ready_at() == 7.0
    assert frontier.take(6.9) is None
    a1 = frontier.take(7.0)
    assert a1 is not None
    assert a1.url == "http://a/1"


def test_next_ready_at_is_none_while_only_finishes_can_help() -> None:
    frontier = Frontier()
    root = started(frontier, "http://a/", Scope(delay=2))
    assert frontier.next_ready_at() is None  # nothing queued
    assert frontier.offer("http://a/1", parent=root, ip=None).accepted
    assert frontier.next_ready_at() is None  # a's only connection is in use
    frontier.finish(root, 3.0)
    assert frontier.next_ready_at() == 5.0


def test_two_connections_per_host_without_delay_run_together() -> None:
    frontier = Frontier(connections_per_host=2)
    root = started(frontier, "http://a/", Scope(delay=0))
    for n in range(3):
        assert frontier.offer(f"http://a/{n}", parent=root, ip=None).accepted
    second = frontier.take(0.0)
    assert second is not None
    assert frontier.take(0.0) is None  # two running on a: the limit
    assert frontier.stats().active == 2
    frontier.finish(second, 0.5)
    third = frontier.take(0.5)
    assert third is not None
    assert third.url == "http://a/1"


def test_two_connections_per_host_with_delay_space_their_starts() -> None:
    frontier = Frontier(connections_per_host=2)
    root = started(frontier, "http://a/", Scope(delay=1))
    assert frontier.offer("http://a/1", parent=root, ip=None).accepted
    assert frontier.next_ready_at() == 1.0
    assert frontier.take(0.5) is None
    second = frontier.take(1.0)
    assert second is not None  # overlaps the root's fetch, a second after its start
    assert frontier.stats().active == 2


def test_a_finish_holds_back_a_host_that_was_ready() -> None:
    # a may start its second connection at 1 s, but b's older job goes first; then a's
    # running fetch ends at 1.5 s, and a must wait until 2.5 s.
    frontier = Frontier(connections_per_host=2)
    root = started(frontier, "http://a/", Scope(delay=1, host_max=2))
    assert frontier.offer("http://b/1", parent=root, ip=None).accepted
    assert frontier.offer("http://a/1", parent=root, ip=None).accepted
    b1 = frontier.take(1.0)
    assert b1 is not None
    assert b1.url == "http://b/1"
    frontier.finish(root, 1.5)
    assert frontier.take(1.5) is None
    assert frontier.next_ready_at() == 2.5


def test_max_connections_caps_all_hosts_together() -> None:
    frontier = Frontier(max_connections=2)
    scope = Scope(delay=0)
    for host in "abc":
        assert frontier.add_root(f"http://{host}/", scope, ip=None).accepted
    first, second = frontier.take(0.0), frontier.take(0.0)
    assert first is not None
    assert second is not None
    assert frontier.take(0.0) is None
    assert frontier.next_ready_at() is None  # c waits for a finish, not for time
    frontier.finish(first, 1.0)
    third = frontier.take(1.0)
    assert third is not None
    assert third.url == "http://c/"


@pytest.mark.parametrize(
    ("scope_delay", "crawl_delay", "expected"),
    [
        pytest.param(1.0, 5.0, 15.0, id="crawl-delay-raises"),
        pytest.param(3.0, 0.5, 13.0, id="never-below-scope"),
    ],
)
def test_set_host_delay(scope_delay: float, crawl_delay: float, expected: float) -> None:
    frontier = Frontier()
    frontier.set_host_delay("http://a:80", crawl_delay)
    root = started(frontier, "http://a/", Scope(delay=scope_delay))
    assert frontier.offer("http://a/1", parent=root, ip=None).accepted
    frontier.finish(root, 10.0)
    assert frontier.next_ready_at() == expected


def test_host_delay_is_the_largest_of_the_roots_using_it() -> None:
    frontier = Frontier()
    slow = started(frontier, "http://a/", Scope(delay=4, host_max=2))
    quick = started(frontier, "http://b/", Scope(delay=1, host_max=2))
    assert frontier.offer("http://b/from-slow", parent=slow, ip=None).accepted
    assert frontier.offer("http://b/from-quick", parent=quick, ip=None).accepted
    frontier.finish(quick, 10.0)
    assert frontier.take(13.9) is None
    assert frontier.take(14.0) is not None


def test_file_urls_wait_for_no_server() -> None:
    frontier = Frontier()
    root = started(frontier, "file:///data/", Scope(delay=5))
    assert frontier.offer("file:///data/a.txt", parent=root, ip=None).accepted
    frontier.finish(root, 1.0)
    assert frontier.take(1.0) is not None


def test_finish_of_a_job_not_running_is_refused() -> None:
    frontier = Frontier()
    root = started(frontier, "http://a/", Scope())
    frontier.finish(root, 0.0)
    with pytest.raises(ValueError, match="not running"):
        frontier.finish(root, 0.0)


# -- reporting and values -------------------------------------------------------------------


def test_stats_idle_and_repr() -> None:
    frontier = Frontier()
    assert frontier.is_idle
    root = started(frontier, "http://a/", Scope(host_max=2))
    assert frontier.offer("http://b/", parent=root, ip=None).accepted
    assert not frontier.is_idle
    stats = frontier.stats()
    assert (stats.queued, stats.active, stats.done, stats.hosts) == (1, 1, 0, 2)
    assert "queued=1 active=1 done=0 hosts=2 roots=1" in repr(frontier)
    frontier.finish(root, 0.0)
    assert drain(frontier, 10.0) == ["http://b/"]
    assert frontier.stats().done == 2
    assert "#1 'http://a/'" in repr(root)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"url_max": 0}, id="url-max"),
        pytest.param({"host_max": 0}, id="host-max"),
        pytest.param({"depth": -1}, id="depth"),
        pytest.param({"delay": -1.0}, id="delay"),
        pytest.param({"delay": math.nan}, id="delay-nan"),
        pytest.param({"access": frozenset({"WAIS"})}, id="access"),
    ],
)
def test_scope_refuses_impossible_values(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="Scope"):
        Scope(**kwargs)  # type: ignore[arg-type]


def test_scope_repr_reads_like_the_config() -> None:
    scope = Scope(url_max=10, access=frozenset({"FTP", "HTTP"}), url_filter=lambda _: True)
    assert repr(scope) == "Scope(URL=10, Host=1, Depth=0, Access=FTP|HTTP, Delay=1, url_filter)"


def test_many_hosts_and_urls_are_scheduled_quickly() -> None:
    # 300 hosts x 40 URLs: a linear scan per take would make this slow.
    frontier = Frontier(max_connections=64)
    scope = Scope(url_max=100, delay=0.5)
    for n in range(300):
        root = started(frontier, f"http://h{n}/", scope)
        for k in range(40):
            assert frontier.offer(f"http://h{n}/{k}", parent=root, ip=None).accepted
        frontier.finish(root, 0.0)
    now, taken = 0.0, 0
    for _ in range(100_000):
        job = frontier.take(now)
        if job is None:
            ready = frontier.next_ready_at()
            if ready is None:
                break
            now = max(now, ready)
            continue
        frontier.finish(job, now)
        taken += 1
    assert taken == 300 * 40
    assert frontier.is_idle
    assert now == pytest.approx(40 * 0.5)  # every host kept busy, each at its own pace


# -- property: a model of the rules ----------------------------------------------------------


@dataclass
class _ModelHost:
    queue: list[tuple[int, int, str]] = field(default_factory=list)
    active: int = 0
    next_allowed: float = -math.inf
    delay: float = 0.0


_HOSTS = ("http://a", "http://b", "https://a", "http://c:8080")
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("offer"), st.integers(0, 50), st.sampled_from(_HOSTS), st.integers(0, 9)),
        st.tuples(st.just("take"), st.sampled_from([0.0, 0.0, 0.5, 1.0, 2.5])),
        st.tuples(st.just("finish"), st.integers(0, 50), st.sampled_from([0.0, 0.5, 1.5])),
        st.tuples(st.just("crawl_delay"), st.sampled_from(_HOSTS), st.sampled_from([0.0, 3.0])),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(
    per_host=st.integers(1, 3),
    max_connections=st.integers(1, 4),
    delays=st.tuples(st.sampled_from([0.0, 1.0, 2.0]), st.sampled_from([0.0, 0.5, 3.0])),
    ops=_OPS,
)
def test_random_operations_follow_the_rules(
    per_host: int, max_connections: int, delays: tuple[float, float], ops: list[tuple]
) -> None:
    """A model of the spec: take gives the lowest (depth, seq) among hosts with a free
    connection whose delay is over; limits hold; no URL is handed out twice; all is done."""
    frontier = Frontier(connections_per_host=per_host, max_connections=max_connections)
    hosts: dict[str, _ModelHost] = {}
    crawl_delays: dict[str, float] = {}
    seen: set[str] = set()
    taken: list[Job] = []
    running: list[Job] = []
    handed_out: set[str] = set()
    now = 0.0

    def key_of(base: str) -> str:
        return base if base.count(":") == 2 else base + (":443" if "https" in base else ":80")

    def delay_of(key: str) -> float:
        return max(hosts[key].delay, crawl_delays.get(key, 0.0))

    def admit(url: str, base: str, depth: int, seq: int, scope: Scope) -> None:
        host = hosts.setdefault(key_of(base), _ModelHost())
        host.queue.append((depth, seq, url))
        host.delay = max(host.delay, scope.delay)

    scopes = [Scope(url_max=10_000, host_max=10, access=ALL, delay=d) for d in delays]
    for index, scope in enumerate(scopes):
        url = f"http://a/root{index}"
        assert frontier.add_root(url, scope, ip=None).accepted
        seen.add(url)
        admit(url, "http://a", 0, index + 1, scope)
    seq = len(scopes)

    def check_take(job: Job | None) -> None:
        expected = None
        if len(running) < max_connections:
            heads = [
                (min(h.queue), key)
                for key, h in hosts.items()
                if h.queue and h.active < per_host and h.next_allowed <= now
            ]
            expected = min(heads, default=None)
        if expected is None:
            assert job is None
            return
        (depth, job_seq, url), key = expected
        assert job is not None
        assert (job.url, job.seq, job.depth, job.host_key) == (url, job_seq, depth, key)
        assert job.url not in handed_out
        handed_out.add(job.url)
        host = hosts[key]
        host.queue.remove((depth, job_seq, url))
        host.active += 1
        host.next_allowed = now + delay_of(key)
        running.append(job)
        taken.append(job)
        assert host.active <= per_host
        assert len(running) <= max_connections

    def check_next_ready_at() -> None:
        times = [h.next_allowed for h in hosts.values() if h.queue and h.active < per_host]
        expected = min(times, default=None) if len(running) < max_connections else None
        got = frontier.next_ready_at()
        if expected is None or got is None:
            assert got == expected
        elif expected <= now:
            assert got <= now
        else:
            assert got == expected

    for op in ops:
        if op[0] == "offer" and taken:
            _, which, base, n = op
            parent = taken[which % len(taken)]
            url = f"{base}/{n}"
            verdict = frontier.offer(url, parent=parent, ip=None)
            assert verdict.accepted == (url not in seen)
            if verdict.accepted:
                seen.add(url)
                seq += 1
                admit(url, base, parent.depth + 1, seq, scopes[parent.root])
        elif op[0] == "take":
            now += op[1]
            check_take(frontier.take(now))
        elif op[0] == "finish" and running:
            _, which, dt = op
            now += dt
            job = running.pop(which % len(running))
            frontier.finish(job, now)
            host = hosts[job.host_key]
            host.active -= 1
            host.next_allowed = max(host.next_allowed, now + delay_of(job.host_key))
        elif op[0] == "crawl_delay":
            crawl_delays[key_of(op[1])] = op[2]
            frontier.set_host_delay(key_of(op[1]), op[2])
        check_next_ready_at()
        stats = frontier.stats()
        assert stats.active == len(running)
        assert stats.queued == sum(len(h.queue) for h in hosts.values())

    # Liveness: finishing what runs and waiting as told empties the frontier.
    for _ in range(10_000):
        for job in running:
            frontier.finish(job, now)
            hosts[job.host_key].active -= 1
            hosts[job.host_key].next_allowed = max(
                hosts[job.host_key].next_allowed, now + delay_of(job.host_key)
            )
        running.clear()
        ready = frontier.next_ready_at()
        if ready is None:
            break
        now = max(now, ready)
        check_take(frontier.take(now))
    assert frontier.is_idle
    assert handed_out == seen
