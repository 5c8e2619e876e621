"""Who may talk to a replication group: every request between members is signed with the
group's shared secret, and so is every answer. Pure: bytes and ``now`` in, headers out.

A request's signature is an HMAC-SHA256 over its method, path and query, the sender's member
id, the time it was made, its id (``NONCE``: 128 random bits the sender draws) and the SHA-256
of its body; it is refused when more than ``SKEW`` seconds old or in the future (a captured
request cannot be replayed later), and when its id was seen before (it cannot be replayed
sooner either). ``SeenRequests`` remembers the ids of the requests accepted until their time
leaves the window, and at most so many: when full, it refuses the next requests
(``ReplayMemoryFull``) rather than forget an id whose request could then be replayed. An
answer's signature covers the request's signature and the answer's body, so an answer cannot
be replayed for another request, and one altered on the way (a corrupted transfer) is refused
before anything of it is applied.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import math
import re
from collections.abc import Mapping
from typing import Final

from replicator.errors import AuthError, ReplayError, ReplayMemoryFull

MEMBER: Final = "X-Harvest-Member"
TIME: Final = "X-Harvest-Time"
NONCE: Final = "X-Harvest-Nonce"
SIGNATURE: Final = "X-Harvest-Signature"
SKEW: Final = 300.0
REMEMBERED: Final = 100_000  # request ids SeenRequests holds by default
_NONCE = re.compile(r"[0-9a-f]{32}")


def _bytes(text: str) -> bytes:
    # Header values arrive decoded with surrogate escapes for bytes that are not UTF-8: such a
    # value must be refused as unsigned, not crash the check.
    return text.encode("utf-8", "surrogatepass")


def _same(expected: str, given: str) -> bool:
    # compare_digest refuses (TypeError) strings with non-ASCII characters: compare bytes.
    return hmac.compare_digest(expected.encode(), _bytes(given))


def _mac(secret: bytes, *parts: str | bytes) -> str:
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    for part in parts:
        data = _bytes(part) if isinstance(part, str) else part
        mac.update(len(data).to_bytes(8, "big"))
        mac.update(data)
    return mac.hexdigest()


class SeenRequests:
    """The ids of the requests accepted whose time is still within the window, at most
    ``capacity`` of them (bounded memory; each is forgotten once its request would be refused
    as too old anyway). Pure: ``now`` is passed in."""

    def __init__(self, capacity: int = REMEMBERED) -> None:
        self.capacity = capacity
        self._ids: set[str] = set()
        self._expiries: list[tuple[float, str]] = []  # a heap: the first to expire first

    def __len__(self) -> int:
        return len(self._ids)

    def __repr__(self) -> str:
        return f"SeenRequests({len(self)} of {self.capacity})"

    def remember(self, nonce: str, made: float, now: float) -> None:
        """Note the id of a request made at ``made``; ReplayError if it was seen before,
        ReplayMemoryFull if no more ids fit until older ones expire."""
        expiries = self._expiries
        while expiries and expiries[0][0] < now:
            self._ids.discard(heapq.heappop(expiries)[1])
        if nonce in self._ids:
            raise ReplayError("this request was received before: a replay")
        if len(self._ids) >= self.capacity:
            retry = max(0.0, expiries[0][0] - now)
            raise ReplayMemoryFull(
                f"{self.capacity} requests within {SKEW:g} s are remembered already; "
                f"more are refused for {retry:.0f} s",
                retry,
            )
        self._ids.add(nonce)
        # Until it would be refused as too old: from then on the time check refuses it.
        heapq.heappush(expiries, (made + SKEW, nonce))


def sign_request(
    secret: bytes, member: str, method: str, path_qs: str, body: bytes, now: float, nonce: str
) -> dict[str, str]:
    """The headers that authenticate a request from ``member``; ``nonce``: 32 hex digits
    drawn at random for this request (``secrets.token_hex(16)``)."""
    when = f"{now:.3f}"
    digest = hashlib.sha256(body).digest()
    signature = _mac(secret, "request", method.upper(), path_qs, member, when, nonce, digest)
    return {MEMBER: member, TIME: when, NONCE: nonce, SIGNATURE: signature}


def check_request(
    secret: bytes,
    headers: Mapping[str, str],
    method: str,
    path_qs: str,
    body: bytes,
    now: float,
    seen: SeenRequests,
) -> str:
    """The member id of a correctly signed, fresh request not ``seen`` before, whose id is
    remembered there now; AuthError (ReplayError for a replay) or ReplayMemoryFull otherwise.
    """
    member, when, given = headers.get(MEMBER), headers.get(TIME), headers.get(SIGNATURE)
    nonce = headers.get(NONCE)
    if member is None or when is None or nonce is None or given is None:
        raise AuthError("the request is not signed")
    try:
        made = float(when)
    except ValueError:
        raise AuthError(f"bad {TIME}: {when!r}") from None
    if not math.isfinite(made) or abs(now - made) > SKEW:
        raise AuthError(f"the request's time is more than {SKEW:g} s from ours")
    if not _NONCE.fullmatch(nonce):
        raise AuthError(f"bad {NONCE}: 32 hex digits, not {nonce[:40]!r}")
    digest = hashlib.sha256(body).digest()
    expected = _mac(secret, "request", method.upper(), path_qs, member, when, nonce, digest)
    if not _same(expected, given):
        raise AuthError("bad signature: not a member of this group")
    # Only now: ids of requests that are not the group's take no room.
    seen.remember(nonce, made, now)
    return member


def sign_answer(secret: bytes, request_signature: str, body: bytes) -> str:
    """The signature of the answer ``body`` to the request signed ``request_signature``."""
    return _mac(secret, "answer", request_signature, hashlib.sha256(body).digest())


def check_answer(secret: bytes, request_signature: str, body: bytes, given: str | None) -> None:
    """AuthError unless ``given`` signs ``body`` as the answer to that request."""
    if given is None:
        raise AuthError("the answer is not signed")
    if not _same(sign_answer(secret, request_signature, body), given):
        raise AuthError("the answer's signature does not match: altered or forged")
