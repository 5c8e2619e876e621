"""Configuration: every bad key reported with its name and reason; flags override the file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harvest_cache.cli import main, overrides, parser
from harvest_cache.config import Config, from_mapping, load, reference
from harvest_common.config import Address
from harvest_common.errors import ConfigError


def test_defaults_match_the_documented_ones() -> None:
    config = Config()
    assert config.server.listen == Address("127.0.0.1", 3128)
    assert config.cache.dir == Path("var/cache")
    assert config.access.connect_ports == ((443, 443),)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        from_mapping(
            {
                "server": {"listen": "nowhere", "colour": "blue"},
                "cache": {"memory_mb": -1},
                "bogus": {},
            },
            "test.toml",
        )
    problems = "\n".join(info.value.problems)
    assert len(info.value.problems) == 4
    assert "test.toml: server.listen: expected 'HOST:PORT'" in problems
    assert "unknown key server.colour" in problems
    assert "cache.memory_mb: must be between 0" in problems
    assert "unknown section [bogus]" in problems


@pytest.mark.parametrize(
    ("section", "key", "value", "reason"),
    [
        ("access", "allow", ["10.0.0.0/33"], "not an IP address or CIDR"),
        ("access", "safe_ports", ["90-80"], "outside 1-65535 or reversed"),
        ("access", "x_forwarded_for", "maybe", "must be one of on, off, delete"),
        ("dns", "nameservers", ["resolver.example"], "not an IP address"),
        ("server", "idle_timeout", "60", "expected a number"),
        ("server", "max_header_count", True, "expected an integer"),
        ("server", "name", "two words", "without spaces"),
        ("cache", "cache_query_urls", "yes", "expected true or false"),
        ("cache", "refresh_patterns", {"regex": "x"}, "expected a list of tables"),
        ("cache", "refresh_patterns", ["x"], "pattern 1: expected a table"),
        (
            "cache",
            "refresh_patterns",
            [{"regex": "(", "min_seconds": 0, "percent": 10, "max_seconds": 60}],
            "pattern 1: bad regex '('",
        ),
        (
            "cache",
            "refresh_patterns",
            [
                {"regex": "a", "min_seconds": 0, "percent": 10, "max_seconds": 60},
                {"regex": "b", "min": 0, "percent": 10, "max_seconds": 60},
            ],
            "pattern 2: unknown key min (known:",
        ),
        ("cache", "refresh_patterns", [{"regex": "a", "percent": 10}], "missing min_seconds"),
        (
            "cache",
            "refresh_patterns",
            [{"regex": "a", "min_seconds": 90, "percent": 10, "max_seconds": 60}],
            "min_seconds (90) exceeds max_seconds (60)",
        ),
        (
            "cache",
            "refresh_patterns",
            [{"regex": "a", "min_seconds": 0, "percent": -1, "max_seconds": 60}],
            "pattern 1: must be between 0 and 100000",
        ),
        (
            "cache",
            "refresh_patterns",
            [{"regex": "a", "ignore_case": 1, "min_seconds": 0, "percent": 1, "max_seconds": 6}],
            "pattern 1: expected true or false",
        ),
    ],
)
def test_bad_values_name_the_key_and_reason(
    section: str, key: str, value: object, reason: str
) -> None:
    with pytest.raises(ConfigError) as info:
        from_mapping({section: {key: value}})
    assert f"{section}.{key}" in str(info.value)
    assert reason in str(info.value)


def test_refresh_patterns_from_toml(tmp_path: Path) -> None:
    file = tmp_path / "harvest.toml"
    file.write_text(
        "[cache]\n"
        "cache_query_urls = false\n"
        "[[cache.refresh_patterns]]\n"
        'regex = "\\\\.JPG$"\n'
        "ignore_case = true\n"
        "min_seconds = 60\n"
        "percent = 50\n"
        "max_seconds = 3600\n"
        "[[cache.refresh_patterns]]\n"
        'regex = "/news/"\n'
        "min_seconds = 0\n"
        "percent = 0\n"
        "max_seconds = 0\n"
    )
    cache = load(file).cache
    assert cache.cache_query_urls is False
    first, second = cache.refresh_patterns
    assert first.regex.search("http://example.com/a.jpg")  # ignore_case
    assert (first.min_seconds, first.percent, first.max_seconds) == (60, 50, 3600)
    assert str(first) == "(?i)\\.JPG$ 60 50% 3600"
    assert not second.regex.search("http://example.com/NEWS/")
    assert str(second) == "/news/ 0 0% 0"


def test_min_ttl_above_max_ttl_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"dns\.min_ttl"):
        from_mapping({"dns": {"min_ttl": 100, "max_ttl": 10}})


def test_overrides_beat_the_file_and_are_checked_too(tmp_path: Path) -> None:
    path = tmp_path / "cache.toml"
    path.write_text('[server]\nlisten = "127.0.0.1:8000"\n[cache]\nmemory_mb = 8\n')
    config = load(path, {"server": {"listen": "127.0.0.1:9000"}})
    assert config.server.listen.port == 9000
    assert config.cache.memory_mb == 8
    with pytest.raises(ConfigError, match=r"server\.listen"):
        load(path, {"server": {"listen": "127.0.0.1:99999"}})


def test_unreadable_and_invalid_files_are_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[server\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load(bad)


def test_check_config_exits_2_with_reasons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cache.toml"
    path.write_text("[cache]\ndisk_mb = 'lots'\n")
    assert main(["--config", str(path), "--check-config"]) == 2
    assert "cache.disk_mb: expected an integer" in capsys.readouterr().err
    assert main(["--check-config", "--memory-mb", "32"]) == 0
    assert main(["--check-config", "--listen", "localhost"]) == 2


def test_configuration_doc_is_the_generated_reference() -> None:
    doc = Path(__file__).parent.parent / "docs" / "configuration.md"
    assert doc.read_text() == reference(), "regenerate: harvest-cache --config-reference"


def test_python_dash_m_runs_the_cli() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "harvest_cache", "--check-config"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "configuration OK" in out.stdout


def test_icp_port_flag_overrides_the_file() -> None:
    assert overrides(parser().parse_args(["--icp-port", "3130"])) == {"icp": {"port": 3130}}
    with pytest.raises(ConfigError, match=r"icp\.port: must be between 0 and 65535"):
        load(None, {"icp": {"port": 70000}})
