"""Who may talk to a replication group: every request between members is signed with the
group's shared secret, and so is every answer. Pure: bytes and ``now`` in, headers out.

A request's signature is an HMAC-SHA256 over its method, path and query, the sender's member
id, the time it was made and the SHA-256 of its body; it is refused when more than ``SKEW``
seconds old or in the future (a captured request cannot be replayed later). An answer's
signature covers the request's signature and the answer's body, so an answer cannot be
replayed for another request, and one altered on the way (a corrupted transfer) is refused
before anything of it is applied.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Mapping
from typing import Final

from replicator.errors import AuthError

MEMBER: Final = "X-Harvest-Member"
TIME: Final = "X-Harvest-Time"
SIGNATURE: Final = "X-Harvest-Signature"
SKEW: Final = 300.0


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


def sign_request(
    secret: bytes, member: str, method: str, path_qs: str, body: bytes, now: float
) -> dict[str, str]:
    """The headers that authenticate a request from ``member``."""
    when = f"{now:.3f}"
    digest = hashlib.sha256(body).digest()
    signature = _mac(secret, "request", method.upper(), path_qs, member, when, digest)
    return {MEMBER: member, TIME: when, SIGNATURE: signature}


def check_request(
    secret: bytes,
    headers: Mapping[str, str],
    method: str,
    path_qs: str,
    body: bytes,
    now: float,
) -> str:
    """The member id of a correctly signed, fresh request; AuthError otherwise."""
    member, when, given = headers.get(MEMBER), headers.get(TIME), headers.get(SIGNATURE)
    if member is None or when is None or given is None:
        raise AuthError("the request is not signed")
    try:
        made = float(when)
    except ValueError:
        raise AuthError(f"bad {TIME}: {when!r}") from None
    if not math.isfinite(made) or abs(now - made) > SKEW:
        raise AuthError(f"the request's time is more than {SKEW:g} s from ours")
    digest = hashlib.sha256(body).digest()
    expected = _mac(secret, "request", method.upper(), path_qs, member, when, digest)
    if not _same(expected, given):
        raise AuthError("bad signature: not a member of this group")
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
