"""harvest_common.replication.version: the total order of versions (stamp, then origin, then a
removal wins a tie), its canonical byte form, and its JSON form, refused whole when
malformed."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harvest_common.errors import ReplicatorError, WireError
from harvest_common.replication.version import STEP, Version

FAST = settings(max_examples=200, deadline=None)

stamps = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**53), 2**53).map(float)
versions = st.builds(Version, stamps, st.text(max_size=12), st.booleans())


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        # The stamp decides first, whatever the origin and deleted flag.
        (Version(1.0, "z", True), Version(2.0, "a", False)),
        (Version(1.0, "a"), Version(1.0 + STEP, "a")),
        (Version(-5.0, "m"), Version(0.0, "m")),
        # Equal stamps: the origin decides, whatever the deleted flag.
        (Version(7.0, "a", True), Version(7.0, "b", False)),
        (Version(7.0, "", False), Version(7.0, "a", False)),
        (Version(7.0, "member-1", True), Version(7.0, "member-2", True)),
        # Equal stamp and origin: a removal wins.
        (Version(7.0, "a", False), Version(7.0, "a", True)),
    ],
)
def test_the_order_is_stamp_then_origin_then_deleted(older: Version, newer: Version) -> None:
    assert older < newer
    assert newer > older
    assert older != newer
    assert max(older, newer) is newer
    assert sorted([newer, older]) == [older, newer]


def test_a_change_stamped_one_step_above_wins_over_any_origin() -> None:
    held = Version(1_700_000_000.25, "zzz", True)
    change = Version(held.stamp + STEP, "", False)
    assert change.stamp > held.stamp
    assert change > held


def test_sorting_a_table_of_versions_is_the_lexicographic_order() -> None:
    table = [
        Version(stamp, origin, deleted)
        for stamp, origin, deleted in itertools.product(
            (0.0, 1.0, 1.5), ("", "a", "b"), (False, True)
        )
    ]
    shuffled = table[::-1]
    assert sorted(shuffled) == sorted(table, key=lambda v: (v.stamp, v.origin, v.deleted))
    assert sorted(shuffled) == table  # product() already yields them in that order
    assert len(set(table)) == len(table)


@FAST
@given(versions, versions)
def test_the_order_is_total_and_matches_the_fields(a: Version, b: Version) -> None:
    key_a, key_b = (a.stamp, a.origin, a.deleted), (b.stamp, b.origin, b.deleted)
    assert (a < b) == (key_a < key_b)
    assert (a == b) == (key_a == key_b)
    assert [a < b, a == b, a > b].count(True) == 1


@FAST
@given(versions, versions)
def test_encode_is_equal_exactly_for_equal_versions(a: Version, b: Version) -> None:
    assert (a.encode() == b.encode()) == (a == b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (Version(1.0, "a"), Version(1.0, "a", True)),
        (Version(1.0, "a"), Version(1.0 + STEP, "a")),
        (Version(1.0, "a"), Version(1.0, "b")),
        (Version(0.1 + 0.2, "a"), Version(0.3, "a")),  # differ in the last bit only
        (Version(1.0, "a\x001"), Version(1.0, "a", True)),  # no ambiguity through the separator
        (Version(1.0, "é"), Version(1.0, "e")),
    ],
)
def test_encode_tells_apart_versions_that_differ(a: Version, b: Version) -> None:
    assert a != b
    assert a.encode() != b.encode()


def test_encode_is_stable_for_equal_versions() -> None:
    assert Version(2.5, "m").encode() == Version(2.5, "m", False).encode()
    assert Version(2.5, "m").encode() == b"2.5\x00m\x000"
    assert Version(2.5, "m", True).encode() == b"2.5\x00m\x001"
    # Equal stamps of another type or sign (SQLite reads both back as the same REAL).
    assert Version(2, "m") == Version(2.0, "m")
    assert Version(2, "m").encode() == Version(2.0, "m").encode()
    assert Version(-0.0, "m") == Version(0.0, "m")
    assert Version(-0.0, "m").encode() == Version(0.0, "m").encode()
    assert isinstance(Version(2, "m").stamp, float)


@FAST
@given(versions)
def test_json_round_trip(version: Version) -> None:
    text = json.dumps(version.to_json())
    back = Version.from_json(json.loads(text))
    assert back == version
    assert back.encode() == version.encode()


def test_json_accepts_an_integer_stamp_as_a_float() -> None:
    back = Version.from_json([5, "m", True])
    assert back == Version(5.0, "m", True)
    assert isinstance(back.stamp, float)


@pytest.mark.parametrize(
    "value",
    [
        None,
        "1.0",
        {"stamp": 1.0, "origin": "m", "deleted": False},
        (1.0, "m", False),  # a tuple is not what JSON decodes to
        [],
        [1.0, "m"],
        [1.0, "m", False, 0],
        [True, "m", False],
        [False, "m", False],
        ["1.0", "m", False],
        [None, "m", False],
        [math.nan, "m", False],
        [math.inf, "m", False],
        [-math.inf, "m", False],
        [1.0, 5, False],
        [1.0, None, False],
        [1.0, ["m"], False],
        [1.0, "m", 0],
        [1.0, "m", 1],
        [1.0, "m", "false"],
        [1.0, "m", None],
        [10**400, "m", False],  # an integer no float can hold
        [-(10**400), "m", False],
    ],
)
def test_malformed_json_is_a_wire_error(value: object) -> None:
    with pytest.raises(WireError):
        Version.from_json(value)


@pytest.mark.parametrize(
    "text", ['[NaN, "m", false]', '[Infinity, "m", true]', '[1e999, "m", false]']
)
def test_non_finite_stamps_from_json_text_are_refused(text: str) -> None:
    with pytest.raises(WireError):
        Version.from_json(json.loads(text))


@pytest.mark.parametrize("stamp", [math.nan, math.inf, -math.inf])
def test_a_version_cannot_be_made_with_a_non_finite_stamp(stamp: float) -> None:
    with pytest.raises(WireError) as raised:
        Version(stamp, "m")
    assert isinstance(raised.value, ReplicatorError)
