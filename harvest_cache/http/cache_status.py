"""The Cache-Status response field (RFC 9211): what this cache did with a request.

One list member per cache, ours appended after any from caches nearer the origin, e.g.::

    harvest; hit; ttl=53
    harvest; fwd=uri-miss; fwd-status=200; stored
    harvest; fwd=stale; fwd-status=304; ttl=60
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

# RFC 9211 2.2: why the request went forward.
FWD_REASONS = frozenset(
    {"bypass", "method", "uri-miss", "vary-miss", "miss", "request", "stale", "partial"}
)

_SF_TOKEN = re.compile(r"[A-Za-z*][!#$%&'*+\-.^_`|~0-9A-Za-z:/]*")
_SF_INTEGER_MAX = 999_999_999_999_999  # RFC 8941 3.3.1


def cache_status(
    name: str,
    *,
    hit: bool,
    fwd: str | None = None,
    fwd_status: int | None = None,
    stored: bool = False,
    collapsed: bool = False,
    ttl: float | None = None,
    detail: str | None = None,
    key: str | None = None,
) -> str:
    """Our Cache-Status member. ``hit`` and ``fwd`` exclude each other: a hit was not
    forwarded (RFC 9211 2.1, 2.2). ``ttl`` is rounded down, so a stale response shows a
    negative one; ``collapsed`` means the request joined another's forward request. ``key``
    (the cache key used, RFC 9211 2.7) is left out unless it is printable ASCII."""
    if ttl is not None:
        ttl = _whole(ttl)
    if key is not None and not (key.isascii() and key.isprintable()):
        key = None  # a String must be printable ASCII (RFC 8941 3.3.3): left out
    return _member(name, hit, fwd, fwd_status, stored, collapsed, ttl, detail, key)


def ttl_parts(name: str, *, fwd: str, fwd_status: int, key: str | None = None) -> tuple[str, str]:
    """The text of a forwarded member before and after its ttl value, for answers repeated
    with only the ttl new: ``with_ttl`` then makes what ``cache_status`` would."""
    zero = cache_status(name, hit=False, fwd=fwd, fwd_status=fwd_status, ttl=0, key=key)
    one = cache_status(name, hit=False, fwd=fwd, fwd_status=fwd_status, ttl=1, key=key)
    at = next(i for i, (a, b) in enumerate(zip(zero, one, strict=True)) if a != b)
    return zero[:at], zero[at + 1 :]


def with_ttl(parts: tuple[str, str], ttl: float) -> str:
    """The member of ``ttl_parts`` with ``ttl``, rounded down as ``cache_status`` does."""
    return parts[0] + str(_whole(ttl)) + parts[1]


def _whole(ttl: float) -> int:
    """``ttl`` rounded down into a Structured Field Integer's range (RFC 8941 3.3.1); with
    comparisons, as ``max`` and ``min`` cost several times more on every answer."""
    whole = math.floor(ttl)
    if whole > _SF_INTEGER_MAX:
        return _SF_INTEGER_MAX
    if whole < -_SF_INTEGER_MAX:
        return -_SF_INTEGER_MAX
    return whole


# Answers repeat endlessly (a miss's member differs only by status), so each is made once.
@lru_cache(maxsize=1024)
def _member(
    name: str,
    hit: bool,
    fwd: str | None,
    fwd_status: int | None,
    stored: bool,
    collapsed: bool,
    ttl: int | None,
    detail: str | None,
    key: str | None = None,
) -> str:
    if hit and fwd is not None:
        raise ValueError("a Cache-Status hit was not forwarded: give hit or fwd, not both")
    if fwd is not None and fwd not in FWD_REASONS:
        raise ValueError(f"unknown Cache-Status fwd reason {fwd!r}")
    params = [_item(name)]
    if hit:
        params.append("hit")
    if fwd is not None:
        params.append(f"fwd={fwd}")
    if fwd_status is not None:
        params.append(f"fwd-status={fwd_status}")
    if stored:
        params.append("stored")
    if collapsed:
        params.append("collapsed")
    if ttl is not None:
        params.append(f"ttl={ttl}")
    if key is not None:
        params.append(f"key={string_item(key)}")
    if detail is not None:
        params.append(f"detail={_item(detail)}")
    return "; ".join(params)


def _item(value: str) -> str:
    """A Structured Field token if ``value`` is one, else a String (RFC 8941 3.3.3, 3.3.4)."""
    if _SF_TOKEN.fullmatch(value):
        return value
    return string_item(value)


def string_item(value: str) -> str:
    """``value`` as a Structured Field String (RFC 8941 3.3.3)."""
    if not value.isascii() or not value.isprintable():
        raise ValueError(f"Cache-Status text must be printable ASCII: {value!r}")
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'
