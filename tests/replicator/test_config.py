"""The replicator's configuration: defaults, required keys, every problem reported by name and
all at once, cross-key checks, the reference and loading a TOML file."""

from __future__ import annotations

import socket
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from harvest_common.config import Address
from harvest_common.errors import ReplicatorError
from replicator.config import (
    MIN_SECRET,
    SECTIONS,
    Config,
    GroupConfig,
    from_mapping,
    load,
    reference,
)
from replicator.errors import ConfigError

SECRET = "s" * MIN_SECRET


def _raw(**sections: Any) -> dict[str, Any]:
    """A minimal valid configuration with ``sections`` merged in (``groups`` replaced)."""
    raw: dict[str, Any] = {"replicator": {"secret": SECRET, "broker_token": "token"}}
    for name, value in sections.items():
        if isinstance(value, dict) and isinstance(raw.get(name), dict):
            raw[name] = {**raw[name], **value}
        else:
            raw[name] = value
    return raw


def _problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        from_mapping(raw, "test.toml")
    assert isinstance(raised.value, ReplicatorError)
    assert raised.value.problems
    assert all(problem.startswith("test.toml: ") for problem in raised.value.problems)
    return raised.value.problems


# Defaults and required keys ----------------------------------------------------------------


def test_defaults() -> None:
    config = from_mapping(_raw())
    assert config.replicator.secret == SECRET
    assert config.replicator.broker_token == "token"
    assert config.replicator.listen == Address("127.0.0.1", 8502)
    assert config.replicator.broker == "http://127.0.0.1:8501"
    assert config.replicator.advertise is None
    assert config.replicator.public_url is None
    assert config.replicator.routes == ()
    assert config.replicator.data_dir == Path("var/replicator")
    assert config.timing.probe_interval == 1.0
    assert config.timing.probe_timeout == 0.5
    assert config.timing.measure_bytes == 65536
    assert config.topology.k == 2
    assert config.topology.min_degree == 2
    assert config.topology.max_degree == 4
    assert config.topology.change_threshold == 0.25
    assert config.groups == ()


def test_values_are_read() -> None:
    config = from_mapping(
        _raw(
            replicator={
                "id": "east-1",
                "listen": "0.0.0.0:9000",
                "advertise": "east.example:9000",
                "broker": "https://broker.example/harvest/",
                "public_url": "https://search.example",
                "data_dir": "/srv/replicator",
            },
            timing={"probe_interval": 2, "measure_bytes": 4096},
            topology={"k": 1, "min_degree": 1, "max_degree": 3, "diameter_weight": 0},
            groups=[
                {"collection": "hsr", "seeds": ["west.example:9000", "[::1]:9001"]},
                {"collection": "docs"},
            ],
        )
    )
    assert config.member == "east-1"
    assert config.replicator.advertise == Address("east.example", 9000)
    assert config.replicator.broker == "https://broker.example/harvest"
    assert config.replicator.data_dir == Path("/srv/replicator")
    assert config.timing.probe_interval == 2.0
    assert isinstance(config.timing.probe_interval, float)
    assert config.timing.measure_bytes == 4096
    assert config.topology.max_degree == 3
    assert config.groups == (
        GroupConfig("hsr", (Address("west.example", 9000), Address("::1", 9001))),
        GroupConfig("docs", ()),
    )


def test_the_member_defaults_to_host_name_and_listen_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "box.example")
    assert from_mapping(_raw()).member == "box.example:8502"
    config = from_mapping(_raw(replicator={"listen": "127.0.0.1:9100"}))
    assert config.member == "box.example:9100"
    assert from_mapping(_raw(replicator={"id": "mine"})).member == "mine"


@pytest.mark.parametrize("key", ["secret", "broker_token"])
def test_a_required_key_is_reported(key: str) -> None:
    raw = _raw()
    del raw["replicator"][key]
    assert _problems(raw) == [f"test.toml: replicator.{key}: required"]


def test_an_empty_file_reports_both_required_keys() -> None:
    problems = _problems({})
    assert problems == [
        "test.toml: replicator.secret: required",
        "test.toml: replicator.broker_token: required",
    ]


def test_a_group_needs_its_collection() -> None:
    problems = _problems(_raw(groups=[{"collection": "hsr"}, {"seeds": ["a:1"]}]))
    assert problems == ["test.toml: groups[1].collection: required"]


@pytest.mark.parametrize("short", ["", "x", "s" * (MIN_SECRET - 1)])
def test_a_short_secret_is_refused(short: str) -> None:
    problems = _problems(_raw(replicator={"secret": short}))
    assert len(problems) == 1
    assert problems[0].startswith("test.toml: replicator.secret: ")


# Unknown and bad keys ----------------------------------------------------------------------


def test_every_problem_is_reported_at_once_with_its_name() -> None:
    problems = _problems(
        _raw(
            replicator={"colour": "blue", "listen": "nowhere", "broker": "ftp://x"},
            timing={"probe_interval": -1, "nope": 1},
            topology={"k": "two"},
            bogus={"a": 1},
            groups=[{"collection": "bad name!", "seeds": "a:1", "extra": True}],
        )
    )
    text = "\n".join(problems)
    for expected in [
        "unknown key replicator.colour",
        "replicator.listen: expected 'HOST:PORT'",
        "replicator.broker: expected an http:// or https:// URL",
        "timing.probe_interval: must be between",
        "unknown key timing.nope",
        "topology.k: expected an integer",
        "unknown section [bogus]",
        "groups[0].collection: expected letters",
        "groups[0].seeds: expected a list",
        "unknown key groups[0].extra",
    ]:
        assert expected in text
    assert len(problems) == 10


def test_a_section_that_is_not_a_table_is_reported() -> None:
    problems = _problems(_raw(timing=5))
    assert problems == ["test.toml: [timing] must be a table"]


def test_a_replicator_section_that_is_not_a_table_still_reports_required_keys() -> None:
    problems = _problems({"replicator": "yes"})
    assert "test.toml: [replicator] must be a table" in problems
    assert "test.toml: replicator.secret: required" in problems


@pytest.mark.parametrize("groups", [{"collection": "hsr"}, ["hsr"], "hsr"])
def test_groups_must_be_an_array_of_tables(groups: object) -> None:
    assert _problems(_raw(groups=groups)) == [
        "test.toml: groups must be an array of tables ([[groups]])"
    ]


def test_a_collection_replicated_twice_is_reported() -> None:
    problems = _problems(
        _raw(groups=[{"collection": "hsr"}, {"collection": "docs"}, {"collection": "hsr"}])
    )
    assert problems == ["test.toml: groups: collection 'hsr' used twice"]


@pytest.mark.parametrize("member", ["-starts-with-dash", "has space", "x" * 129, "ünï"])
def test_a_bad_member_id_is_refused(member: str) -> None:
    problems = _problems(_raw(replicator={"id": member}))
    assert len(problems) == 1
    assert "replicator.id: expected letters" in problems[0]


# Routes ------------------------------------------------------------------------------------


def test_routes_are_read_as_sorted_pairs() -> None:
    config = from_mapping(
        _raw(replicator={"routes": {"west-2": "10.0.0.2:8502", "east-1": "[fd00::1]:9000"}})
    )
    assert config.replicator.routes == (
        ("east-1", Address("fd00::1", 9000)),
        ("west-2", Address("10.0.0.2", 8502)),
    )


@pytest.mark.parametrize(
    ("routes", "reason"),
    [
        (["west-2=10.0.0.2:8502"], "expected a table"),
        ({"west-2": "10.0.0.2"}, "expected 'HOST:PORT'"),
        ({"west-2": 8502}, "expected 'HOST:PORT'"),
        ({"bad id": "10.0.0.2:8502"}, "expected letters"),
        ({"": "10.0.0.2:8502"}, "member id"),
    ],
)
def test_bad_routes_are_refused(routes: object, reason: str) -> None:
    problems = _problems(_raw(replicator={"routes": routes}))
    assert len(problems) == 1
    assert problems[0].startswith("test.toml: replicator.routes: ")
    assert reason in problems[0]


# Consistency -------------------------------------------------------------------------------


def test_min_degree_above_max_degree_is_refused() -> None:
    problems = _problems(_raw(topology={"k": 1, "min_degree": 5, "max_degree": 4}))
    assert problems == ["test.toml: topology.min_degree is above topology.max_degree"]


def test_k_above_max_degree_is_refused() -> None:
    problems = _problems(_raw(topology={"k": 3, "min_degree": 2, "max_degree": 2}))
    assert problems == ["test.toml: topology.k is above topology.max_degree"]


@pytest.mark.parametrize(("timeout", "interval"), [(1.0, 1.0), (2.0, 1.0)])
def test_the_probe_timeout_must_be_below_the_probe_interval(
    timeout: float, interval: float
) -> None:
    problems = _problems(_raw(timing={"probe_timeout": timeout, "probe_interval": interval}))
    assert problems == ["test.toml: timing.probe_timeout must be below timing.probe_interval"]


def test_consistency_problems_are_reported_together() -> None:
    problems = _problems(
        _raw(
            topology={"k": 5, "min_degree": 6, "max_degree": 4},
            timing={"probe_timeout": 3.0, "probe_interval": 2.0},
        )
    )
    assert len(problems) == 3


def test_a_valid_edge_of_the_consistency_checks_is_accepted() -> None:
    config = from_mapping(
        _raw(
            topology={"k": 3, "min_degree": 3, "max_degree": 3},
            timing={"probe_timeout": 0.99, "probe_interval": 1.0},
        )
    )
    assert config.topology.k == config.topology.max_degree == 3


# Reference and files -----------------------------------------------------------------------


def test_the_reference_documents_every_key_of_every_section() -> None:
    text = reference()
    defaults = Config()
    for name, cls in SECTIONS.items():
        assert f"## [{name}]" in text
        for f in fields(cls):
            assert f"| `{f.name}` |" in text
        assert cls is type(getattr(defaults, name))
    assert "## [[groups]]" in text
    for f in fields(GroupConfig):
        assert f"| `{f.name}` |" in text
    documented = [line for line in text.splitlines() if line.startswith("| `")]
    total = sum(len(fields(cls)) for cls in SECTIONS.values()) + len(fields(GroupConfig))
    assert len(documented) == total


def test_load_reads_a_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "replicator.toml"
    path.write_text(
        f"""
[replicator]
id = "m1"
listen = "127.0.0.1:9502"
secret = "{SECRET}"
broker_token = "tok"
routes = {{ m2 = "127.0.0.1:9503" }}

[timing]
measure_interval = 5.5

[topology]
seed = 7

[[groups]]
collection = "hsr"
seeds = ["127.0.0.1:9503"]

[[groups]]
collection = "docs"
""",
        encoding="utf-8",
    )
    config = load(path)
    assert config.member == "m1"
    assert config.replicator.routes == (("m2", Address("127.0.0.1", 9503)),)
    assert config.timing.measure_interval == 5.5
    assert config.topology.seed == 7
    assert [g.collection for g in config.groups] == ["hsr", "docs"]
    assert config.groups[0].seeds == (Address("127.0.0.1", 9503),)


def test_load_names_the_file_in_its_problems(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[replicator]\nsecret = "short"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load(path)
    assert all(problem.startswith(f"{path}: ") for problem in raised.value.problems)
    assert len(raised.value.problems) == 2  # the short secret, the missing broker_token


def test_load_of_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "absent.toml")


def test_load_of_a_file_that_is_not_toml_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[replicator\nsecret = \n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load(path)
