"""What to answer another cache's ICP query (RFC 2186 2, RFC 2187): pure, time passed in.

(A cache not allowed to ask gets DENIED, and a URL that is not an http URL ERR, before
anything is looked up.)

HIT only for an object that will stay fresh long enough for the querier to come and fetch
it (``HIT_MIN_TTL``): a HIT that is stale by the time the HTTP request arrives would cost the
querier a revalidation it chose us to avoid. A URL whose responses vary is a MISS: which
variant the querier's client needs cannot be told from the URL alone.
"""

from __future__ import annotations

from harvest_cache.hierarchy.icp import Opcode
from harvest_cache.http.cache_control import parse_cache_control
from harvest_cache.http.freshness import Heuristic
from harvest_cache.http.policy import Fresh, evaluate
from harvest_cache.http.stored import StoredHead
from harvest_cache.store.interface import StoredObject

HIT_MIN_TTL = 30.0
_NO_DIRECTIVES = parse_cache_control(())


def answer_opcode(
    found: StoredObject | None, *, fetching: bool, now: float, heuristic: Heuristic
) -> Opcode:
    """The reply to an allowed query for a valid URL, given what is stored under it (None:
    nothing, or a Vary marker): HIT for an object fresh for at least ``HIT_MIN_TTL`` more
    seconds, else MISS, or MISS_NOFETCH when we would rather not fetch misses for others
    now (``fetching`` false: overloaded)."""
    return hit_until(found, now, heuristic)[0] or (Opcode.MISS if fetching else Opcode.MISS_NOFETCH)


def hit_until(
    found: StoredObject | None, now: float, heuristic: Heuristic
) -> tuple[Opcode | None, float]:
    """(HIT, the time until which ``found`` stays one) or (None, infinity: it stays a miss
    for as long as it is what is stored)."""
    if found is not None:
        ttl = fresh_ttl(found.head, now, heuristic)
        if ttl is not None and ttl >= HIT_MIN_TTL:
            return Opcode.HIT, now + ttl - HIT_MIN_TTL
    return None, float("inf")


def fresh_for(head: StoredHead, seconds: float, now: float, heuristic: Heuristic) -> bool:
    """Whether a stored response may be given to another cache without validation now and
    for ``seconds`` more (what a peer is promised by a HIT or a digest entry)."""
    ttl = fresh_ttl(head, now, heuristic)
    return ttl is not None and ttl >= seconds


def fresh_ttl(head: StoredHead, now: float, heuristic: Heuristic) -> float | None:
    """How long a stored response stays fresh for any request; None if it is not now."""
    reuse = evaluate(head, _NO_DIRECTIVES, now, heuristic)
    return reuse.ttl if isinstance(reuse, Fresh) and reuse.reason == "fresh" else None
