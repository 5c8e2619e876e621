"""What the cache answers another cache's ICP query, from what it holds and the time."""

from __future__ import annotations

import pytest

from harvest_cache.hierarchy.icp import Opcode
from harvest_cache.hierarchy.responder import HIT_MIN_TTL, answer_opcode
from harvest_cache.http.freshness import Heuristic
from harvest_cache.http.stored import StoredHead
from harvest_cache.store.interface import StoredObject

T = 1_700_000_000.0
HEURISTIC = Heuristic(10, 86400)


def stored(cache_control: str) -> StoredObject:
    head = StoredHead("http://x/", 200, "OK", (("Cache-Control", cache_control),), T, T, 1)
    return StoredObject(head, b"x", "memory")


@pytest.mark.parametrize(
    ("cache_control", "age", "expected"),
    [
        ("max-age=600", 0, Opcode.HIT),
        ("max-age=600", 600 - HIT_MIN_TTL, Opcode.HIT),  # exactly 30 s to go
        ("max-age=600", 600 - HIT_MIN_TTL + 1, Opcode.MISS),  # 29 s: not worth the trip
        ("max-age=600", 700, Opcode.MISS),  # stale
        ("max-age=600, no-cache", 0, Opcode.MISS),  # must be validated first
    ],
)
def test_hit_only_when_fresh_for_30_seconds_more(
    cache_control: str, age: float, expected: Opcode
) -> None:
    found = stored(cache_control)
    assert answer_opcode(found, fetching=True, now=T + age, heuristic=HEURISTIC) is expected


def test_nothing_stored_is_a_miss_or_miss_nofetch_when_not_fetching() -> None:
    assert answer_opcode(None, fetching=True, now=T, heuristic=HEURISTIC) is Opcode.MISS
    assert answer_opcode(None, fetching=False, now=T, heuristic=HEURISTIC) is Opcode.MISS_NOFETCH


def test_a_hit_stays_a_hit_when_not_fetching() -> None:
    """(MISS_NOFETCH is about misses: hits are still served, RFC 2186 2.)"""
    found = stored("max-age=600")
    assert answer_opcode(found, fetching=False, now=T, heuristic=HEURISTIC) is Opcode.HIT
