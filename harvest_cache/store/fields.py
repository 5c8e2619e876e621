"""Field lines as stored heads keep them: one copy of what repeats across objects.

A full memory tier holds hundreds of thousands of heads. Their field names repeat, and so
do whole lines such as ``Content-Type: text/plain`` or ``Server: nginx``; decoded afresh
for every response, each copy costs a string or a tuple per object. Measured with 1 KiB
objects as an origin sends them, sharing cut the Python objects of an entry from about
2.9 KB to 1.9 KB.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

Fields = tuple[tuple[str, str], ...]

# Fields whose values come from a small set, so their whole lines are worth sharing.
# (Date, ETag, Last-Modified or Content-Length differ from object to object.)
_REPEATING = frozenset(
    {
        "accept-ranges",
        "access-control-allow-origin",
        "cache-control",
        "content-encoding",
        "content-language",
        "content-type",
        "cross-origin-resource-policy",
        "referrer-policy",
        "server",
        "strict-transport-security",
        "vary",
        "x-content-type-options",
        "x-frame-options",
    }
)
# Lines kept for sharing, at most: a peer sending endless new values only stops the sharing
# of newer ones (the memory tier charges every line in full either way).
_MAX_LINES = 4096
_lines: dict[tuple[str, str], tuple[str, str]] = {}


def shared_fields(fields: Iterable[tuple[str, str]]) -> Fields:
    """``fields`` as a tuple, each line or at least each name replaced by a shared copy."""
    out = []
    for line in fields:
        shared = _lines.get(line)
        if shared is None:
            name, value = line
            if name.lower() in _REPEATING and len(_lines) < _MAX_LINES:
                shared = _lines[line] = (sys.intern(name), value)
            else:
                shared = (sys.intern(name), value)
        out.append(shared)
    return tuple(out)
