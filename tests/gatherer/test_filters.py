"""URL-Filter and Host-Filter files: syntax, first-match-wins semantics, what each matches."""

from __future__ import annotations

from pathlib import Path

import pytest

from gatherer.errors import ConfigError
from gatherer.filters import (
    DEFAULT_URL_FILTER,
    Filter,
    host_filter_subject,
    load_filter,
    parse_filter,
    posix_classes_to_re,
    url_filter_subject,
)

# The three filters of the Harvest manual's "RootNode filters" section.
NOT_GATHERERS = "Deny  /gatherers/\nAllow .\n"
BELOW_DIRECTORY = "Allow ^/my/cool/sutff/\nDeny  .\n"
HOSTS = "Deny   bcn.boulder.co.us:8080\nDeny   bvsd.k12.co.us\nAllow  ^128\\.138\\..*\nDeny   .\n"


@pytest.mark.parametrize(
    ("rules", "subject", "allowed"),
    [
        pytest.param(NOT_GATHERERS, "/gatherers/index.html", False, id="deny-path-containing"),
        pytest.param(NOT_GATHERERS, "/docs/gatherers/x", False, id="deny-is-unanchored"),
        pytest.param(NOT_GATHERERS, "/docs/index.html", True, id="allow-dot-catches-rest"),
        pytest.param(NOT_GATHERERS, "/gatherer", True, id="deny-needs-whole-regex"),
        pytest.param(BELOW_DIRECTORY, "/my/cool/sutff/a/b.html", True, id="below-directory"),
        pytest.param(BELOW_DIRECTORY, "/my/cool/", False, id="parent-directory-denied"),
        pytest.param(BELOW_DIRECTORY, "/x/my/cool/sutff/", False, id="caret-anchors-start"),
        pytest.param(HOSTS, "bcn.boulder.co.us:8080", False, id="host-and-port-denied"),
        pytest.param(HOSTS, "bcn.boulder.co.us:80", False, id="other-port-falls-to-deny-all"),
        pytest.param(HOSTS, "www.bvsd.k12.co.us:80", False, id="host-denied-any-port"),
        pytest.param(HOSTS, "128.138.243.151:80", True, id="class-b-network-allowed"),
        pytest.param(HOSTS, "128.139.1.1:80", False, id="other-network-denied"),
        pytest.param("Allow .*\nDeny secret\n", "/secret", True, id="first-match-wins"),
        pytest.param("Deny ^/private/\n", "/public/", True, id="no-match-allows"),
        pytest.param("", "/anything", True, id="empty-filter-allows"),
        pytest.param("DENY x\nallow .\n", "/x", False, id="keyword-case-insensitive"),
        pytest.param("# note\n\n  Deny\tx  \n", "/x", False, id="comments-blanks-tabs"),
        pytest.param("Deny /a b/\n", "/a b/c", False, id="regex-keeps-inner-space"),
        pytest.param("Deny [[:digit:]]{3}\n", "/abc123", False, id="posix-class-digit"),
        pytest.param("Deny [[:digit:]]{3}\n", "/abc12", True, id="posix-class-count"),
        pytest.param("Deny ^/[[:upper:]]\n", "/README", False, id="posix-class-upper"),
    ],
)
def test_filter_decides_first_match(rules: str, subject: str, allowed: bool) -> None:
    assert parse_filter(rules, "test").allows(subject) is allowed


@pytest.mark.parametrize(
    ("posix", "python"),
    [
        pytest.param("[[:digit:]]{3}", "[0-9]{3}", id="class-alone"),
        pytest.param("[^[:space:]]", r"[^ \t\n\r\f\v]", id="negated"),
        pytest.param("[_[:alpha:][:digit:]]", "[_a-zA-Z0-9]", id="mixed-members"),
        pytest.param("[]a[:digit:]]", "[]a0-9]", id="leading-bracket-is-member"),
        pytest.param("[^]x[:upper:]]", "[^]xA-Z]", id="negated-leading-bracket"),
        pytest.param("a[[:upper:]]b[[:lower:]]", "a[A-Z]b[a-z]", id="two-sets"),
        pytest.param("[:alpha:]", "[:alpha:]", id="outside-a-set-unchanged"),
        pytest.param(r"\[[:alpha:]", r"\[[:alpha:]", id="escaped-bracket-is-literal"),
        pytest.param("^/a.b$", "^/a.b$", id="plain-regex-unchanged"),
    ],
)
def test_posix_classes_become_re_sets(posix: str, python: str) -> None:
    assert posix_classes_to_re(posix) == python


def test_filter_keeps_rules_in_order_and_says_where_it_came_from() -> None:
    f = parse_filter(NOT_GATHERERS, "MyFilter")
    assert [(allow, p.pattern) for allow, p in f.rules] == [(False, "/gatherers/"), (True, ".")]
    assert repr(f) == "Filter('MyFilter', 2 rules)"


def test_bad_filter_lines_are_all_reported_with_their_lines() -> None:
    text = "Allow .\nPermit x\nDeny\nDeny (\n# fine\nAllow [z-a]\n"
    with pytest.raises(ConfigError) as caught:
        parse_filter(text, "F")
    problems = caught.value.problems
    assert problems[:2] == [
        "F:2: expected 'Allow regex' or 'Deny regex'",
        "F:3: Deny needs a regular expression",
    ]
    assert problems[2].startswith("F:4: bad regular expression '(': ")
    assert problems[3].startswith("F:6: bad regular expression '[z-a]': ")
    assert len(problems) == 4


def test_load_filter_reads_file(tmp_path: Path) -> None:
    path = tmp_path / "MyFilter"
    path.write_text(NOT_GATHERERS)
    f = load_filter(path)
    assert f.source == str(path)
    assert f == parse_filter(NOT_GATHERERS, str(path))


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        pytest.param(None, "cannot read filter file: No such file or directory", id="missing"),
        pytest.param(b"Deny \xff\n", "cannot read filter file: not UTF-8 text", id="not-utf8"),
    ],
)
def test_load_filter_maps_read_failures(tmp_path: Path, content: bytes | None, reason: str) -> None:
    path = tmp_path / "F"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        load_filter(path)
    assert caught.value.problems == [f"{path}: {reason}"]


def test_load_filter_reports_bad_regex_at_the_filter_files_line(tmp_path: Path) -> None:
    path = tmp_path / "F"
    path.write_text("Allow .\nDeny a)\n")
    with pytest.raises(ConfigError) as caught:
        load_filter(path)
    assert caught.value.problems[0].startswith(f"{path}:2: bad regular expression 'a)': ")


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/images/logo.gif", False),
        ("/Photo.JPG", False),
        ("/a.jpeg", False),
        ("/icon.png?size=2", False),
        ("/song.mp3", False),
        ("/sound.au", False),
        ("/clip.MPEG", False),
        ("/movie.mov", False),
        ("/film.avi", False),
        ("/", True),
        ("/index.html", True),
        ("/gif/", True),
        ("/a.gif.html", True),
        ("/search?q=a.gif", False),  # the query is part of what URL filters see
        ("/paper.ps", True),
    ],
)
def test_default_url_filter_skips_images_sound_and_video(path: str, allowed: bool) -> None:
    assert DEFAULT_URL_FILTER.allows(path) is allowed


@pytest.mark.parametrize(
    ("url", "url_subject", "host_subject"),
    [
        pytest.param(
            "http://Host.Example:8080/a/b?x=1#frag", "/a/b?x=1", "host.example:8080", id="http"
        ),
        pytest.param("https://h.example", "/", "h.example:443", id="https-empty-path"),
        pytest.param("ftp://ftp.example/pub/", "/pub/", "ftp.example:21", id="ftp-default-port"),
        pytest.param("gopher://g.example/1/x", "/1/x", "g.example:70", id="gopher"),
        pytest.param("file:///home/x", "/home/x", "localhost:0", id="file-no-host"),
        pytest.param("http://[::1]/p", "/p", "[::1]:80", id="ipv6-brackets"),
        pytest.param("http://user:pw@h.example/", "/", "h.example:80", id="no-userinfo"),
    ],
)
def test_filter_subjects(url: str, url_subject: str, host_subject: str) -> None:
    assert url_filter_subject(url) == url_subject
    assert host_filter_subject(url) == host_subject


def test_manual_host_filter_on_real_urls() -> None:
    hosts = parse_filter(HOSTS, "hosts")
    verdicts = {
        url: hosts.allows(host_filter_subject(url))
        for url in (
            "http://bcn.boulder.co.us:8080/",
            "http://128.138.243.151/",
            "http://www.bvsd.k12.co.us/",
        )
    }
    assert verdicts == {
        "http://bcn.boulder.co.us:8080/": False,
        "http://128.138.243.151/": True,
        "http://www.bvsd.k12.co.us/": False,
    }


def test_filter_is_a_frozen_value() -> None:
    f = Filter((), "empty")
    with pytest.raises(AttributeError):
        f.source = "other"  # type: ignore[misc]
    assert f.allows("/x")
