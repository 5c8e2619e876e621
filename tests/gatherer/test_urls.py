"""URL normal forms, link resolution and host keys."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gatherer.errors import FetchError
from gatherer.urls import (
    access_method,
    authority,
    host_key,
    host_port,
    join,
    normalize,
    origin,
    path_query,
)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        pytest.param("HTTP://Example.COM/A", "http://example.com/A", id="scheme-host-lowered"),
        pytest.param("http://h:80/", "http://h/", id="default-port-http"),
        pytest.param("https://h:443/", "https://h/", id="default-port-https"),
        pytest.param("ftp://h:21/pub/", "ftp://h/pub/", id="default-port-ftp"),
        pytest.param("gopher://h:70/1/x", "gopher://h/1/x", id="default-port-gopher"),
        pytest.param("http://h:443/", "http://h:443/", id="other-scheme-port-kept"),
        pytest.param("http://h:8080/", "http://h:8080/", id="odd-port-kept"),
        pytest.param("http://h:/x", "http://h/x", id="empty-port-dropped"),
        pytest.param("http://h/a#sec", "http://h/a", id="fragment-dropped"),
        pytest.param("http://h", "http://h/", id="empty-path-slash"),
        pytest.param("http://h?q", "http://h/?q", id="empty-path-with-query"),
        pytest.param("http://h/p?b=2&a=1", "http://h/p?b=2&a=1", id="query-kept-in-order"),
        pytest.param("http://h/p?", "http://h/p", id="empty-query-dropped"),
        pytest.param("http://h/a/./b/../c", "http://h/a/c", id="dot-segments"),
        pytest.param("http://h/a/b/..", "http://h/a/", id="trailing-dotdot-is-directory"),
        pytest.param("http://h/../../x", "http://h/x", id="dotdot-above-root"),
        pytest.param("http://h/a//b", "http://h/a//b", id="empty-segments-kept"),
        pytest.param("http://h/%7euser/%2fx", "http://h/~user/%2Fx", id="escapes-canonical"),
        pytest.param("http://h/%2E%2E/x", "http://h/x", id="escaped-dots-resolved"),
        pytest.param("http://h/a b/ü", "http://h/a%20b/%C3%BC", id="unsafe-chars-escaped"),
        pytest.param("http://h/100%", "http://h/100%", id="stray-percent-left"),
        pytest.param("http://h/a?x=%7e", "http://h/a?x=~", id="query-escapes-canonical"),
        pytest.param("http://U:P@H/", "http://U:P@h/", id="userinfo-as-given"),
        pytest.param("http://[::1]:80/", "http://[::1]/", id="ipv6-default-port"),
        pytest.param("http://[2001:DB8::1]:8080/", "http://[2001:db8::1]:8080/", id="ipv6"),
        pytest.param("http://bücher.de/", "http://bücher.de/", id="idna-host-as-given"),
        pytest.param("file:/etc/motd", "file:///etc/motd", id="file-empty-authority"),
        pytest.param("file:///etc/motd", "file:///etc/motd", id="file-kept"),
        pytest.param("  http://h/x  ", "http://h/x", id="whitespace-stripped"),
        pytest.param("mailto:A@B", "mailto:A@B", id="opaque-scheme"),
        pytest.param("http://[::1", "http://[::1", id="bad-ipv6-unchanged"),
        pytest.param("http://h:99999/", "http://h:99999/", id="bad-port-unchanged"),
        pytest.param("", "", id="empty"),
        pytest.param("news:////", "news:////", id="path-of-two-slashes-keeps-its-authority"),
    ],
)
def test_normalize(url: str, expected: str) -> None:
    assert normalize(url) == expected


_URL_TEXT = st.builds(
    lambda scheme, host, port, path, query, frag: f"{scheme}://{host}{port}{path}{query}{frag}",
    st.sampled_from(["http", "HTTPS", "ftp", "Gopher", "file", "news"]),
    st.sampled_from(["h", "Example.org", "[::1]", "", "u@h", "1.2.3.4"]),
    st.sampled_from(["", ":", ":80", ":443", ":8080", ":x"]),
    st.text(alphabet="/.%aB2 ü?#~-", max_size=20),
    st.sampled_from(["", "?", "?a=%2f", "?a b"]),
    st.sampled_from(["", "#", "#x"]),
)


@given(st.one_of(_URL_TEXT, st.text(max_size=40)))
def test_normalize_is_idempotent_and_total(url: str) -> None:
    once = normalize(url)
    assert normalize(once) == once


@pytest.mark.parametrize(
    ("base", "link", "expected"),
    [
        pytest.param("http://h/a/b.html", "c.html", "http://h/a/c.html", id="relative"),
        pytest.param("http://h/a/b.html", "../c.html", "http://h/c.html", id="parent"),
        pytest.param("http://h/a/b.html", "../../../c", "http://h/c", id="above-root"),
        pytest.param("http://h/a/b.html", "/x", "http://h/x", id="absolute-path"),
        pytest.param("http://h/a/b.html", "//o:81/x", "http://o:81/x", id="network-path"),
        pytest.param("http://h/a/b.html", "?q", "http://h/a/b.html?q", id="query-only"),
        pytest.param("http://h/a/b.html", "#top", "http://h/a/b.html", id="fragment-only"),
        pytest.param("http://h/a/", "c#sec", "http://h/a/c", id="fragment-dropped"),
        pytest.param("http://h/", "FTP://F/pub", "ftp://f/pub", id="absolute-normalized"),
        pytest.param("http://h/", "  x.html\n", "http://h/x.html", id="whitespace-stripped"),
        pytest.param("https://h/a", "b", "https://h/b", id="https-base"),
        pytest.param("ftp://h/pub/", "sub/", "ftp://h/pub/sub/", id="ftp-base"),
    ],
)
def test_join(base: str, link: str, expected: str) -> None:
    assert join(base, link) == expected


@pytest.mark.parametrize(
    "link",
    [
        pytest.param("", id="empty"),
        pytest.param("   ", id="blank"),
        pytest.param("javascript:void(0)", id="javascript"),
        pytest.param("JavaScript:alert(1)", id="javascript-upper"),
        pytest.param("mailto:someone@example.org", id="mailto"),
        pytest.param("data:text/plain,hi", id="data"),
        pytest.param("http://[::1/", id="bad-ipv6"),
        pytest.param("http://h:port/", id="bad-port"),
    ],
)
def test_join_refuses_unusable_links(link: str) -> None:
    assert join("http://h/a/", link) is None


def test_join_without_absolute_base_refuses() -> None:
    assert join("a/b", "c") is None


@pytest.mark.parametrize(
    ("url", "method"),
    [
        ("http://h/", "HTTP"),
        ("https://h/", "HTTP"),
        ("ftp://h/", "FTP"),
        ("gopher://h/", "GOPHER"),
        ("file:///etc/motd", "FILE"),
        ("news:comp.infosystems", None),
        ("mailto:x@y", None),
        ("http:///nohost", None),
        ("http://[::1", None),
        ("relative/path", None),
    ],
)
def test_access_method(url: str, method: str | None) -> None:
    assert access_method(url) == method


@pytest.mark.parametrize(
    ("url", "key", "pair"),
    [
        pytest.param("http://H/x", "http://h:80", ("h", 80), id="http-default"),
        pytest.param("https://h/x", "https://h:443", ("h", 443), id="https-differs"),
        pytest.param("http://h:8080/", "http://h:8080", ("h", 8080), id="explicit"),
        pytest.param("ftp://u@h/pub", "ftp://h:21", ("h", 21), id="ftp-userinfo-ignored"),
        pytest.param("gopher://h/", "gopher://h:70", ("h", 70), id="gopher"),
        pytest.param("http://[::1]/", "http://[::1]:80", ("::1", 80), id="ipv6"),
        pytest.param("file:///etc", "file://localhost:0", ("localhost", 0), id="file"),
    ],
)
def test_host_key_and_host_port(url: str, key: str, pair: tuple[str, int]) -> None:
    assert host_key(url) == key
    assert host_port(url) == pair


@pytest.mark.parametrize("url", ["mailto:x@y", "http://[::1", "http:///x"])
def test_host_port_refuses_what_cannot_be_fetched(url: str) -> None:
    with pytest.raises(FetchError) as caught:
        host_port(url)
    assert caught.value.kind == "refused"


@pytest.mark.parametrize(
    ("url", "auth", "org", "pq"),
    [
        ("http://h/a?b=1", "h:80", "http://h", "/a?b=1"),
        ("https://h:8443/", "h:8443", "https://h:8443", "/"),
        ("http://[::1]/p", "[::1]:80", "http://[::1]", "/p"),
    ],
)
def test_authority_origin_path_query(url: str, auth: str, org: str, pq: str) -> None:
    assert authority(url) == auth
    assert origin(url) == org
    assert path_query(url) == pq
