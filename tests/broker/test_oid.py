"""Object identity: the gatherer named by a record's Gatherer-* attributes, and oids."""

from __future__ import annotations

import hashlib

from broker.oid import gatherer_identity, oid
from harvest_common.soif import Record


def record(*attributes: tuple[str, bytes]) -> Record:
    return Record("FILE", "http://a.example/", (("Title", b"T"), *attributes))


def test_gatherer_identity_is_name_host_and_port() -> None:
    stamped = record(
        ("Gatherer-Name", b" Harvest Gatherer "),
        ("gatherer-host", b"g.example"),  # attribute names ignore case
        ("Gatherer-Port", b"8500\n"),
        ("Gatherer-Version", b"Harvest-2.0"),  # not part of the identity
    )
    assert gatherer_identity(stamped) == "Harvest Gatherer@g.example:8500"


def test_a_missing_part_is_empty_and_a_record_without_any_has_no_identity() -> None:
    assert gatherer_identity(record(("Gatherer-Host", b"g.example"))) == "@g.example:"
    assert gatherer_identity(record()) is None
    assert gatherer_identity(record(("Gatherer-Name", b"  "), ("Gatherer-Port", b""))) is None


def test_oid_is_the_first_16_bytes_of_sha256_over_gatherer_newline_url() -> None:
    expected = hashlib.sha256(b"G@g.example:8500\nhttp://a.example/").hexdigest()[:32]
    assert oid("G@g.example:8500", "http://a.example/") == expected
    assert len(expected) == 32


def test_oid_differs_by_gatherer_and_by_url_and_is_stable() -> None:
    ids = {
        oid("G@g.example:8500", "http://a.example/"),
        oid("G@g.example:8501", "http://a.example/"),
        oid("G@g.example:8500", "http://a.example/x"),
    }
    assert len(ids) == 3
    assert oid("é@h:1", "http://b.example/ü") == oid("é@h:1", "http://b.example/ü")
