"""The gatherer configuration: gatherer.cf and TOML forms, defaults, checks and messages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gatherer.config import (
    GathererConfig,
    LeafNode,
    LeafProgram,
    RootNode,
    RootProgram,
    load,
    parse_enumeration_line,
)
from gatherer.config.build import HEADERS, MIB, ROOT_OPTIONS
from gatherer.errors import ConfigError
from gatherer.essence.options import DEFAULT_STOPLIST, EssenceOptions
from gatherer.filters import DEFAULT_URL_FILTER, load_filter
from harvest_common.config import Address
from harvest_common.hsr_client import HsrSettings

MY_FILTER = "Deny  /gatherers/\nAllow .\n"
DOCS = Path(__file__).parents[2] / "docs" / "gatherer-configuration.md"


def load_text(tmp_path: Path, text: str, name: str = "gatherer.cf") -> GathererConfig:
    path = tmp_path / name
    path.write_text(text)
    return load(path)


def problems_of(tmp_path: Path, text: str, name: str = "gatherer.cf") -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_text(tmp_path, text, name)
    return caught.value.problems


# -- the manual's example -------------------------------------------------------------------------

MANUAL_EXAMPLE = """\
<RootNodes>
http://harvest.cs.colorado.edu/               URL=100,MyFilter
http://www.cs.colorado.edu/                   Host=50 Delay=60
gopher://gopher.colorado.edu/                 Depth=1
file://powell.cs.colorado.edu/home/hardy/     Depth=2
ftp://ftp.cs.colorado.edu/pub/cs/techreports/ Depth=1
http://harvest.cs.colorado.edu/~hardy/hotlist.html \\
        Depth=1 Delay=60
http://harvest.cs.colorado.edu/~hardy/ \\
        Depth=2 Access=HTTP|FTP
</RootNodes>
"""


def test_manual_example_root_nodes(tmp_path: Path) -> None:
    (tmp_path / "MyFilter").write_text(MY_FILTER)
    config = load_text(tmp_path, MANUAL_EXAMPLE)
    my_filter = load_filter(tmp_path / "MyFilter")
    assert config.root_nodes == (
        RootNode("http://harvest.cs.colorado.edu/", url_max=100, url_filter=my_filter),
        RootNode("http://www.cs.colorado.edu/", host_max=50, delay=60.0),
        RootNode("gopher://gopher.colorado.edu/", depth=1),
        RootNode("file://powell.cs.colorado.edu/home/hardy/", depth=2),
        RootNode("ftp://ftp.cs.colorado.edu/pub/cs/techreports/", depth=1),
        RootNode("http://harvest.cs.colorado.edu/~hardy/hotlist.html", depth=1, delay=60.0),
        RootNode(
            "http://harvest.cs.colorado.edu/~hardy/", depth=2, access=frozenset({"HTTP", "FTP"})
        ),
    )
    # A continued line is reported at its first line.
    lines = [int(node.source.rpartition(":")[2]) for node in config.root_nodes]
    assert lines == [2, 3, 4, 5, 6, 7, 9]
    assert config.leaf_nodes == ()


def test_root_node_defaults_are_harvests() -> None:
    node = RootNode("http://h/")
    assert (node.url_max, node.url_filter, node.host_max, node.host_filter) == (
        250,
        DEFAULT_URL_FILTER,
        1,
        None,
    )
    assert (node.access, node.delay, node.depth, node.enumeration) == (
        frozenset({"HTTP"}),
        1.0,
        0,
        None,
    )


def test_root_node_repr_names_only_what_differs() -> None:
    node = RootNode("http://h/", depth=2, source="g.cf:3")
    assert repr(node) == "RootNode('http://h/', depth=2, source='g.cf:3')"


# -- headers --------------------------------------------------------------------------------------


def test_empty_file_gives_every_default(tmp_path: Path) -> None:
    config = load_text(tmp_path, "# nothing but a comment\n\n")
    expected = {
        "name": "Harvest Gatherer",
        "host": None,
        "port": 8500,
        "version": "Harvest-0.1.0",
        "top_directory": tmp_path,
        "data_directory": tmp_path / "data",
        "working_directory": tmp_path / "tmp",
        "http_proxy": None,
        "https_via_proxy": "absolute",
        "refresh_rate": 604800.0,
        "time_to_live": 2592000.0,
        "access_delay": 1.0,
        "gather_interval": 86400.0,
        "user_agent": "HarvestGatherer/0.1",
        "connections_per_host": 1,
        "max_connections": 8,
        "max_document_bytes": 10485760,
        "max_redirects": 5,
        "fetch_timeout": 30.0,
        "summarizer_timeout": 10.0,
        "summarizer_memory_mb": 512,
        "summarizer_workers": 0,
        "stoplist": DEFAULT_STOPLIST,
        "full_text": False,
        "manual_directory": None,
        "archive_directory": None,
        "archive_rotate_bytes": 1024 * MIB,
        "unnest_max_bytes": 67108864,
        "unnest_max_members": 1000,
        "unnest_max_depth": 3,
        "members_as_records": False,
        "ftp_logins": (),
        "dns_servers": (),
        "dns_timeout": 5.0,
        "hosts_file": Path("/etc/hosts"),
        "hsr": HsrSettings(),
        "root_nodes": (),
        "leaf_nodes": (),
    }
    assert {name: getattr(config, name) for name in expected} == expected
    assert set(expected) == set(GathererConfig.__dataclass_fields__)


HEADER_CASES = [
    ("Gatherer-Name: My  Gatherer", "name", "My  Gatherer"),
    ("Gatherer-Host: gatherer.example", "host", "gatherer.example"),
    ("Gatherer-Port: 9000", "port", 9000),
    ("Gatherer-Version: Harvest-1.4", "version", "Harvest-1.4"),
    ("Top-Directory: /srv/gatherer", "top_directory", Path("/srv/gatherer")),
    ("Data-Directory: db", "data_directory", "TOP/db"),
    ("Working-Directory: /var/tmp/g", "working_directory", Path("/var/tmp/g")),
    ("HTTP-Proxy: cache.example:3128", "http_proxy", "http://cache.example:3128"),
    ("HTTPS-Via-Proxy: Tunnel", "https_via_proxy", "tunnel"),
    ("Refresh-Rate: 86400", "refresh_rate", 86400.0),
    ("Time-To-Live: 0.5", "time_to_live", 0.5),
    ("Access-Delay: 0", "access_delay", 0.0),
    ("Gather-Interval: 3600", "gather_interval", 3600.0),
    ("User-Agent: MyBot/2", "user_agent", "MyBot/2"),
    ("Connections-Per-Host: 2", "connections_per_host", 2),
    ("Max-Connections: 32", "max_connections", 32),
    ("Max-Document-Size: 1000", "max_document_bytes", 1000),
    ("Max-Redirects: 0", "max_redirects", 0),
    ("Fetch-Timeout: 2.5", "fetch_timeout", 2.5),
    ("Summarizer-Timeout: 60", "summarizer_timeout", 60.0),
    ("Summarizer-Memory: 256", "summarizer_memory_mb", 256),
    ("Summarizer-Workers: 4", "summarizer_workers", 4),
    ("Stoplist: stop.cf", "stoplist", frozenset({"Image", "Binary"})),
    ("Full-Text: YES", "full_text", True),
    ("Manual-Directory: manual", "manual_directory", "TOP/manual"),
    ("Archive-Directory: warc", "archive_directory", "TOP/warc"),
    ("Archive-Rotate-Size: 2", "archive_rotate_bytes", 2 * MIB),
    ("Unnest-Max-Size: 4096", "unnest_max_bytes", 4096),
    ("Unnest-Max-Members: 10", "unnest_max_members", 10),
    ("Unnest-Max-Depth: 0", "unnest_max_depth", 0),
    ("Members-As-Records: yes", "members_as_records", True),
    ("FTP-Login: FTP.Example.com me s3cret", "ftp_logins", (("ftp.example.com", "me", "s3cret"),)),
    (
        "DNS-Servers: 127.0.0.1:5353, ::1",
        "dns_servers",
        (Address("127.0.0.1", 5353), Address("::1", 53)),
    ),
    ("Hosts-File: hosts", "hosts_file", "TOP/hosts"),
    ("DNS-Timeout: 0.5", "dns_timeout", 0.5),
]


@pytest.mark.parametrize(("line", "field", "value"), HEADER_CASES, ids=[c[1] for c in HEADER_CASES])
def test_each_header_sets_its_field(tmp_path: Path, line: str, field: str, value: object) -> None:
    (tmp_path / "stop.cf").write_text("# types not to summarize\nImage\n\nBinary\n")
    config = load_text(tmp_path, line + "\n")
    expected = tmp_path / str(value)[4:] if str(value).startswith("TOP/") else value
    assert getattr(config, field) == expected


def test_header_cases_cover_every_header() -> None:
    covered = {line.partition(":")[0] for line, _, _ in HEADER_CASES}
    assert covered == {h.name for h in HEADERS}


@pytest.mark.parametrize(
    ("line", "proxy"),
    [
        ("cache:3128", "http://cache:3128"),
        ("http://Cache.Example:8080", "http://cache.example:8080"),
        ("http://cache:3128/", "http://cache:3128"),
        ("[::1]:3128", "http://[::1]:3128"),
    ],
)
def test_http_proxy_is_normalized(tmp_path: Path, line: str, proxy: str) -> None:
    assert load_text(tmp_path, f"HTTP-Proxy: {line}\n").http_proxy == proxy


def test_paths_are_relative_to_top_directory_and_it_to_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "top").mkdir()
    (tmp_path / "top" / "F").write_text(MY_FILTER)
    text = (
        "Top-Directory: top\nArchive-Directory: w\n<RootNodes>\nhttp://h/ URL=5,F\n</RootNodes>\n"
    )
    config = load_text(tmp_path, text)
    assert config.top_directory == tmp_path / "top"
    assert config.data_directory == tmp_path / "top" / "data"
    assert config.working_directory == tmp_path / "top" / "tmp"
    assert config.archive_directory == tmp_path / "top" / "w"
    node = config.root_nodes[0]
    assert isinstance(node, RootNode)
    assert node.url_filter == load_filter(tmp_path / "top" / "F")


def test_header_names_are_case_insensitive_and_ftp_login_repeats(tmp_path: Path) -> None:
    text = "gatherer-NAME: lower\nftp-login: a.example u1 p1\nFTP-Login: b.example u2 p2\n"
    config = load_text(tmp_path, text)
    assert config.name == "lower"
    assert config.ftp_logins == (("a.example", "u1", "p1"), ("b.example", "u2", "p2"))


def test_continuation_lines(tmp_path: Path) -> None:
    text = (
        "Gatherer-Name: A long \\\n    gatherer name\n"
        "<RootNodes>\n"
        "http://h/ \\\n  Depth=3 \\\n\n"  # a blank line ends a continued line
        "http://i/ \\\n\\\nDepth=1\n"  # a line of just a backslash adds nothing
        "</RootNodes>\n"
        "Gatherer-Host: h.example \\\n"  # the file's last line may end in a backslash
    )
    config = load_text(tmp_path, text)
    assert (config.name, config.host) == ("A long gatherer name", "h.example")
    assert config.root_nodes == (RootNode("http://h/", depth=3), RootNode("http://i/", depth=1))


def test_comments_and_blank_lines_anywhere(tmp_path: Path) -> None:
    text = (
        "# head\n\nGatherer-Port: 1\n  # indented\n<LeafNodes>\n# c\n\nhttp://h/x\n</LeafNodes>\n"
    )
    config = load_text(tmp_path, text)
    assert (config.port, config.leaf_nodes) == (1, (LeafNode("http://h/x"),))


def test_sections_in_either_order(tmp_path: Path) -> None:
    text = "<LeafNodes>\nftp://f/x\n</LeafNodes>\n<RootNodes>\nhttp://h/\n</RootNodes>\n"
    config = load_text(tmp_path, text)
    assert config.root_nodes == (RootNode("http://h/"),)
    assert config.leaf_nodes == (LeafNode("ftp://f/x"),)


# -- RootNode options -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        pytest.param("Site=7", RootNode("http://h/", host_max=7), id="site-is-host"),
        pytest.param("host=7,/dev/null", RootNode("http://h/", host_max=7), id="dev-null-host"),
        pytest.param(
            "URL=9,/dev/null", RootNode("http://h/", url_max=9, url_filter=None), id="dev-null-url"
        ),
        pytest.param("URL=9", RootNode("http://h/", url_max=9), id="url-keeps-default-filter"),
        pytest.param(
            "Access=http|ftp|Gopher|FILE",
            RootNode("http://h/", access=frozenset({"HTTP", "FTP", "GOPHER", "FILE"})),
            id="access-any-case",
        ),
        pytest.param("Access=HTTPS", RootNode("http://h/"), id="https-is-http"),
        pytest.param("Delay=0.25", RootNode("http://h/", delay=0.25), id="fractional-delay"),
        pytest.param("Depth=0", RootNode("http://h/", depth=0), id="depth-zero-unlimited"),
        pytest.param(
            "Enumeration=my-enum.pl", RootNode("http://h/", enumeration=("my-enum.pl",)), id="enum"
        ),
        pytest.param("Sitemaps=YES", RootNode("http://h/", sitemaps=True), id="sitemaps"),
        pytest.param("sitemaps=no", RootNode("http://h/"), id="no-sitemaps"),
    ],
)
def test_root_options(tmp_path: Path, options: str, expected: RootNode) -> None:
    config = load_text(tmp_path, f"<RootNodes>\nhttp://h/ {options}\n</RootNodes>\n")
    assert config.root_nodes == (expected,)


def test_host_filter_loaded(tmp_path: Path) -> None:
    (tmp_path / "hosts").write_text("Allow ^128\\.138\\.\nDeny .\n")
    config = load_text(tmp_path, "<RootNodes>\nhttp://h/ Host=5,hosts\n</RootNodes>\n")
    node = config.root_nodes[0]
    assert isinstance(node, RootNode)
    assert node.host_filter is not None
    assert (node.host_filter.allows("128.138.1.1:80"), node.host_filter.allows("h:80")) == (
        True,
        False,
    )


def test_access_delay_is_the_default_delay(tmp_path: Path) -> None:
    text = "Access-Delay: 2.5\n<RootNodes>\nhttp://a/\nhttp://b/ Delay=3\n|prog\n</RootNodes>\n"
    config = load_text(tmp_path, text)
    delays = [n.delay if isinstance(n, RootNode) else n.template.delay for n in config.root_nodes]
    assert delays == [2.5, 3.0, 2.5]


# -- programs -------------------------------------------------------------------------------------


def test_root_program_with_options(tmp_path: Path) -> None:
    (tmp_path / "url-filter").write_text(MY_FILTER)
    config = load_text(
        tmp_path, "<RootNodes>\n|my-fave-sites.pl Depth=1 URL=5000,url-filter\n</RootNodes>\n"
    )
    template = RootNode("", depth=1, url_max=5000, url_filter=load_filter(tmp_path / "url-filter"))
    assert config.root_nodes == (RootProgram(("my-fave-sites.pl",), template),)
    assert config.root_nodes[0].source == f"{tmp_path / 'gatherer.cf'}:2"


def test_root_program_without_options_keeps_its_arguments(tmp_path: Path) -> None:
    text = "<RootNodes>\n|gen.sh --from 'a b' x=1 Depth=2\n</RootNodes>\n"
    (program,) = load_text(tmp_path, text).root_nodes
    # Only words naming a RootNode option are options: x=1 is an argument.
    assert program == RootProgram(("gen.sh", "--from", "a b", "x=1"), RootNode("", depth=2))


def test_leaf_program_takes_every_word_as_command(tmp_path: Path) -> None:
    text = "<LeafNodes>\n|generate-news-urls.sh Depth=1\n</LeafNodes>\n"
    config = load_text(tmp_path, text)
    assert config.leaf_nodes == (LeafProgram(("generate-news-urls.sh", "Depth=1")),)


def test_program_output_becomes_nodes(tmp_path: Path) -> None:
    text = "<RootNodes>\n|p Depth=4\n</RootNodes>\n<LeafNodes>\n|q\n</LeafNodes>\n"
    config = load_text(tmp_path, text)
    root_program, leaf_program = config.root_nodes[0], config.leaf_nodes[0]
    assert isinstance(root_program, RootProgram)
    assert isinstance(leaf_program, LeafProgram)
    node = root_program.root("http://out/", source="p:1")
    assert (node, node.source) == (RootNode("http://out/", depth=4), "p:1")
    assert leaf_program.leaf("ftp://f/x", source="q:2") == LeafNode("ftp://f/x")
    with pytest.raises(ConfigError) as caught:
        root_program.root("news:comp.unix", source="p:2")
    assert caught.value.problems == [
        "p:2: URL scheme 'news' is not http, https, ftp, gopher or file: 'news:comp.unix'"
    ]
    with pytest.raises(ConfigError) as caught:
        leaf_program.leaf("relative/x", source="q:3")
    assert caught.value.problems == ["q:3: not an absolute URL: 'relative/x'"]


# -- enumeration program output -------------------------------------------------------------------


def test_enumeration_line_full(tmp_path: Path) -> None:
    (tmp_path / "uf").write_text(MY_FILTER)
    (tmp_path / "hf").write_text("Deny .\n")
    line = "http://h/ 10 uf 2 hf HTTP|FTP 0.5 3 ./next.pl"
    node = parse_enumeration_line(line, source="enum:1", base=tmp_path)
    assert node == RootNode(
        "http://h/",
        url_max=10,
        url_filter=load_filter(tmp_path / "uf"),
        host_max=2,
        host_filter=load_filter(tmp_path / "hf"),
        access=frozenset({"HTTP", "FTP"}),
        delay=0.5,
        depth=3,
        enumeration=("./next.pl",),
    )
    assert node.source == "enum:1"


def test_enumeration_line_disables_with_dev_null_and_bin_false(tmp_path: Path) -> None:
    line = "ftp://f/pub/ 250 /dev/null 1 /dev/null FTP 1 0 /bin/false"
    node = parse_enumeration_line(line, source="e", base=tmp_path)
    assert node == RootNode(
        "ftp://f/pub/", url_filter=None, host_filter=None, access=frozenset({"FTP"})
    )


@pytest.mark.parametrize(
    ("line", "problems"),
    [
        pytest.param(
            "http://h/ 10 /dev/null",
            [
                "e:3: expected 9 fields (URL URL-Max URL-Filter Host-Max Host-Filter Access "
                "Delay Depth Enumeration-Program), got 3"
            ],
            id="too-few-fields",
        ),
        pytest.param(
            "",
            [
                "e:3: expected 9 fields (URL URL-Max URL-Filter Host-Max Host-Filter Access "
                "Delay Depth Enumeration-Program), got 0"
            ],
            id="empty-line",
        ),
        pytest.param(
            "mailto:x 0 /dev/null x /dev/null WAIS 1 0 /bin/false",
            [
                "e:3: URL scheme 'mailto' is not http, https, ftp, gopher or file: 'mailto:x'",
                "e:3: URL-Max: must be at least 1, got 0",
                "e:3: Host-Max: expected a whole number, got 'x'",
                "e:3: Access: access method WAIS is not supported: no WAIS servers remain",
            ],
            id="bad-values-named-by-field",
        ),
        pytest.param(
            "http://h/ 1 missing 1 /dev/null HTTP 1 0 /bin/false",
            ["e:3: URL-Filter: BASE/missing: cannot read filter file: No such file or directory"],
            id="missing-filter",
        ),
    ],
)
def test_enumeration_line_errors(tmp_path: Path, line: str, problems: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_enumeration_line(line, source="e:3", base=tmp_path)
    assert caught.value.problems == [p.replace("BASE", str(tmp_path)) for p in problems]


# -- errors ---------------------------------------------------------------------------------------

ERROR_CASES = [
    ("unknown-header", "Gatherer-Colour: blue\n", ["1: unknown header 'Gatherer-Colour'"]),
    (
        "header-twice",
        "Gatherer-Name: a\n\ngatherer-name: b\n",
        ["3: Gatherer-Name given twice (first at line 1)"],
    ),
    ("missing-value", "Gatherer-Host:\n", ["1: Gatherer-Host: missing value"]),
    ("bad-number", "Refresh-Rate: soon\n", ["1: Refresh-Rate: expected a number, got 'soon'"]),
    (
        "negative-int",
        "Max-Redirects: -1\n",
        ["1: Max-Redirects: expected a whole number, got '-1'"],
    ),
    ("zero-count", "Max-Connections: 0\n", ["1: Max-Connections: must be at least 1, got 0"]),
    ("zero-timeout", "Fetch-Timeout: 0\n", ["1: Fetch-Timeout: must be more than 0, got 0"]),
    (
        "port-range",
        "Gatherer-Port: 70000\n",
        ["1: Gatherer-Port: must be a port from 1 to 65535, got 70000"],
    ),
    ("bad-flag", "Full-Text: maybe\n", ["1: Full-Text: expected yes or no, got 'maybe'"]),
    (
        "bad-proxy",
        "HTTP-Proxy: https://cache:3128\n",
        ["1: HTTP-Proxy: expected host:port or http://host:port, got 'https://cache:3128'"],
    ),
    (
        "bad-https-via-proxy",
        "HTTPS-Via-Proxy: connect\n",
        ["1: HTTPS-Via-Proxy: expected absolute or tunnel, got 'connect'"],
    ),
    (
        "proxy-no-port",
        "HTTP-Proxy: cache\n",
        ["1: HTTP-Proxy: expected host:port or http://host:port, got 'cache'"],
    ),
    (
        "bad-ftp-login",
        "FTP-Login: host user pass word\n",
        ["1: FTP-Login: expected 'host user password', got '4 words'"],
    ),
    (
        "stoplist-missing",
        "Stoplist: nope.cf\n",
        ["1: Stoplist: TMP/nope.cf: cannot read stoplist: No such file or directory"],
    ),
    (
        "stoplist-bad-line",
        "Stoplist: badstop.cf\n",
        ["1: Stoplist: TMP/badstop.cf:2: expected one type name per line, got 'Image Audio'"],
    ),
    (
        "outside-section",
        "http://h/ Depth=1\n",
        [
            "1: expected a 'Name: value' header or a <RootNodes> or <LeafNodes> section, "
            "got 'http://h/ Depth=1'"
        ],
    ),
    ("unclosed", "<RootNodes>\nhttp://h/\n", ["1: <RootNodes> is never closed"]),
    ("unmatched-close", "</LeafNodes>\n", ["1: </LeafNodes> without <LeafNodes>"]),
    (
        "nested",
        "<RootNodes>\n<LeafNodes>\n</LeafNodes>\n",
        ["2: <LeafNodes> inside <RootNodes> opened at line 1"],
    ),
    (
        "mismatched-close",
        "<RootNodes>\n</LeafNodes>\n",
        ["2: </LeafNodes> closes <RootNodes> opened at line 1"],
    ),
    (
        "second-section",
        "<LeafNodes>\n</LeafNodes>\n<LeafNodes>\n</LeafNodes>\n",
        ["3: a second <LeafNodes> section (the first is at line 1)"],
    ),
    (
        "unknown-option",
        "<RootNodes>\nhttp://h/ Dept=1 Depth\n</RootNodes>\n",
        [
            "2: unknown option 'Dept=1' (use URL=, Host=, Access=, Delay=, Depth=, Enumeration= "
            "or Sitemaps=)",
            "2: unknown option 'Depth' (use URL=, Host=, Access=, Delay=, Depth=, Enumeration= "
            "or Sitemaps=)",
        ],
    ),
    (
        "option-twice",
        "<RootNodes>\nhttp://h/ Host=1 Site=2\n</RootNodes>\n",
        ["2: Site= repeats Host="],
    ),
    (
        "bad-option-values",
        "<RootNodes>\nhttp://h/ URL=0 Host=x Delay=-1 Depth=1.5 URL= Sitemaps=1\n</RootNodes>\n",
        [
            "2: URL= repeats URL=",
            "2: URL=: must be at least 1, got 0",
            "2: Host=: expected a whole number, got 'x'",
            "2: Delay=: expected a number, got '-1'",
            "2: Depth=: expected a whole number, got '1.5'",
            "2: Sitemaps=: expected yes or no, got '1'",
        ],
    ),
    (
        "empty-filter-name",
        "<RootNodes>\nhttp://h/ URL=5,\n</RootNodes>\n",
        ["2: URL=: missing value"],
    ),
    (
        "unknown-access",
        "<RootNodes>\nhttp://h/ Access=HTTP|Finger\n</RootNodes>\n",
        ["2: Access=: unknown access method 'Finger' (use HTTP, FTP, Gopher or FILE)"],
    ),
    (
        "news-unsupported",
        "<RootNodes>\nhttp://h/ Access=news\n</RootNodes>\n",
        [
            "2: Access=: access method news is not supported: NNTP servers no longer carry "
            "archives worth indexing and need per-server accounts"
        ],
    ),
    (
        "telnet-unsupported",
        "<RootNodes>\nhttp://h/ Access=Telnet\n</RootNodes>\n",
        [
            "2: Access=: access method Telnet is not supported: Telnet offers interactive "
            "sessions, nothing to fetch"
        ],
    ),
    (
        "bad-scheme",
        "<RootNodes>\nnews:comp.unix.voodoo\n</RootNodes>\n",
        ["2: URL scheme 'news' is not http, https, ftp, gopher or file: 'news:comp.unix.voodoo'"],
    ),
    ("relative-url", "<LeafNodes>\n/docs/x\n</LeafNodes>\n", ["2: not an absolute URL: '/docs/x'"]),
    ("no-host", "<LeafNodes>\nhttp:///x\n</LeafNodes>\n", ["2: URL has no host: 'http:///x'"]),
    (
        "bad-port",
        "<LeafNodes>\nhttp://h:99999/\n</LeafNodes>\n",
        ["2: bad host or port in URL 'http://h:99999/'"],
    ),
    (
        "leaf-extra-words",
        "<LeafNodes>\nhttp://h/ Depth=1 x\n</LeafNodes>\n",
        ["2: a LeafNode line holds one URL; unexpected 'Depth=1 x'"],
    ),
    (
        "missing-filter-file",
        "<RootNodes>\nhttp://h/ URL=5,NoSuchFilter\n</RootNodes>\n",
        ["2: URL=: TMP/NoSuchFilter: cannot read filter file: No such file or directory"],
    ),
    (
        "bad-filter-reported-once",
        "<RootNodes>\nhttp://h/ Host=2,BadFilter\nhttp://i/ URL=5,BadFilter\n</RootNodes>\n",
        ["2: Host=: TMP/BadFilter:2: expected 'Allow regex' or 'Deny regex'"],
    ),
    (
        "unbalanced-quotes",
        "<RootNodes>\n|gen.sh 'a b\n</RootNodes>\n",
        ['2: unbalanced quoting in command "gen.sh \'a b"'],
    ),
    ("empty-program", "<LeafNodes>\n|\n</LeafNodes>\n", ["2: expected a command, got []"]),
    (
        "options-only-program",
        "<RootNodes>\n| Depth=1\n</RootNodes>\n",
        ["2: expected a command, got []"],
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES]
)
def test_each_error_names_file_line_and_reason(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    (tmp_path / "badstop.cf").write_text("Image\nImage Audio\n")
    (tmp_path / "BadFilter").write_text("Allow .\nPermit x\n")
    path = tmp_path / "gatherer.cf"
    assert problems_of(tmp_path, text) == [
        f"{path}:{p}".replace("TMP", str(tmp_path)) for p in expected
    ]


def test_bad_regex_is_reported_at_the_filter_files_line(tmp_path: Path) -> None:
    (tmp_path / "F").write_text("Allow .\n\nDeny (unclosed\n")
    problems = problems_of(tmp_path, "<RootNodes>\nhttp://h/ URL=3,F\n</RootNodes>\n")
    assert len(problems) == 1
    prefix = f"{tmp_path / 'gatherer.cf'}:2: URL=: {tmp_path / 'F'}:3: bad regular expression"
    assert problems[0].startswith(f"{prefix} '(unclosed': ")


def test_all_problems_come_together_in_line_order(tmp_path: Path) -> None:
    text = (
        "Gatherer-Port: x\n"  # 1: checked after the syntax pass
        "Bogus: 1\n"  # 2: found by the syntax pass
        "<RootNodes>\n"
        "http://h/ Depth=x Foo=1\n"  # 4: one from each pass
        "</RootNodes>\n"
        "<RootNodes>\n"  # 6
        "</RootNodes>\n"
    )
    path = tmp_path / "gatherer.cf"
    assert problems_of(tmp_path, text) == [
        f"{path}:1: Gatherer-Port: expected a whole number, got 'x'",
        f"{path}:2: unknown header 'Bogus'",
        f"{path}:4: unknown option 'Foo=1' (use URL=, Host=, Access=, Delay=, Depth=, "
        "Enumeration= or Sitemaps=)",
        f"{path}:4: Depth=: expected a whole number, got 'x'",
        f"{path}:6: a second <RootNodes> section (the first is at line 3)",
    ]


def test_unreadable_config_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.cf"
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert caught.value.problems == [
        f"{path}: cannot read configuration: No such file or directory"
    ]


def test_config_error_message_joins_problems(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown header 'A'; .*unknown header 'B'"):
        load_text(tmp_path, "A: 1\nB: 2\n")


# -- TOML form ------------------------------------------------------------------------------------

HARVEST_FORM = """\
Gatherer-Name: Campus Gatherer
Gatherer-Host: g.example
Gatherer-Port: 8600
Top-Directory: top
Data-Directory: /var/db
HTTP-Proxy: cache.example:3128
Refresh-Rate: 3600
Access-Delay: 2
Max-Document-Size: 2048
Fetch-Timeout: 12.5
Stoplist: stop.cf
Full-Text: yes
Archive-Directory: warc
Archive-Rotate-Size: 16
Members-As-Records: no
FTP-Login: ftp.example.com me secret
FTP-Login: ftp2.example.com you other
<RootNodes>
http://www.example.com/ URL=100,F Host=3,/dev/null Access=HTTP|FTP Delay=5 Depth=2 Sitemaps=yes
ftp://ftp.example.com/pub/ Enumeration=enum.pl
|sites.pl --all Depth=1 URL=50
</RootNodes>
<LeafNodes>
http://www.example.com/faq.html
|leaves.sh "two words"
</LeafNodes>
"""

TOML_FORM = """\
gatherer_name = "Campus Gatherer"
gatherer_host = "g.example"
gatherer_port = 8600
top_directory = "top"
data_directory = "/var/db"
http_proxy = "http://cache.example:3128"
refresh_rate = 3600
access_delay = 2.0
max_document_size = 2048
fetch_timeout = 12.5
stoplist = "stop.cf"
full_text = true
archive_directory = "warc"
archive_rotate_size = 16
members_as_records = false
ftp_login = [
  { host = "ftp.example.com", user = "me", password = "secret" },
  { host = "ftp2.example.com", user = "you", password = "other" },
]
leaf_nodes = ["http://www.example.com/faq.html"]
leaf_programs = [["leaves.sh", "two words"]]

[[root_nodes]]
url = "http://www.example.com/"
url_max = 100
url_filter = "F"
host_max = 3
host_filter = "/dev/null"
access = ["HTTP", "FTP"]
delay = 5
depth = 2
sitemaps = true

[[root_nodes]]
url = "ftp://ftp.example.com/pub/"
enumeration = "enum.pl"

[[root_programs]]
command = ["sites.pl", "--all"]
depth = 1
url_max = 50
"""


def test_toml_form_equals_harvest_form(tmp_path: Path) -> None:
    (tmp_path / "top").mkdir()
    (tmp_path / "top" / "F").write_text(MY_FILTER)
    (tmp_path / "top" / "stop.cf").write_text("Image\n")
    harvest = load_text(tmp_path, HARVEST_FORM)
    toml = load_text(tmp_path, TOML_FORM, "gatherer.toml")
    assert toml == harvest
    assert harvest.root_nodes[0] == RootNode(
        "http://www.example.com/",
        url_max=100,
        url_filter=load_filter(tmp_path / "top" / "F"),
        host_max=3,
        host_filter=None,
        access=frozenset({"HTTP", "FTP"}),
        delay=5.0,
        depth=2,
        sitemaps=True,
    )
    # Leaves are in file order, whatever the form: URLs, then programs in TOML.
    assert toml.leaf_nodes == (
        LeafNode("http://www.example.com/faq.html"),
        LeafProgram(("leaves.sh", "two words")),
    )
    assert [n.source for n in toml.root_nodes] == [
        f"{tmp_path / 'gatherer.toml'}: root_nodes[0]",
        f"{tmp_path / 'gatherer.toml'}: root_nodes[1]",
        f"{tmp_path / 'gatherer.toml'}: root_programs[0]",
    ]


def test_toml_suffix_chooses_the_form_case_insensitively(tmp_path: Path) -> None:
    assert load_text(tmp_path, "gatherer_port = 1\n", "G.TOML").port == 1


def test_toml_enumeration_as_list_and_command_as_string(tmp_path: Path) -> None:
    text = (
        '[[root_nodes]]\nurl = "http://h/"\nenumeration = ["e.pl", "-v"]\n'
        "[[root_programs]]\ncommand = \"gen.sh 'a b'\"\n"
    )
    config = load_text(tmp_path, text, "g.toml")
    assert config.root_nodes == (
        RootNode("http://h/", enumeration=("e.pl", "-v")),
        RootProgram(("gen.sh", "a b"), RootNode("")),
    )


TOML_ERROR_CASES = [
    ("unknown-top-key", "gatherer_colour = 'blue'\n", ["gatherer_colour: unknown key"]),
    (
        "unknown-root-key",
        "[[root_nodes]]\nurl='http://a/'\n[[root_nodes]]\nurl='http://b/'\n"
        "[[root_nodes]]\nurl='http://c/'\ndepht = 2\n",
        ["root_nodes[2].depht: unknown key"],
    ),
    ("missing-url", "[[root_nodes]]\ndepth = 1\n", ["root_nodes[0]: missing key 'url'"]),
    (
        "missing-command",
        "[[root_programs]]\ndepth = 1\n",
        ["root_programs[0]: missing key 'command'"],
    ),
    (
        "string-for-int",
        "gatherer_port = '8500'\n",
        ["gatherer_port: expected a whole number, got '8500'"],
    ),
    (
        "bool-for-int",
        "max_connections = true\n",
        ["max_connections: expected a whole number, got True"],
    ),
    ("float-for-int", "max_redirects = 1.5\n", ["max_redirects: expected a whole number, got 1.5"]),
    ("negative-int", "unnest_max_depth = -1\n", ["unnest_max_depth: must be at least 0, got -1"]),
    ("nan", "fetch_timeout = nan\n", ["fetch_timeout: expected a number, got nan"]),
    ("string-for-flag", "full_text = 'yes'\n", ["full_text: expected yes or no, got 'yes'"]),
    (
        "string-for-sitemaps",
        "[[root_nodes]]\nurl = 'http://h/'\nsitemaps = 'yes'\n",
        ["root_nodes[0].sitemaps: expected yes or no, got 'yes'"],
    ),
    (
        "empty-string",
        "gatherer_name = ''\n",
        ["gatherer_name: expected a non-empty string, got ''"],
    ),
    (
        "access-not-list",
        "[[root_nodes]]\nurl = 'http://h/'\naccess = 'HTTP'\n",
        [
            "root_nodes[0].access: expected names joined by '|' (TOML: a list of strings), "
            "got 'HTTP'"
        ],
    ),
    (
        "bad-url",
        "[[root_nodes]]\nurl = 'gopher:/'\n",
        ["root_nodes[0].url: URL has no host: 'gopher:/'"],
    ),
    (
        "roots-not-tables",
        "root_nodes = ['http://h/']\n",
        ["root_nodes[0]: expected a table, got 'http://h/'"],
    ),
    (
        "leaves-not-array",
        "leaf_nodes = 'http://h/'\n",
        ["leaf_nodes: expected an array, got 'http://h/'"],
    ),
    (
        "leaf-not-string",
        "leaf_nodes = [1]\n",
        ["leaf_nodes[0]: expected a non-empty string, got 1"],
    ),
    (
        "login-keys",
        "[[ftp_login]]\nhost = 'h'\nuser = 'u'\npasswd = 'p'\n",
        ["ftp_login[0].passwd: unknown key", "ftp_login[0]: password must be a string"],
    ),
    (
        "stoplist-missing",
        "stoplist = 'none.cf'\n",
        ["stoplist: TMP/none.cf: cannot read stoplist: No such file or directory"],
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"), [c[1:] for c in TOML_ERROR_CASES], ids=[c[0] for c in TOML_ERROR_CASES]
)
def test_each_toml_error_names_its_key_path(tmp_path: Path, text: str, expected: list[str]) -> None:
    path = tmp_path / "g.toml"
    assert problems_of(tmp_path, text, "g.toml") == [
        f"{path}: {p}".replace("TMP", str(tmp_path)) for p in expected
    ]


def test_toml_syntax_error_is_a_config_error(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, "gatherer_port = = 1\n", "g.toml")
    assert len(problems) == 1
    assert problems[0].startswith(f"{tmp_path / 'g.toml'}: ")
    assert "line 1" in problems[0]


def test_toml_collects_every_problem(tmp_path: Path) -> None:
    text = "bogus = 1\ngatherer_port = 0\n[[root_nodes]]\nurl = 'x'\nfoo = 1\n"
    path = tmp_path / "g.toml"
    assert problems_of(tmp_path, text, "g.toml") == [
        f"{path}: bogus: unknown key",
        f"{path}: root_nodes[0].foo: unknown key",
        f"{path}: gatherer_port: must be a port from 1 to 65535, got 0",
        f"{path}: root_nodes[0].url: not an absolute URL: 'x'",
    ]


# -- derived values -------------------------------------------------------------------------------


def test_essence_options_come_from_the_configuration(tmp_path: Path) -> None:
    text = (
        "Full-Text: yes\nUnnest-Max-Size: 100\nUnnest-Max-Members: 7\nUnnest-Max-Depth: 1\n"
        "Members-As-Records: yes\n"
    )
    options = load_text(tmp_path, text).essence_options()
    assert options == EssenceOptions(
        stoplist=DEFAULT_STOPLIST,
        full_text=True,
        unnest_max_bytes=100,
        unnest_max_members=7,
        unnest_max_depth=1,
        members_as_records=True,
    )


def test_repr_never_shows_ftp_passwords(tmp_path: Path) -> None:
    config = load_text(
        tmp_path, "FTP-Login: h user hunter2\n<LeafNodes>\nhttp://h/\n</LeafNodes>\n"
    )
    assert "hunter2" not in repr(config)
    assert repr(config) == (
        f"GathererConfig('Harvest Gatherer', port=8500, top={str(tmp_path)!r}, 0 root, 1 leaf)"
    )


def test_docs_describe_every_header_in_both_forms() -> None:
    docs = DOCS.read_text()
    missing = [
        h.name for h in HEADERS if f"`{h.name}`" not in docs or f"`{h.toml_key}`" not in docs
    ]
    missing += [key for key in ROOT_OPTIONS if f"`{key}`" not in docs]
    assert missing == []


def test_docs_examples_load_and_agree(tmp_path: Path) -> None:
    blocks = re.findall(r"```(\w*)\n(.*?)```", DOCS.read_text(), re.DOTALL)
    harvest = next(text for lang, text in blocks if "<RootNodes>" in text)
    toml = next(text for lang, text in blocks if lang == "toml")
    (tmp_path / "campus").mkdir()
    (tmp_path / "campus" / "url-filter").write_text(MY_FILTER)
    from_harvest = load_text(tmp_path, harvest)
    assert load_text(tmp_path, toml, "gatherer.toml") == from_harvest
    assert (len(from_harvest.root_nodes), len(from_harvest.leaf_nodes)) == (5, 2)
