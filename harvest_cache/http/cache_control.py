"""The Cache-Control field (RFC 9111 5.2), request and response directives alike.

Choices where the RFC leaves room (RFC 9111 1.2.2, 4.2.1), all in the direction of reusing
less rather than more:

- A delta-seconds argument that is not a run of ASCII digits (negative, fractional, empty or
  missing) counts as 0, which makes a response stale and a request demand validation; the
  directive's name is recorded in ``invalid``. Values beyond 2**31 are capped at MAX_DELTA.
- A directive given more than once with different values keeps the most restrictive value:
  the smallest, except for ``min-fresh``, where the largest asks the most.
- ``no-cache`` and ``private`` without an argument apply to the whole response; with a field
  list they apply to those fields only (``no_cache_fields``, ``private_fields``). An empty
  field list is read as the unqualified form. Unqualified wins when both appear.
- Directives that take no argument still apply when given one, and are recorded as invalid.
- Unknown extensions are ignored (RFC 9111 5.2.3).

Parsing is memoised on the exact field lines: the same few values recur on every request.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any

from harvest_cache.http.headers import split_list

MAX_DELTA = 2**31
"""The delta-seconds ceiling (RFC 9111 1.2.2); bare ``max-stale`` means this many seconds."""


@dataclass(frozen=True, slots=True)
class CacheControl:
    """Parsed directives; None or False means the directive was absent."""

    max_age: int | None = None
    s_maxage: int | None = None
    min_fresh: int | None = None
    max_stale: int | None = None
    stale_while_revalidate: int | None = None
    stale_if_error: int | None = None
    no_cache: bool = False
    no_cache_fields: tuple[str, ...] = ()
    private: bool = False
    private_fields: tuple[str, ...] = ()
    no_store: bool = False
    public: bool = False
    must_revalidate: bool = False
    proxy_revalidate: bool = False
    must_understand: bool = False
    no_transform: bool = False
    only_if_cached: bool = False
    immutable: bool = False
    invalid: frozenset[str] = frozenset()
    """Names of directives whose argument was malformed (already read restrictively)."""

    def __repr__(self) -> str:
        # Only what was present: the defaults would bury it.
        shown = (
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if getattr(self, f.name) != f.default
        )
        return f"CacheControl({', '.join(shown)})"


DEFAULT = CacheControl()

# Directive name -> (attribute, take the largest of duplicates).
_DELTAS = {
    "max-age": ("max_age", False),
    "s-maxage": ("s_maxage", False),
    "min-fresh": ("min_fresh", True),
    "max-stale": ("max_stale", False),
    "stale-while-revalidate": ("stale_while_revalidate", False),
    "stale-if-error": ("stale_if_error", False),
}
# Delta-seconds directives that may stand alone, and what that means; for the others the
# argument is required (RFC 9111 5.2), so a bare one is invalid.
_BARE = {"max-stale": MAX_DELTA}
_FIELD_LISTS = {"no-cache": "no_cache", "private": "private"}
_FLAGS = {
    "no-store": "no_store",
    "public": "public",
    "must-revalidate": "must_revalidate",
    "proxy-revalidate": "proxy_revalidate",
    "must-understand": "must_understand",
    "no-transform": "no_transform",
    "only-if-cached": "only_if_cached",
    "immutable": "immutable",
}


def parse_cache_control(values: Iterable[str]) -> CacheControl:
    """Parse every Cache-Control field line of one message (``Headers.get_all``)."""
    lines = tuple(values)
    return _parse(lines) if lines else DEFAULT


@lru_cache(maxsize=1024)
def _parse(lines: tuple[str, ...]) -> CacheControl:
    found: dict[str, Any] = {}
    field_lists: dict[str, set[str]] = {}
    invalid: set[str] = set()
    for line in lines:
        for member in split_list(line):
            name, eq, raw = member.partition("=")
            name = name.strip().lower()
            arg = _unquote(raw.strip()) if eq else None
            if name in _DELTAS:
                attr, largest = _DELTAS[name]
                seconds = delta_seconds(arg) if eq else _BARE.get(name)
                if seconds is None:
                    invalid.add(name)
                    seconds = 0
                previous = found.get(attr)
                if previous is not None:
                    seconds = max(previous, seconds) if largest else min(previous, seconds)
                found[attr] = seconds
            elif name in _FIELD_LISTS:
                attr = _FIELD_LISTS[name]
                if eq and arg is None:
                    invalid.add(name)
                names = {n.lower() for n in split_list(arg)} if arg else set()
                if names:
                    field_lists.setdefault(attr, set()).update(names)
                else:
                    found[attr] = True
            elif name in _FLAGS:
                found[_FLAGS[name]] = True
                if eq:
                    invalid.add(name)
    for attr, names in field_lists.items():
        found[f"{attr}_fields"] = tuple(sorted(names))
    if invalid:
        found["invalid"] = frozenset(invalid)
    return CacheControl(**found)


def _unquote(arg: str) -> str | None:
    """The content of a quoted-string (RFC 9110 5.6.4), ``arg`` itself if it is a token, or
    None if it is a malformed quoted-string."""
    if not arg.startswith('"'):
        return arg
    if len(arg) < 2 or not arg.endswith('"'):
        return None
    out: list[str] = []
    chars = iter(arg[1:-1])
    for ch in chars:
        if ch == '"':
            return None
        if ch == "\\":
            escaped = next(chars, None)
            if escaped is None:
                return None  # the backslash escaped the closing quote
            ch = escaped
        out.append(ch)
    return "".join(out)


def delta_seconds(value: str | None) -> int | None:
    """A delta-seconds value (RFC 9111 1.2.2) capped at MAX_DELTA, or None if invalid."""
    if value is None or not (value.isascii() and value.isdigit()):
        return None
    # More than 2**31's ten digits is over the cap (and int() refuses huge strings).
    digits = value.lstrip("0")
    return MAX_DELTA if len(digits) > 10 else min(int(digits or "0"), MAX_DELTA)
